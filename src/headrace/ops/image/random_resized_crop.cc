#include "headrace/ops/image/random_resized_crop.h"

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

Status ValidateRandomResizedCropSpec(const RandomResizedCropSpec& spec) {
  if (spec.width <= 0 || spec.height <= 0) {
    return Status::InvalidArgument("image.random_resized_crop needs width > 0 and height > 0");
  }
  if (!(spec.scale[0] > 0 && spec.scale[0] <= spec.scale[1])) {
    return Status::InvalidArgument("image.random_resized_crop needs 0 < scale[0] <= scale[1]");
  }
  if (!(spec.ratio[0] > 0 && spec.ratio[0] <= spec.ratio[1])) {
    return Status::InvalidArgument("image.random_resized_crop needs 0 < ratio[0] <= ratio[1]");
  }
  return Status::Ok();
}

RandomResizedCropOp::RandomResizedCropOp(const RandomResizedCropSpec& spec, int op_position)
    : spec_(spec), op_position_(op_position), valid_(ValidateRandomResizedCropSpec(spec)) {}

Status RandomResizedCropOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  if (ctx.image.empty()) {
    return Status::Internal("image.random_resized_crop: no image (decode first)");
  }
  Rng rng = ctx.OpRng(op_position_);
  const CropWindow w = RandomResizedCropWindow(ctx.image.width, ctx.image.height, spec_, rng);
  const ImageView window = ctx.image.Crop(w.x, w.y, w.width, w.height);
  HR_ASSIGN_OR_RETURN(MutableImageView out,
                      ctx.NextScratchImage(spec_.width, spec_.height, ctx.image.channels));
  HR_RETURN_IF_ERROR(ResizeInto(window, out, /*antialias=*/true));
  ctx.image = out;
  return Status::Ok();
}

}  // namespace headrace
