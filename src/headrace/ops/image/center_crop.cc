#include "headrace/ops/image/center_crop.h"

#include "headrace/ops/schema.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace headrace {

int CenterOffset(int size, int crop) {
  const int d = size - crop;
  const int half = d / 2;
  // d odd: (d / 2) ends in .5 and Python's round() goes to the even neighbour.
  return (d % 2 == 0 || half % 2 == 0) ? half : half + 1;
}

ImageView CenterCropView(ImageView src, int width, int height) {
  return src.Crop(CenterOffset(src.width, width), CenterOffset(src.height, height), width, height);
}

Status CenterCropInto(ImageView src, MutableImageView dst) {
  const int c = src.channels;
  if (src.empty() || dst.data == nullptr || dst.width <= 0 || dst.height <= 0 ||
      dst.channels != c) {
    return Status::InvalidArgument("CenterCropInto: bad source or destination");
  }
  // Per axis: where the copied part starts in src and in dst, and how long it is.
  auto axis = [](int size, int crop, int* src_off, int* dst_off, int* n) {
    if (size >= crop) {
      *src_off = CenterOffset(size, crop);
      *dst_off = 0;
      *n = crop;
    } else {
      *src_off = 0;
      *dst_off = (crop - size) / 2;  // torchvision pads (crop - size) // 2 before
      *n = size;
    }
  };
  int sx, dx, nx, sy, dy, ny;
  axis(src.width, dst.width, &sx, &dx, &nx);
  axis(src.height, dst.height, &sy, &dy, &ny);
  const size_t row_bytes = static_cast<size_t>(dst.width) * c;
  for (int y = 0; y < dst.height; ++y) {
    uint8_t* out = dst.row(y);
    if (y < dy || y >= dy + ny) {
      std::memset(out, 0, row_bytes);
      continue;
    }
    const uint8_t* in = src.row(sy + y - dy) + static_cast<size_t>(sx) * c;
    std::memset(out, 0, static_cast<size_t>(dx) * c);
    std::memcpy(out + static_cast<size_t>(dx) * c, in, static_cast<size_t>(nx) * c);
    std::memset(out + static_cast<size_t>(dx + nx) * c, 0,
                static_cast<size_t>(dst.width - dx - nx) * c);
  }
  return Status::Ok();
}

std::string CropSizeSource(const std::string& key, int width, int height) {
  if (width == height) return key + ".size " + std::to_string(width);
  return key + ".width " + std::to_string(width) + ", height " + std::to_string(height);
}

Status CenterCropOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".field", s.field, "the image value to crop"));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".width", s.width, 1, kMaxImageSide));
  return schema::InRange(p + ".height", s.height, 1, kMaxImageSide);
}

Status CenterCropOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc image, ctx.Read(spec.field, ValueKind::kImage));
  const int64_t channels = image.shape.size() == 3 ? image.shape[2] : -1;
  image.shape = {spec.height, spec.width, channels};
  image.shape_source = CropSizeSource(ctx.key(), spec.width, spec.height);
  return ctx.Write(spec.field, std::move(image));
}

Result<std::unique_ptr<Op>> CenterCropOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(std::make_unique<CenterCropOp>(spec, ctx.slot(spec.field)));
}

CenterCropOp::CenterCropOp(const CenterCropSpec& spec, int slot)
    : spec_(spec), slot_(slot), valid_(Validate(spec, std::string(kName))) {}

Status CenterCropOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  const ImageView* in = ctx.Get<ImageView>(slot_);
  if (in == nullptr || in->empty()) {
    return Status::Internal("image.center_crop: no image (decode first)");
  }
  const ImageView image = *in;
  if (image.width >= spec_.width && image.height >= spec_.height) {
    ctx.Set(slot_, CenterCropView(image, spec_.width, spec_.height));
    return Status::Ok();
  }
  HR_ASSIGN_OR_RETURN(MutableImageView out,
                      ctx.NextScratchImage(spec_.width, spec_.height, image.channels));
  HR_RETURN_IF_ERROR(CenterCropInto(image, out));
  ctx.Set(slot_, ImageView(out));
  return Status::Ok();
}

}  // namespace headrace
