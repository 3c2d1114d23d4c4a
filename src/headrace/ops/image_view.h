// Views of 8-bit interleaved pixels: what a decoded image is as a named value
// (ops/value.h) and in a sample's scratch (SampleContext::NextScratchImage). The image
// operators, their kernels and the owning `Image` are in ops/image/.
//
// Channels are 1 (grey, from image.grayscale), 3 (RGB) or 4 (RGBX: RGB plus one padding
// byte, which several SIMD kernels prefer); `stride` is bytes per row and may exceed
// width * channels, so a crop is a view, not a copy.
#pragma once

#include <cstdint>

namespace headrace {

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

}  // namespace headrace
