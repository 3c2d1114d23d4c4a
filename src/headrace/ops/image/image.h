// 8-bit interleaved images and views over them.
//
// Channels are 1 (grey, from image.grayscale), 3 (RGB) or 4 (RGBX: RGB plus one padding
// byte, which several SIMD kernels prefer); `stride` is bytes per row and may exceed
// width * channels, so a crop is a view, not a copy.
#pragma once

#include <cstdint>

#include "headrace/core/buffer.h"
#include "headrace/core/status.h"

namespace headrace {

// The largest width or height an operator's parameters may ask for (16K: 256 Mpixel);
// beyond it a value is a typo, and products of sizes could overflow.
inline constexpr int kMaxImageSide = 16384;

struct ImageView {
  const uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  int channels = 3;
  int64_t stride = 0;

  bool empty() const { return data == nullptr || width <= 0 || height <= 0; }
  const uint8_t* row(int y) const { return data + y * stride; }
  // The sub-rectangle [x, x + w) x [y, y + h); the caller keeps it inside the image.
  ImageView Crop(int x, int y, int w, int h) const {
    return ImageView{data + y * stride + static_cast<int64_t>(x) * channels, w, h, channels,
                     stride};
  }
};

struct MutableImageView {
  uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  int channels = 3;
  int64_t stride = 0;

  uint8_t* row(int y) const { return data + y * stride; }
  operator ImageView() const { return ImageView{data, width, height, channels, stride}; }  // NOLINT
};

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
