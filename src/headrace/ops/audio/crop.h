// audio.crop: a fixed-length window of audio into the batch: f32 [channels, N] with
// N = seconds x the audio's rate, and `<output>_length` (i64): the real samples in it.
// Longer audio is cropped (a window starting at random, seeded per sample and epoch; at
// the start; or in the center); shorter audio is zero-padded at the end.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/window.h"

namespace headrace {

// What audio.crop and audio.melspectrogram share: kInvalidArgument naming `key` unless
// 0 < seconds <= 3600; `field` read as audio whose rate is fixed at plan time (a config
// error naming the op otherwise); and where their window of `frames` samples lies in a
// sample's audio, which must hold it (kInternal naming `op` otherwise: a producer that
// decoded part of the stream did not follow the window hint).
Status ValidateWindowSeconds(const std::string& key, double seconds);
Result<ValueDesc> ReadFixedRateAudio(PlanContext& ctx, const std::string& field);
struct AudioWindow {
  int64_t begin = 0;  // its first sample in the stream
  int64_t real = 0;   // the samples of audio in it (the rest, past the end, is zeros)
  // Channel c's samples from `begin` on.
  const float* channel(const AudioView& audio, int c) const {
    return audio.channel(c) + (begin - audio.first);
  }
};
Result<AudioWindow> WindowOf(const AudioView& audio, ClipStart start, int64_t frames, Rng rng,
                             std::string_view op);

struct AudioCropSpec {  // audio.crop
  double seconds = 4.0;
  ClipStart start = ClipStart::kRandom;  // random, start, center
  std::string field = "audio";
  std::string output;  // the batch field written; empty: named like `field`
};

class AudioCropOp : public Op {
 public:
  static constexpr std::string_view kName = "audio.crop";
  static constexpr std::string_view kDoc =
      "A fixed-length audio window (seeded random, start or center; zero-padded) into "
      "f32 [C, N] plus <output>_length.";
  using Spec = AudioCropSpec;
  static void Fields(auto& s, auto&& f) {
    f("seconds", s.seconds);
    f("start", s.start);
    f("field", s.field);
    f("output", s.output);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  // Needs the audio's channels and rate fixed (audio.decode's channels and sample_rate,
  // or audio.resample).
  static Status Declare(const Spec& spec, PlanContext& ctx);
  // Reads one window of the audio: its producer may decode just that (AudioWindowHint).
  static void Hint(const Spec& spec, ValueHints& hints, int position);
  // A random window changes with the seed and the epoch.
  static bool DrawsRandom(const Spec& spec) { return spec.start == ClipStart::kRandom; }
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{.seconds = 0.1}; }

  AudioCropOp(const AudioCropSpec& spec, int op_position, int slot, int row, int length_row,
              int channels, int64_t frames);
  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  AudioCropSpec spec_;
  int op_position_, slot_, row_, length_row_, channels_;
  int64_t frames_;
};

}  // namespace headrace
