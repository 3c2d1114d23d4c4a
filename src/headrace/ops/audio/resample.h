// audio.resample: audio to another sample rate (libswresample), channels unchanged.
//
// Also the pieces audio.decode shares: Resampler (a libswresample context converting
// any FFmpeg sample format and rate to planar float), PlanarSamples (growing per-channel
// buffers) and MixChannels (to mono or stereo).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"

extern "C" {
struct SwrContext;
struct AVChannelLayout;
}

namespace headrace {

// Per-channel float samples, appended to as a decoder delivers them.
class PlanarSamples {
 public:
  void Reset(int channels);
  int channels() const { return static_cast<int>(planes_.size()); }
  int64_t frames() const { return frames_; }
  const float* channel(int c) const { return planes_[static_cast<size_t>(c)].data(); }
  // Room for `more` frames past the end: one pointer per channel, valid until Commit.
  std::vector<uint8_t*>& Reserve(int64_t more);
  void Commit(int64_t written) { frames_ += written; }
  // Bytes the planes hold allocated now (their capacity).
  int64_t capacity_bytes() const;
  // Frees the planes when they hold more than `keep_bytes` allocated: a thread's planes,
  // reused from sample to sample, keep no long file's samples for the rest of the run.
  void Trim(int64_t keep_bytes);

 private:
  std::vector<std::vector<float>> planes_;
  std::vector<uint8_t*> out_;
  int64_t frames_ = 0;
};

// Writes `frames` of `in` from frame `from` on as `channels` planar channels to `out`:
// 1 = the mean of the source channels, 2 = a mono source twice or the first two, else
// the same channels.
void MixChannels(const PlanarSamples& in, int64_t from, int64_t frames, int channels,
                 float* out);

// What a resampler's context converts. Building one is slow (swr_init computes the
// polyphase filter: ~310 µs for 44.1 → 8 kHz), resetting one for the same conversion is
// not (swr_init keeps a filter whose parameters did not change and resets the stream:
// ~17 µs, the output byte-identical to a fresh context's). So a Resampler going away
// leaves its context to its thread for the next one with the same key.
struct ResamplerKey {
  int order = -1;  // the layout's AVChannelOrder; -1: not kept (a custom order)
  int channels = 0;
  uint64_t mask = 0;
  int format = 0;
  int in_rate = 0;
  int out_rate = 0;
  bool operator==(const ResamplerKey&) const = default;
};
struct ResamplerFree {
  ResamplerKey key;
  void operator()(SwrContext* swr) const;  // to the thread's idle contexts, or freed
};

class Resampler {
 public:
  // From `layout`, FFmpeg sample format `format` (an AVSampleFormat) at `in_rate` to
  // planar float at `out_rate`, the same channels.
  static Result<Resampler> Make(const AVChannelLayout& layout, int format, int in_rate,
                                int out_rate);
  // `in`: one pointer per plane (or one for packed formats), `frames` per channel.
  Status Convert(const uint8_t** in, int frames, PlanarSamples& out);
  // What the resampler still holds.
  Status Flush(PlanarSamples& out);
  // Whether Make took an idle context of this thread (same conversion) instead of
  // building one.
  bool reused() const { return reused_; }

 private:
  using Key = ResamplerKey;
  using Free = ResamplerFree;
  friend struct ResamplerFree;
  static constexpr size_t kIdleKept = 4;
  static std::vector<std::pair<Key, SwrContext*>>& Idle();
  std::unique_ptr<SwrContext, Free> swr_;
  bool reused_ = false;
};

struct AudioResampleSpec {  // audio.resample
  int sample_rate = 16000;
  std::string field = "audio";
};

class AudioResampleOp : public Op {
 public:
  static constexpr std::string_view kName = "audio.resample";
  static constexpr std::string_view kDoc = "Resample audio to sample_rate (libswresample).";
  using Spec = AudioResampleSpec;
  static void Fields(auto& s, auto&& f) {
    f("sample_rate", s.sample_rate);
    f("field", s.field);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{.sample_rate = 8000}; }

  AudioResampleOp(const AudioResampleSpec& spec, int slot) : spec_(spec), slot_(slot) {}
  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  AudioResampleSpec spec_;
  int slot_;
};

}  // namespace headrace
