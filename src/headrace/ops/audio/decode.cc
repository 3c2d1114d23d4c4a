#include "headrace/ops/audio/decode.h"

#include <algorithm>
#include <cmath>


#include "headrace/ops/audio/resample.h"
#include "headrace/ops/av/av_encode.h"
#include "headrace/ops/av/av_input.h"
#include "headrace/ops/schema.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/frame.h>
}

namespace headrace {

Status AudioDecodeOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::InRange(p + ".sample_rate", s.sample_rate, 0, 384000));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".channels", s.channels, 0, 2));
  if (!(s.max_seconds > 0) || !std::isfinite(s.max_seconds)) {
    return schema::Invalid(p + ".max_seconds", "must be > 0" + schema::Got(s.max_seconds));
  }
  return schema::NonEmpty(p + ".field", s.field, "the audio value to decode");
}

Status AudioDecodeOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_RETURN_IF_ERROR(ctx.Read(spec.field, ValueKind::kEncoded).status());
  ValueDesc audio{ValueKind::kAudio, {spec.channels > 0 ? spec.channels : -1, -1},
                  ctx.key() + " (each file's own length)"};
  audio.rate = spec.sample_rate;
  return ctx.Write(spec.field, std::move(audio));
}

Result<std::unique_ptr<Op>> AudioDecodeOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(std::make_unique<AudioDecodeOp>(spec, ctx.slot(spec.field)));
}

Status AudioDecodeOp::Run(SampleContext& ctx) const {
  const EncodedBytes* media = ctx.Get<EncodedBytes>(slot_);
  if (media == nullptr) {
    return Status::MissingField("the record has no " + spec_.field +
                                " but the pipeline decodes one (audio.decode)");
  }
  HR_ASSIGN_OR_RETURN(std::unique_ptr<av::Input> in,
                      av::Input::Open(media->data, media->size, av::Input::Media::kAudio, 1));
  const AVCodecContext* codec = in->codec();
  const int source_channels = codec->ch_layout.nb_channels;
  if (source_channels <= 0 || codec->sample_rate <= 0) {
    return Status::CorruptData("audio.decode: the stream gives no channel count or rate");
  }
  const int rate = spec_.sample_rate > 0 ? spec_.sample_rate : codec->sample_rate;
  HR_ASSIGN_OR_RETURN(Resampler resampler,
                      Resampler::Make(codec->ch_layout, codec->sample_fmt, codec->sample_rate,
                                      rate));
  // Planar float per source channel, grown as frames arrive (per thread, reused).
  thread_local PlanarSamples planes;
  planes.Reset(source_channels);
  const auto max_frames = static_cast<int64_t>(spec_.max_seconds * rate);
  av::FramePtr frame = av::NewFrame();
  if (frame == nullptr) return Status::ResourceExhausted("av_frame_alloc");
  while (planes.frames() < max_frames) {
    HR_ASSIGN_OR_RETURN(bool got, in->NextFrame(frame.get()));
    if (!got) break;
    HR_RETURN_IF_ERROR(resampler.Convert(const_cast<const uint8_t**>(frame->extended_data),
                                         frame->nb_samples, planes));
  }
  HR_RETURN_IF_ERROR(resampler.Flush(planes));
  const int64_t frames = std::min(planes.frames(), max_frames);
  if (frames == 0) return Status::CorruptData("audio.decode: no samples decode");
  const int channels = spec_.channels > 0 ? spec_.channels : source_channels;
  HR_ASSIGN_OR_RETURN(uint8_t * scratch,
                      ctx.NextScratchBytes(static_cast<size_t>(channels) *
                                           static_cast<size_t>(frames) * sizeof(float)));
  auto* out = reinterpret_cast<float*>(scratch);
  MixChannels(planes, frames, channels, out);
  ctx.Set(slot_, AudioView{out, channels, frames, rate});
  return Status::Ok();
}

std::vector<uint8_t> AudioDecodeOp::ExampleInput(int index) {
  av::AudioClip clip;
  clip.sample_rate = 16000;
  clip.channels = 2;
  clip.seconds = 0.25;
  clip.codec = "pcm_s16le";
  const double hz = 220.0 * (1 + index % 4);
  clip.sample = [hz](int64_t i, int c) {
    return static_cast<float>(0.5 * std::sin(2 * M_PI * hz * static_cast<double>(i) / 16000 +
                                             c));
  };
  Result<std::vector<uint8_t>> bytes = av::EncodeAudio(clip);
  return bytes.ok() ? *std::move(bytes) : std::vector<uint8_t>();
}

}  // namespace headrace
