// Fuzz target: audio.decode on arbitrary bytes (WAV, FLAC, MP3, Ogg/Opus or anything
// else), through the operator as the engine runs it: av::Input over the sample's bytes
// in memory (a custom AVIOContext, no file), libavcodec, libswresample to 8 kHz mono (or
// the file's own rate and channels), then what follows it in a pipeline: audio.crop and
// audio.melspectrogram on the decoded samples.
//
// Properties checked besides "no crash, no leak, no UB": a failure is a data error
// (kCorruptData, kUnsupportedFormat, kResourceExhausted; never kInternal); accepted audio
// has the channels asked (at least one), at least one frame and at most max_seconds of
// them at the rate asked; the crop's length is within its window, the spectrogram's
// within its frames. The input and the batch rows are allocated to their exact size.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/op_fuzz_util.h"
#include "headrace/ops/audio/crop.h"
#include "headrace/ops/audio/decode.h"
#include "headrace/ops/audio/melspectrogram.h"

namespace headrace::fuzz {
namespace {

constexpr double kMaxSeconds = 2.0;
constexpr int kRate = 8000;

// Runs `op` on the mono audio in `values[0]`, into exact rows of `row_bytes` and an i64
// length; returns the length.
int64_t RunOnAudio(const Op& op, Value* values, size_t row_bytes, uint64_t seed) {
  std::vector<uint8_t> row(row_bytes);
  int64_t length = -1;
  uint8_t* rows[2] = {row.data(), reinterpret_cast<uint8_t*>(&length)};
  const Status s = RunOp(op, std::span<Value>(values, 1), rows, seed);
  HR_FUZZ_CHECK(s.ok(), "%s after a good decode: %s", std::string(op.name()).c_str(),
                s.ToString().c_str());
  return length;
}

void Decode(const Buffer& bytes, const AudioDecodeSpec& spec, uint64_t seed) {
  const AudioDecodeOp op(spec, /*slot=*/0);
  ScratchArena scratch;
  Value values[1] = {EncodedBytes{bytes.data(), bytes.size()}};
  SampleContext ctx;
  ctx.sample_seed = seed;
  ctx.scratch = &scratch;
  ctx.values = values;
  const Status s = op.Run(ctx);
  if (!s.ok()) {
    HR_FUZZ_CHECK(IsMediaDataError(s), "unexpected status for bad audio data: %s",
                  s.ToString().c_str());
    return;
  }
  const AudioView* audio = ctx.Get<AudioView>(0);
  HR_FUZZ_CHECK(audio != nullptr, "no decoded audio");
  HR_FUZZ_CHECK(audio->channels >= 1 && (spec.channels == 0 || audio->channels == spec.channels),
                "%d channels", audio->channels);
  HR_FUZZ_CHECK(spec.sample_rate == 0 || audio->sample_rate == spec.sample_rate, "rate %d",
                audio->sample_rate);
  HR_FUZZ_CHECK(audio->frames >= 1 &&
                    audio->frames <= static_cast<int64_t>(kMaxSeconds * audio->sample_rate) + 1,
                "%lld frames at %d Hz", static_cast<long long>(audio->frames),
                audio->sample_rate);
  if (spec.channels != 1 || spec.sample_rate != kRate) return;

  // What a pipeline does next with it: a crop and a log-mel spectrogram of 0.5 s (n_fft
  // 200: Bluestein's DFT).
  const AudioCropOp crop({.seconds = 0.5}, 1, 0, 0, 1, 1, kRate / 2);
  const int64_t kept = RunOnAudio(crop, values, kRate / 2 * sizeof(float), seed);
  HR_FUZZ_CHECK(kept >= 1 && kept <= kRate / 2, "crop length %lld", static_cast<long long>(kept));
  const AudioMelSpectrogramSpec mel_spec{.seconds = 0.5, .n_fft = 200, .n_mels = 20,
                                         .log = MelLog::kDb, .top_db = 80};
  const AudioMelSpectrogramOp mel(mel_spec, 2, 0, 0, 1, kRate);
  const int64_t frames = mel.frames();
  const int64_t covered = RunOnAudio(mel, values, 20 * frames * sizeof(float), seed);
  HR_FUZZ_CHECK(covered >= 1 && covered <= frames, "mel length %lld of %lld",
                static_cast<long long>(covered), static_cast<long long>(frames));
}

}  // namespace
}  // namespace headrace::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headrace;
  const Buffer bytes = fuzz::ExactCopy(data, size);
  fuzz::Decode(bytes, {.sample_rate = fuzz::kRate, .channels = 1, .max_seconds = fuzz::kMaxSeconds},
               size);
  fuzz::Decode(bytes, {.max_seconds = fuzz::kMaxSeconds}, 1);  // the file's own rate, channels
  return 0;
}
