#include "headrace/ops/image/flip.h"

#include <string>

#include "headrace/ops/schema.h"

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

Status FlipOp::Validate(const Spec& spec, const std::string& key) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(key + ".field", spec.field, "the image value to flip"));
  return schema::Probability(key + ".p", spec.p);
}

Status FlipOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc image, ctx.Read(spec.field, ValueKind::kImage));
  return ctx.Write(spec.field, std::move(image));
}

Result<std::unique_ptr<Op>> FlipOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(
      std::make_unique<FlipOp>(spec, ctx.position(), ctx.slot(spec.field)));
}

FlipOp::FlipOp(const FlipSpec& spec, int op_position, int slot)
    : spec_(spec),
      op_position_(op_position),
      slot_(slot),
      valid_(Validate(spec, std::string(kName))) {}

Status FlipOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  const ImageView* in = ctx.Get<ImageView>(slot_);
  if (in == nullptr || in->empty()) return Status::Internal("image.flip: no image (decode first)");
  const ImageView image = *in;
  Rng rng = ctx.OpRng(op_position_);
  if (!rng.Bernoulli(spec_.p)) return Status::Ok();
  HR_ASSIGN_OR_RETURN(MutableImageView out,
                      ctx.NextScratchImage(image.width, image.height, image.channels));
  HR_RETURN_IF_ERROR(FlipHorizontalInto(image, out));
  ctx.Set(slot_, ImageView(out));
  return Status::Ok();
}

}  // namespace headrace
