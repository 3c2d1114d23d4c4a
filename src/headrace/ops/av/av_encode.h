// Writing small media files with FFmpeg's encoders: the clips and tones that
// `headrace make-sample --modalities` generates and the tests decode. Not on any hot path.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/status.h"

namespace headrace::av {

struct VideoClip {
  int width = 64;
  int height = 48;
  int frames = 25;
  int fps = 25;
  int gop = 12;                    // frames between keyframes
  int b_frames = 0;                // B-frames in a row at most; -1: the encoder's default
                                   // (libx264: 3, some of them references: B-pyramid)
  std::string codec = "libx264";   // any FFmpeg encoder of video ("mpeg4", "libx264"; where
                                   // FFmpeg lacks libx264, the wheel's, libopenh264)
  // Paints frame `index` as RGB24 (width * height * 3 bytes, rows packed).
  std::function<void(int index, uint8_t* rgb)> paint;
};

// Encodes `clip` into the file `path`; the container comes from its extension (.mp4,
// .mkv, ...).
Status WriteVideo(const std::string& path, const VideoClip& clip);

// The same, returned as bytes: written to a file of this process's own in the system's
// temporary folder (`extension` names the container) and removed.
Result<std::vector<uint8_t>> EncodeVideo(const VideoClip& clip, std::string_view extension = "mp4");

struct AudioClip {
  int sample_rate = 16000;
  int channels = 1;
  double seconds = 1.0;
  std::string codec = "pcm_s16le";  // pcm_s16le (.wav), flac, libmp3lame, libopus, aac
  int64_t bit_rate = 0;             // bits per second of a lossy codec; 0: its default
  // Sample i of channel c, in [-1, 1].
  std::function<float(int64_t i, int c)> sample;
};

// Encodes `clip` into the file `path` (container from the extension: .wav, .flac, .mp3,
// .ogg/.opus, .m4a).
Status WriteAudio(const std::string& path, const AudioClip& clip);
Result<std::vector<uint8_t>> EncodeAudio(const AudioClip& clip, std::string_view extension = "wav");

}  // namespace headrace::av
