#include "headrace/ops/audio/resample.h"

#include <algorithm>
#include <cstring>

#include "headrace/ops/av/av_input.h"
#include "headrace/ops/schema.h"

extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/samplefmt.h>
#include <libswresample/swresample.h>
}

namespace headrace {

void PlanarSamples::Reset(int channels) {
  planes_.resize(static_cast<size_t>(channels));
  for (auto& p : planes_) p.clear();
  frames_ = 0;
}

int64_t PlanarSamples::capacity_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : planes_) bytes += static_cast<int64_t>(p.capacity() * sizeof(float));
  return bytes;
}

void PlanarSamples::Trim(int64_t keep_bytes) {
  if (capacity_bytes() <= keep_bytes) return;
  std::vector<std::vector<float>>().swap(planes_);
  frames_ = 0;
}

std::vector<uint8_t*>& PlanarSamples::Reserve(int64_t more) {
  out_.clear();
  for (auto& p : planes_) {
    p.resize(static_cast<size_t>(frames_ + more));
    out_.push_back(reinterpret_cast<uint8_t*>(p.data() + frames_));
  }
  return out_;
}

void MixChannels(const PlanarSamples& in, int64_t from, int64_t frames, int channels,
                 float* out) {
  const int source = in.channels();
  if (channels == 1 && source > 1) {
    const float scale = 1.0f / static_cast<float>(source);
    for (int64_t i = 0; i < frames; ++i) {
      float sum = 0;
      for (int c = 0; c < source; ++c) sum += in.channel(c)[from + i];
      out[i] = sum * scale;
    }
    return;
  }
  for (int c = 0; c < channels; ++c) {
    const float* plane = in.channel(std::min(c, source - 1)) + from;  // mono -> stereo: twice
    std::memcpy(out + static_cast<int64_t>(c) * frames, plane, static_cast<size_t>(frames) * 4);
  }
}

// This thread's idle contexts, the most recently left last; freed when the thread ends.
std::vector<std::pair<Resampler::Key, SwrContext*>>& Resampler::Idle() {
  thread_local struct Contexts {
    std::vector<std::pair<Key, SwrContext*>> entries;
    ~Contexts() {
      for (auto& [_, swr] : entries) swr_free(&swr);
    }
  } idle;
  return idle.entries;
}

void ResamplerFree::operator()(SwrContext* swr) const {
  if (swr == nullptr) return;
  if (key.order < 0) {
    swr_free(&swr);
    return;
  }
  auto& idle = Resampler::Idle();
  if (idle.size() >= Resampler::kIdleKept) {  // a few: a pipeline's files come in a handful of formats
    swr_free(&idle.front().second);
    idle.erase(idle.begin());
  }
  idle.emplace_back(key, swr);
}

Result<Resampler> Resampler::Make(const AVChannelLayout& layout, int format, int in_rate,
                                  int out_rate) {
  Key key;
  if (layout.order != AV_CHANNEL_ORDER_CUSTOM) {
    key = Key{static_cast<int>(layout.order), layout.nb_channels,
              layout.order == AV_CHANNEL_ORDER_NATIVE ||
                      layout.order == AV_CHANNEL_ORDER_AMBISONIC
                  ? layout.u.mask
                  : 0,
              format, in_rate, out_rate};
  }
  Resampler r;
  if (key.order >= 0) {
    auto& idle = Idle();
    for (size_t i = idle.size(); i-- > 0;) {
      if (!(idle[i].first == key)) continue;
      SwrContext* swr = idle[i].second;
      idle.erase(idle.begin() + static_cast<std::ptrdiff_t>(i));
      r.swr_ = std::unique_ptr<SwrContext, Free>(swr, Free{key});
      r.reused_ = true;
      // Same conversion: swr_init keeps the filter and resets the stream.
      if (const int rc = swr_init(swr); rc < 0) {
        r.swr_.get_deleter().key.order = -1;  // freed, not kept
        return av::Error("cannot set up the resampler", rc);
      }
      return r;
    }
  }
  SwrContext* swr = nullptr;
  AVChannelLayout copy{};  // FFmpeg 5.1 takes the layouts as non-const
  if (int rc = av_channel_layout_copy(&copy, &layout); rc < 0) {
    return av::Error("bad channel layout", rc);
  }
  int rc = swr_alloc_set_opts2(&swr, &copy, AV_SAMPLE_FMT_FLTP, out_rate, &copy,
                               static_cast<AVSampleFormat>(format), in_rate, 0, nullptr);
  av_channel_layout_uninit(&copy);
  r.swr_ = std::unique_ptr<SwrContext, Free>(swr, Free{key});
  if (rc >= 0) rc = swr_init(swr);
  if (rc < 0) {
    r.swr_.get_deleter().key.order = -1;  // a context that failed is freed, not kept
    return av::Error("cannot set up the resampler", rc);
  }
  return r;
}

Status Resampler::Convert(const uint8_t** in, int frames, PlanarSamples& out) {
  const int room = swr_get_out_samples(swr_.get(), frames);
  if (room < 0) return av::Error("resampling", room);
  std::vector<uint8_t*>& to = out.Reserve(room);
  const int n = swr_convert(swr_.get(), to.data(), room, in, frames);
  if (n < 0) return av::Error("resampling", n);
  out.Commit(n);
  return Status::Ok();
}

Status Resampler::Flush(PlanarSamples& out) { return Convert(nullptr, 0, out); }

Status AudioResampleOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::InRange(p + ".sample_rate", s.sample_rate, 1, 384000));
  return schema::NonEmpty(p + ".field", s.field, "the audio value to resample");
}

Status AudioResampleOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc audio, ctx.Read(spec.field, ValueKind::kAudio));
  audio.rate = spec.sample_rate;
  audio.shape_source = ctx.key();
  return ctx.Write(spec.field, std::move(audio));
}

Result<std::unique_ptr<Op>> AudioResampleOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(std::make_unique<AudioResampleOp>(spec, ctx.slot(spec.field)));
}

Status AudioResampleOp::Run(SampleContext& ctx) const {
  const AudioView* audio = ctx.Get<AudioView>(slot_);
  if (audio == nullptr) return Status::MissingField("audio.resample: no audio '" + spec_.field + "'");
  if (!audio->whole()) {  // the planner gives windows only to the ops that asked
    return Status::Internal("audio.resample: given part of an audio stream");
  }
  if (audio->sample_rate == spec_.sample_rate) return Status::Ok();
  if (audio->channels <= 0 || audio->frames <= 0 || audio->sample_rate <= 0) {
    return Status::CorruptData("audio.resample: empty audio");
  }
  AVChannelLayout layout;
  av_channel_layout_default(&layout, audio->channels);
  HR_ASSIGN_OR_RETURN(Resampler resampler, Resampler::Make(layout, AV_SAMPLE_FMT_FLTP,
                                                          audio->sample_rate, spec_.sample_rate));
  av_channel_layout_uninit(&layout);
  thread_local PlanarSamples planes;
  planes.Reset(audio->channels);
  std::vector<const uint8_t*> in;
  for (int c = 0; c < audio->channels; ++c) {
    in.push_back(reinterpret_cast<const uint8_t*>(audio->channel(c)));
  }
  // swr_convert takes frames as int: long audio goes in pieces.
  constexpr int64_t kPiece = int64_t{1} << 20;
  for (int64_t done = 0; done < audio->frames; done += kPiece) {
    const int n = static_cast<int>(std::min(kPiece, audio->frames - done));
    std::vector<const uint8_t*> at = in;
    for (auto& p : at) p += done * static_cast<int64_t>(sizeof(float));
    HR_RETURN_IF_ERROR(resampler.Convert(at.data(), n, planes));
  }
  HR_RETURN_IF_ERROR(resampler.Flush(planes));
  if (planes.frames() == 0) return Status::CorruptData("audio.resample: no samples out");
  HR_ASSIGN_OR_RETURN(uint8_t * scratch,
                      ctx.NextScratchBytes(static_cast<size_t>(audio->channels) *
                                           static_cast<size_t>(planes.frames()) * sizeof(float)));
  auto* out = reinterpret_cast<float*>(scratch);
  MixChannels(planes, 0, planes.frames(), audio->channels, out);
  ctx.Set(slot_, AudioView{out, audio->channels, planes.frames(), spec_.sample_rate});
  return Status::Ok();
}

}  // namespace headrace
