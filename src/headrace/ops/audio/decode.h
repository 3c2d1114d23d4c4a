// audio.decode: an audio file (WAV, FLAC, MP3, Ogg/Vorbis, Opus, AAC, ... whatever the
// installed FFmpeg reads) to float samples, planar, in scratch: the value `field` becomes
// audio. Optionally resampled (libswresample, in the same pass) and mixed to mono (the
// mean of the channels) or to stereo (a mono source duplicated; more channels: the first
// two). Reads at most `max_seconds` of a long file.
//
// When the ops after it read only one window of the audio (audio.crop or
// audio.melspectrogram alone: the plan's AudioWindowHint), it decodes about that window
// and gives a view of part of the stream (AudioView::first): the same samples as
// decoding all of it, bit for bit, for the codecs where that is known to hold (MP3,
// FLAC, PCM); others are decoded whole. See README.md.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"

namespace headrace {
namespace av {
class Input;
}

struct AudioDecodeSpec {  // audio.decode
  int sample_rate = 0;      // > 0: resample to it; 0: the file's own rate
  int channels = 0;         // 1: mono, 2: stereo; 0: the file's own channels
  double max_seconds = 600;  // read at most this much (a long file is cut)
  std::string field = "audio";
};

class AudioDecodeOp : public Op {
 public:
  static constexpr std::string_view kName = "audio.decode";
  static constexpr std::string_view kDoc =
      "Decode audio (FFmpeg) to float samples; optional resample and mono/stereo mix.";
  using Spec = AudioDecodeSpec;
  static void Fields(auto& s, auto&& f) {
    f("sample_rate", s.sample_rate);
    f("channels", s.channels);
    f("max_seconds", s.max_seconds);
    f("field", s.field);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads the encoded `field`, writes it back as audio (channels and rate when set).
  static Status Declare(const Spec& spec, PlanContext& ctx);
  // Takes the window the later ops read of `field`, if one (ctx.window_hint).
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{.sample_rate = 8000, .channels = 1}; }
  // The battery's input: a short WAV tone per index.
  static std::vector<uint8_t> ExampleInput(int index);

  // `decode_bytes` > 0: what a sample's decoded samples may take (memory.
  // decode_bytes_per_thread): a file that would decode to more fails (kResourceExhausted)
  // before it is decoded when its header says so, else when its samples pass it.
  AudioDecodeOp(const AudioDecodeSpec& spec, int slot, AudioWindowHint window = {},
                int64_t decode_bytes = 0)
      : spec_(spec), slot_(slot), window_(window), decode_bytes_(decode_bytes) {}
  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;
  const AudioWindowHint& window() const { return window_; }

 private:
  // Decodes the part of the stream the window needs into ctx (true), or nothing (false:
  // the codec or the stream's timestamps do not allow it; `in` is then read to its end).
  Result<bool> RunWindow(av::Input& in, SampleContext& ctx) const;

  AudioDecodeSpec spec_;
  int slot_;
  AudioWindowHint window_;  // the one part later ops read; none: all of it
  int64_t decode_bytes_;
};

}  // namespace headrace
