// make-sample's speech clips (`--modalities audio` when espeak-ng is installed): sample i
// gets speech/<id>.wav, SpeechText(i) spoken by the espeak-ng program, and its manifest
// line the keys "speech" (the file) and "speech_text" (the transcript), so that an
// ASR-style pipeline pairs audio with its text (examples/asr.yaml).
//
// espeak-ng is run as a child process (posix_spawn, no shell: the text is one argv
// entry), not linked: it stays an optional run-time tool, and libespeak-ng keeps global
// state that would serialize make-sample's threads. Its WAV is what espeak-ng writes
// (16-bit PCM, mono, 22,050 Hz for its voices), deterministic for one espeak-ng version
// and voice; another version may speak the same text differently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "headrace/core/status.h"

namespace headrace {

// What sample i's clip says: the five words of its OCR page (OcrLines(i) without the
// sample number), space-separated, e.g. "river silver water table animal". A pure
// function of i.
std::string SpeechText(int64_t i);

// The path of the executable `name` in $PATH's folders (the first that is a regular,
// executable file), or "" when there is none.
std::string FindOnPath(std::string_view name);

// Runs `espeak` (a path to espeak-ng) to speak `text` (US English) into the WAV file
// `path`; returns the file's size. kIoError when the program cannot be started, exits
// other than 0 (its stderr, cut, in the message), or leaves no file.
Result<int64_t> WriteSpeech(const std::string& espeak, const std::string& text,
                            const std::filesystem::path& path);

}  // namespace headrace
