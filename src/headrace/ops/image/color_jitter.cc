// Hand-written kernels (adjust.h): none of libjpeg-turbo, libpng, libwebp or libyuv
// provides brightness/contrast/saturation/hue adjustment.
#include "headrace/ops/image/color_jitter.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "headrace/ops/image/adjust.h"
#include "headrace/ops/schema.h"

namespace headrace {
namespace {

Status NonNegative(const std::string& key, double v) {
  if (std::isfinite(v) && v >= 0) return Status::Ok();
  return schema::Invalid(key, "must be finite and >= 0" + schema::Got(v));
}

}  // namespace

ColorJitterParams DrawColorJitter(const ColorJitterSpec& spec, Rng& rng) {
  using Kind = ColorJitterParams::Kind;
  ColorJitterParams params;
  if (!rng.Bernoulli(spec.p)) return params;
  Kind order[4] = {Kind::kBrightness, Kind::kContrast, Kind::kSaturation, Kind::kHue};
  for (int i = 3; i > 0; --i) std::swap(order[i], order[rng.Below(static_cast<uint64_t>(i) + 1)]);
  // Factors in torchvision's order (brightness, contrast, saturation, hue), each drawn
  // only when its parameter is set.
  float factor[4] = {1, 1, 1, 0};
  bool used[4] = {spec.brightness > 0, spec.contrast > 0, spec.saturation > 0, spec.hue > 0};
  const double scales[3] = {spec.brightness, spec.contrast, spec.saturation};
  for (int k = 0; k < 3; ++k) {
    if (used[k]) {
      factor[k] = static_cast<float>(rng.Uniform(std::max(0.0, 1.0 - scales[k]), 1.0 + scales[k]));
    }
  }
  if (used[3]) factor[3] = static_cast<float>(rng.Uniform(-spec.hue, spec.hue));
  for (Kind kind : order) {
    const int k = static_cast<int>(kind);
    if (used[k]) params.steps[params.count++] = {kind, factor[k]};
  }
  return params;
}

Status ColorJitterInto(ImageView src, MutableImageView dst, const ColorJitterParams& params) {
  using Kind = ColorJitterParams::Kind;
  ImageView in = src;
  for (int i = 0; i < params.count; ++i) {
    const auto [kind, factor] = params.steps[i];
    switch (kind) {
      case Kind::kBrightness: HR_RETURN_IF_ERROR(AdjustBrightnessInto(in, dst, factor)); break;
      case Kind::kContrast: HR_RETURN_IF_ERROR(AdjustContrastInto(in, dst, factor)); break;
      case Kind::kSaturation: HR_RETURN_IF_ERROR(AdjustSaturationInto(in, dst, factor)); break;
      case Kind::kHue: HR_RETURN_IF_ERROR(AdjustHueInto(in, dst, factor)); break;
    }
    in = dst;  // the rest in place
  }
  return Status::Ok();
}

Status ColorJitterOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".field", s.field, "the image value to adjust"));
  HR_RETURN_IF_ERROR(NonNegative(p + ".brightness", s.brightness));
  HR_RETURN_IF_ERROR(NonNegative(p + ".contrast", s.contrast));
  HR_RETURN_IF_ERROR(NonNegative(p + ".saturation", s.saturation));
  if (!(s.hue >= 0 && s.hue <= 0.5)) {
    return schema::Invalid(p + ".hue", "must be in [0, 0.5]" + schema::Got(s.hue));
  }
  return schema::Probability(p + ".p", s.p);
}

Status ColorJitterOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc image, ctx.Read(spec.field, ValueKind::kImage));
  return ctx.Write(spec.field, std::move(image));
}

Result<std::unique_ptr<Op>> ColorJitterOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(
      std::make_unique<ColorJitterOp>(spec, ctx.position(), ctx.slot(spec.field)));
}

ColorJitterOp::ColorJitterOp(const ColorJitterSpec& spec, int op_position, int slot)
    : spec_(spec),
      op_position_(op_position),
      slot_(slot),
      valid_(Validate(spec, std::string(kName))) {}

Status ColorJitterOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  const ImageView* in = ctx.Get<ImageView>(slot_);
  if (in == nullptr || in->empty()) {
    return Status::Internal("image.color_jitter: no image (decode first)");
  }
  const ImageView image = *in;
  Rng rng = ctx.OpRng(op_position_);
  const ColorJitterParams params = DrawColorJitter(spec_, rng);
  if (params.count == 0) return Status::Ok();
  HR_ASSIGN_OR_RETURN(MutableImageView out,
                      ctx.NextScratchImage(image.width, image.height, image.channels));
  HR_RETURN_IF_ERROR(ColorJitterInto(image, out, params));
  ctx.Set(slot_, ImageView(out));
  return Status::Ok();
}

}  // namespace headrace
