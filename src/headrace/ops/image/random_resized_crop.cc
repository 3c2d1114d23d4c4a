#include "headrace/ops/image/random_resized_crop.h"

#include <cmath>

#include "headrace/ops/image/center_crop.h"
#include "headrace/ops/schema.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "headrace/ops/image/resize.h"

namespace headrace {

CropWindow RandomResizedCropWindow(int width, int height, const RandomResizedCropSpec& spec,
                                   Rng& rng) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(spec.ratio[0]);
  const double log_hi = std::log(spec.ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(spec.scale[0], spec.scale[1]);
    const double aspect = std::exp(rng.Uniform(log_lo, log_hi));
    // nearbyint rounds half to even, like Python's round().
    const double w = std::nearbyint(std::sqrt(target_area * aspect));
    const double h = std::nearbyint(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      CropWindow window;
      window.width = static_cast<int>(w);
      window.height = static_cast<int>(h);
      window.y = static_cast<int>(rng.Below(static_cast<uint64_t>(height - window.height) + 1));
      window.x = static_cast<int>(rng.Below(static_cast<uint64_t>(width - window.width) + 1));
      return window;
    }
  }
  // Fallback: the whole image, cut to the nearest allowed aspect ratio, centred.
  CropWindow window{0, 0, width, height};
  const double in_ratio = static_cast<double>(width) / height;
  if (in_ratio < spec.ratio[0]) {
    window.height = static_cast<int>(std::nearbyint(width / spec.ratio[0]));
  } else if (in_ratio > spec.ratio[1]) {
    window.width = static_cast<int>(std::nearbyint(height * spec.ratio[1]));
  }
  window.width = std::clamp(window.width, 1, width);
  window.height = std::clamp(window.height, 1, height);
  window.x = (width - window.width) / 2;
  window.y = (height - window.height) / 2;
  return window;
}

Status RandomResizedCropOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".field", s.field, "the image value to crop"));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".width", s.width, 1, kMaxImageSide));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".height", s.height, 1, kMaxImageSide));
  const auto& [s0, s1] = s.scale;
  if (!(s0 > 0 && s0 <= s1 && s1 <= 1)) {
    return schema::Invalid(p + ".scale", "must be [min, max] with 0 < min <= max <= 1 (got [" +
                                             schema::FormatDouble(s0) + ", " +
                                             schema::FormatDouble(s1) + "])");
  }
  const auto& [r0, r1] = s.ratio;
  if (!(r0 > 0 && r0 <= r1 && std::isfinite(r1))) {
    return schema::Invalid(p + ".ratio", "must be [min, max] with 0 < min <= max (got [" +
                                             schema::FormatDouble(r0) + ", " +
                                             schema::FormatDouble(r1) + "])");
  }
  return Status::Ok();
}

Status RandomResizedCropOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc image, ctx.Read(spec.field, ValueKind::kImage));
  const int64_t channels = image.shape.size() == 3 ? image.shape[2] : -1;
  image.shape = {spec.height, spec.width, channels};
  image.shape_source = CropSizeSource(ctx.key(), spec.width, spec.height);
  return ctx.Write(spec.field, std::move(image));
}

Result<std::unique_ptr<Op>> RandomResizedCropOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(
      std::make_unique<RandomResizedCropOp>(spec, ctx.position(), ctx.slot(spec.field)));
}

RandomResizedCropOp::RandomResizedCropOp(const RandomResizedCropSpec& spec, int op_position,
                                         int slot)
    : spec_(spec),
      op_position_(op_position),
      slot_(slot),
      valid_(Validate(spec, std::string(kName))) {}

Status RandomResizedCropOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  const ImageView* in = ctx.Get<ImageView>(slot_);
  if (in == nullptr || in->empty()) {
    return Status::Internal("image.random_resized_crop: no image (decode first)");
  }
  const ImageView image = *in;
  Rng rng = ctx.OpRng(op_position_);
  const CropWindow w = RandomResizedCropWindow(image.width, image.height, spec_, rng);
  const ImageView window = image.Crop(w.x, w.y, w.width, w.height);
  HR_ASSIGN_OR_RETURN(MutableImageView out,
                      ctx.NextScratchImage(spec_.width, spec_.height, image.channels));
  HR_RETURN_IF_ERROR(ResizeInto(window, out, /*antialias=*/true));
  ctx.Set(slot_, ImageView(out));
  return Status::Ok();
}

}  // namespace headrace
