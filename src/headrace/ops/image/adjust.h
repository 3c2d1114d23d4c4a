// Pixel-wise colour kernels shared by the augmentation ops (image.color_jitter,
// image.grayscale, image.rand_augment), with torchvision's semantics on uint8 images.
//
// None of the libraries we link provides them: libjpeg-turbo, libpng and libwebp only
// code images, and libyuv converts between YUV/RGB layouts (its ARGBGray uses 8-bit BT.601
// weights on BGRA memory order, and it has no saturation, hue or contrast blend). So they
// are hand-written: a 256-entry table per image where the result depends on the value
// alone (brightness, contrast), a per-row loop templated on the channel count otherwise.
//
// Images are 1 (grey), 3 (RGB) or 4 (RGBX) channels; the X byte is copied unchanged. Every
// kernel here works elementwise, so `src` and `dst` (same size and channels) may be the
// same memory: ops chain them in place in one scratch image.
//
// Rounding: a blend is torchvision's `_blend` on uint8, clamp(f * a + (1 - f) * b, 0, 255)
// in float, truncated to an integer (PIL's Image.blend truncates too). Grey is ITU-R
// BT.601 luma rounded, with PIL's fixed-point weights (R 19595, G 38470, B 7471 / 65536 =
// 0.299, 0.587, 0.114).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"

namespace headrace {

// A blend's value as a byte: clamped to [0, 255] in float, then truncated (the rounding
// above).
inline uint8_t ClampTrunc(float v) { return static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f)); }

// BT.601 luma of one pixel, rounded: PIL's convert("L").
inline uint8_t Gray601(uint8_t r, uint8_t g, uint8_t b) {
  return static_cast<uint8_t>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

// The mean of the image's luma (of its values for 1 channel), as adjust_contrast uses it.
double MeanGray(ImageView src);

// Whether src and dst are the same shape with 1, 3 or 4 channels (the kernels' precondition).
Status CheckSameShape(ImageView src, MutableImageView dst, const char* kernel);

// dst = lut[c][src] per channel c < 3 (1-channel images use lut[0]); X is copied.
using ChannelLuts = std::array<std::array<uint8_t, 256>, 3>;
Status ApplyLuts(ImageView src, MutableImageView dst, const ChannelLuts& luts);

// The table of blend(v, other, factor) = trunc(clamp(factor * v + (1 - factor) * other)).
std::array<uint8_t, 256> BlendLut(float factor, float other);

// torchvision adjust_brightness: blend with black. factor >= 0; 1 is the identity.
Status AdjustBrightnessInto(ImageView src, MutableImageView dst, float factor);
// torchvision adjust_contrast: blend with the mean grey (MeanGray). 0 gives a uniform
// image of the mean grey (truncated); 1 is the identity.
Status AdjustContrastInto(ImageView src, MutableImageView dst, float factor);
// torchvision adjust_saturation: blend with the pixel's own grey (Gray601). 0 gives the
// grey image; 1 is the identity. A 1-channel image is copied.
Status AdjustSaturationInto(ImageView src, MutableImageView dst, float factor);
// torchvision adjust_hue: shift the hue by `shift` turns, shift in [-0.5, 0.5], through
// HSV in float (torchvision's _rgb2hsv / _hsv2rgb, and convert_image_dtype's v * 255.999
// back to uint8). 0.5 maps pure red to cyan. A 1-channel image is copied.
Status AdjustHueInto(ImageView src, MutableImageView dst, float shift);

// Writes the BT.601 grey of `src` (3 or 4 channels) into `dst`: 1 channel, or src's
// channel count with the grey in R, G and B (X copied). Not in place when dst has 1 channel.
Status GrayscaleInto(ImageView src, MutableImageView dst);

}  // namespace headrace
