#include "headrace/ops/image/flip.h"

#include <string>

#include "libyuv/planar_functions.h"

namespace headrace {

Status FlipHorizontalInto(ImageView src, MutableImageView dst) {
  if (src.empty() || dst.width != src.width || dst.height != src.height ||
      dst.channels != src.channels || (src.channels != 3 && src.channels != 4)) {
    return Status::InvalidArgument("FlipHorizontalInto: needs same-shape 3- or 4-channel images");
  }
  const int rc = src.channels == 4
                     ? libyuv::ARGBMirror(src.data, static_cast<int>(src.stride), dst.data,
                                          static_cast<int>(dst.stride), src.width, src.height)
                     : libyuv::RGB24Mirror(src.data, static_cast<int>(src.stride), dst.data,
                                           static_cast<int>(dst.stride), src.width, src.height);
  if (rc != 0) return Status::Internal("libyuv mirror failed");
  return Status::Ok();
}

Status ValidateFlipSpec(const FlipSpec& spec) {
  if (!(spec.p >= 0.0 && spec.p <= 1.0)) {
    return Status::InvalidArgument("image.flip needs 0 <= p <= 1, got " + std::to_string(spec.p));
  }
  return Status::Ok();
}

FlipOp::FlipOp(const FlipSpec& spec, int op_position)
    : spec_(spec), op_position_(op_position), valid_(ValidateFlipSpec(spec)) {}

Status FlipOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  if (ctx.image.empty()) return Status::Internal("image.flip: no image (decode first)");
  Rng rng = ctx.OpRng(op_position_);
  if (!rng.Bernoulli(spec_.p)) return Status::Ok();
  HR_ASSIGN_OR_RETURN(MutableImageView out,
                      ctx.NextScratchImage(ctx.image.width, ctx.image.height, ctx.image.channels));
  HR_RETURN_IF_ERROR(FlipHorizontalInto(ctx.image, out));
  ctx.image = out;
  return Status::Ok();
}

}  // namespace headrace
