// 8-bit interleaved images: the owning `Image`, over the views of ops/image_view.h
// (channels 1, 3 or 4; rows `stride` bytes apart).
#pragma once

#include <cstdint>

#include "headrace/core/buffer.h"
#include "headrace/core/status.h"
#include "headrace/ops/image_view.h"

namespace headrace {

// The largest width or height an operator's parameters may ask for (16K: 256 Mpixel);
// beyond it a value is a typo, and products of sizes could overflow.
inline constexpr int kMaxImageSide = 16384;

// An image that owns its pixels (tests, tools, and kernels' allocating forms).
class Image {
 public:
  Image() = default;
  static Result<Image> Allocate(int width, int height, int channels);

  ImageView view() const { return ImageView{buffer_.data(), width_, height_, channels_, stride_}; }
  MutableImageView mutable_view() const {
    return MutableImageView{buffer_.mutable_data(), width_, height_, channels_, stride_};
  }
  int width() const { return width_; }
  int height() const { return height_; }
  int channels() const { return channels_; }

 private:
  Buffer buffer_;
  int width_ = 0;
  int height_ = 0;
  int channels_ = 3;
  int64_t stride_ = 0;
};

}  // namespace headrace
