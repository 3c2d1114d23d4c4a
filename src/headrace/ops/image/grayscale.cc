// Hand-written kernel (adjust.h: GrayscaleInto): libyuv's ARGBGray has 8-bit weights and
// BGRA order, not PIL's rounding; no other linked library converts RGB to grey.
#include "headrace/ops/image/grayscale.h"

#include <string>
#include <utility>

#include "headrace/ops/image/adjust.h"
#include "headrace/ops/schema.h"

namespace headrace {

Status GrayscaleOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".field", s.field, "the image value to convert"));
  HR_RETURN_IF_ERROR(schema::Probability(p + ".p", s.p));
  if (s.num_output_channels != 1 && s.num_output_channels != 3) {
    return schema::Invalid(p + ".num_output_channels",
                           "must be 1 or 3" + schema::Got(s.num_output_channels));
  }
  if (s.num_output_channels == 1 && s.p != 1.0) {
    return schema::Invalid(p + ".num_output_channels",
                           "1 needs p: 1 (samples left in colour would keep 3 channels; "
                           "use 3 for a random grayscale)");
  }
  return Status::Ok();
}

Status GrayscaleOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc image, ctx.Read(spec.field, ValueKind::kImage));
  if (spec.num_output_channels == 1) {
    if (image.shape.size() == 3) {
      image.shape[2] = 1;
    } else {
      image.shape = {-1, -1, 1};
    }
  }
  return ctx.Write(spec.field, std::move(image));
}

Result<std::unique_ptr<Op>> GrayscaleOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(
      std::make_unique<GrayscaleOp>(spec, ctx.position(), ctx.slot(spec.field)));
}

GrayscaleOp::GrayscaleOp(const GrayscaleSpec& spec, int op_position, int slot)
    : spec_(spec),
      op_position_(op_position),
      slot_(slot),
      valid_(Validate(spec, std::string(kName))) {}

Status GrayscaleOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  const ImageView* in = ctx.Get<ImageView>(slot_);
  if (in == nullptr || in->empty()) {
    return Status::Internal("image.grayscale: no image (decode first)");
  }
  const ImageView image = *in;
  if (image.channels == 1) return Status::Ok();  // already grey
  Rng rng = ctx.OpRng(op_position_);
  if (!rng.Bernoulli(spec_.p)) return Status::Ok();
  const int channels = spec_.num_output_channels == 1 ? 1 : image.channels;
  HR_ASSIGN_OR_RETURN(MutableImageView out,
                      ctx.NextScratchImage(image.width, image.height, channels));
  HR_RETURN_IF_ERROR(GrayscaleInto(image, out));
  ctx.Set(slot_, ImageView(out));
  return Status::Ok();
}

}  // namespace headrace
