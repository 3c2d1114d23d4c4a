#include "headrace/ops/image/center_crop.h"

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

Status ValidateCenterCropSpec(const CenterCropSpec& spec) {
  if (spec.width <= 0 || spec.height <= 0) {
    return Status::InvalidArgument("image.center_crop needs width > 0 and height > 0, got " +
                                   std::to_string(spec.width) + "x" + std::to_string(spec.height));
  }
  return Status::Ok();
}

CenterCropOp::CenterCropOp(const CenterCropSpec& spec)
    : spec_(spec), valid_(ValidateCenterCropSpec(spec)) {}

Status CenterCropOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  if (ctx.image.empty()) return Status::Internal("image.center_crop: no image (decode first)");
  if (ctx.image.width >= spec_.width && ctx.image.height >= spec_.height) {
    ctx.image = CenterCropView(ctx.image, spec_.width, spec_.height);
    return Status::Ok();
  }
  HR_ASSIGN_OR_RETURN(MutableImageView out,
                      ctx.NextScratchImage(spec_.width, spec_.height, ctx.image.channels));
  HR_RETURN_IF_ERROR(CenterCropInto(ctx.image, out));
  ctx.image = out;
  return Status::Ok();
}

}  // namespace headrace
