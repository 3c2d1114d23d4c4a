#include "headrace/ops/audio/crop.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "headrace/ops/schema.h"

namespace headrace {
namespace {

std::string OutputOf(const AudioCropSpec& spec) {
  return spec.output.empty() ? spec.field : spec.output;
}

}  // namespace

Status ValidateWindowSeconds(const std::string& key, double seconds) {
  if (seconds > 0 && seconds <= 3600) return Status::Ok();
  return schema::Invalid(key, "must be in (0, 3600]" + schema::Got(seconds));
}

Result<ValueDesc> ReadFixedRateAudio(PlanContext& ctx, const std::string& field) {
  HR_ASSIGN_OR_RETURN(ValueDesc audio, ctx.Read(field, ValueKind::kAudio));
  if (audio.rate <= 0) {
    return ctx.Error("the sample rate of '" + field + "' varies between files (" +
                     audio.shape_source + "): set audio.decode.sample_rate or add "
                     "audio.resample before it");
  }
  return audio;
}

Result<AudioWindow> WindowOf(const AudioView& audio, ClipStart start, int64_t frames, Rng rng,
                             std::string_view op) {
  const int64_t total = audio.total_frames();
  AudioWindow window;
  window.begin = WindowBegin(start, total, frames, rng);
  window.real = std::max<int64_t>(0, std::min(frames, total - window.begin));
  if (window.begin < audio.first || window.begin + window.real > audio.first + audio.frames) {
    return Status::Internal(std::string(op) + ": the window [" + std::to_string(window.begin) +
                            ", +" + std::to_string(window.real) + ") is not in the audio held [" +
                            std::to_string(audio.first) + ", +" + std::to_string(audio.frames) +
                            ")");
  }
  return window;
}

Status AudioCropOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(ValidateWindowSeconds(p + ".seconds", s.seconds));
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".start", s.start));
  return schema::NonEmpty(p + ".field", s.field, "the audio value to crop");
}

Status AudioCropOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(const ValueDesc audio, ReadFixedRateAudio(ctx, spec.field));
  if (audio.shape.empty() || audio.shape[0] <= 0) {
    return ctx.Error("the channel count of '" + spec.field + "' varies between files: set "
                     "audio.decode.channels (1 or 2)");
  }
  const int64_t frames = AudioWindowHint{spec.seconds}.frames(audio.rate);
  if (frames < 1) return ctx.Error("seconds x sample rate is less than one sample");
  const std::string source = ctx.key() + ".seconds " + schema::FormatDouble(spec.seconds) +
                             " at " + std::to_string(audio.rate) + " Hz";
  ctx.AddField(FieldSpec{OutputOf(spec), DType::kF32, {audio.shape[0], frames}}, source);
  ctx.AddField(FieldSpec{OutputOf(spec) + "_length", DType::kI64, {}}, source);
  return Status::Ok();
}

void AudioCropOp::Hint(const Spec& spec, ValueHints& hints, int position) {
  hints.ReadWindow(spec.field, AudioWindowHint{spec.seconds, spec.start, position});
}

Result<std::unique_ptr<Op>> AudioCropOp::Make(const Spec& spec, PlanContext& ctx) {
  const ValueDesc* audio = ctx.input(spec.field);
  if (audio == nullptr) return ctx.Error("made without its declaration");
  return std::unique_ptr<Op>(std::make_unique<AudioCropOp>(
      spec, ctx.position(), ctx.slot(spec.field), ctx.row(OutputOf(spec)),
      ctx.row(OutputOf(spec) + "_length"), static_cast<int>(audio->shape[0]),
      AudioWindowHint{spec.seconds}.frames(audio->rate)));
}

AudioCropOp::AudioCropOp(const AudioCropSpec& spec, int op_position, int slot, int row,
                         int length_row, int channels, int64_t frames)
    : spec_(spec),
      op_position_(op_position),
      slot_(slot),
      row_(row),
      length_row_(length_row),
      channels_(channels),
      frames_(frames) {}

Status AudioCropOp::Run(SampleContext& ctx) const {
  const AudioView* audio = ctx.Get<AudioView>(slot_);
  if (audio == nullptr) return Status::MissingField("audio.crop: no audio '" + spec_.field + "'");
  if (audio->channels != channels_) {
    return Status::Internal("audio.crop: " + std::to_string(audio->channels) +
                            " channels where the plan has " + std::to_string(channels_));
  }
  HR_ASSIGN_OR_RETURN(const AudioWindow window,
                      WindowOf(*audio, spec_.start, frames_, ctx.OpRng(op_position_), kName));
  const int64_t n = window.real;
  auto* out = reinterpret_cast<float*>(ctx.rows[row_]);
  for (int c = 0; c < channels_; ++c) {
    float* to = out + static_cast<int64_t>(c) * frames_;
    if (n > 0) {
      std::memcpy(to, window.channel(*audio, c), static_cast<size_t>(n) * sizeof(float));
    }
    std::memset(to + n, 0, static_cast<size_t>(frames_ - n) * sizeof(float));
  }
  std::memcpy(ctx.rows[length_row_], &n, sizeof n);
  return Status::Ok();
}

}  // namespace headrace
