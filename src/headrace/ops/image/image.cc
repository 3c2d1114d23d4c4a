#include "headrace/ops/image/image.h"

namespace headrace {

Result<Image> Image::Allocate(int width, int height, int channels) {
  if (width <= 0 || height <= 0 || (channels != 1 && channels != 3 && channels != 4)) {
    return Status::InvalidArgument("bad image shape " + std::to_string(width) + "x" +
                                   std::to_string(height) + "x" + std::to_string(channels));
  }
  Image image;
  image.width_ = width;
  image.height_ = height;
  image.channels_ = channels;
  image.stride_ = static_cast<int64_t>(width) * channels;
  HR_ASSIGN_OR_RETURN(image.buffer_, Buffer::Allocate(static_cast<size_t>(image.stride_) * height));
  return image;
}

}  // namespace headrace
