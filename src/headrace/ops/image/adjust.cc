#include "headrace/ops/image/adjust.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace headrace {
namespace {

inline uint8_t ClampTrunc(float v) {
  return static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
}

// Calls f.template operator()<C>() with the image's channel count as a constant, so that
// the per-pixel loops have a fixed stride.
template <typename F>
void WithChannels(int channels, F&& f) {
  switch (channels) {
    case 1: f.template operator()<1>(); break;
    case 3: f.template operator()<3>(); break;
    default: f.template operator()<4>(); break;
  }
}

void CopyImage(ImageView src, MutableImageView dst) {
  if (src.data == dst.data) return;
  const size_t bytes = static_cast<size_t>(src.width) * src.channels;
  for (int y = 0; y < src.height; ++y) std::memcpy(dst.row(y), src.row(y), bytes);
}

// torchvision's _rgb2hsv, one pixel, values in [0, 1].
inline void RgbToHsv(float r, float g, float b, float& h, float& s, float& v) {
  const float maxc = std::max(r, std::max(g, b));
  const float minc = std::min(r, std::min(g, b));
  const bool eqc = maxc == minc;
  const float cr = maxc - minc;
  s = cr / (eqc ? 1.0f : maxc);
  const float div = eqc ? 1.0f : cr;
  const float rc = (maxc - r) / div;
  const float gc = (maxc - g) / div;
  const float bc = (maxc - b) / div;
  float hue;
  if (maxc == r) {
    hue = bc - gc;
  } else if (maxc == g) {
    hue = 2.0f + rc - bc;
  } else {
    hue = 4.0f + gc - rc;
  }
  h = std::fmod(hue / 6.0f + 1.0f, 1.0f);
  v = maxc;
}

// torchvision's _hsv2rgb, one pixel.
inline void HsvToRgb(float h, float s, float v, float& r, float& g, float& b) {
  const float i_f = std::floor(h * 6.0f);
  const float f = h * 6.0f - i_f;
  int i = static_cast<int>(i_f) % 6;
  if (i < 0) i += 6;
  const float p = std::clamp(v * (1.0f - s), 0.0f, 1.0f);
  const float q = std::clamp(v * (1.0f - s * f), 0.0f, 1.0f);
  const float t = std::clamp(v * (1.0f - s * (1.0f - f)), 0.0f, 1.0f);
  switch (i) {
    case 0: r = v, g = t, b = p; break;
    case 1: r = q, g = v, b = p; break;
    case 2: r = p, g = v, b = t; break;
    case 3: r = p, g = q, b = v; break;
    case 4: r = t, g = p, b = v; break;
    default: r = v, g = p, b = q; break;
  }
}

// convert_image_dtype(float -> uint8): v * (255 + 1 - 1e-3), truncated.
inline uint8_t UnitToByte(float v) { return ClampTrunc(v * 255.999f); }

}  // namespace

Status CheckSameShape(ImageView src, MutableImageView dst, const char* kernel) {
  const int c = src.channels;
  if (src.empty() || (c != 1 && c != 3 && c != 4) || dst.data == nullptr ||
      dst.width != src.width || dst.height != src.height || dst.channels != c) {
    return Status::InvalidArgument(std::string(kernel) +
                                   ": needs same-shape 1-, 3- or 4-channel images");
  }
  return Status::Ok();
}

double MeanGray(ImageView src) {
  if (src.empty()) return 0.0;
  uint64_t sum = 0;
  WithChannels(src.channels, [&]<int C>() {
    for (int y = 0; y < src.height; ++y) {
      const uint8_t* s = src.row(y);
      uint32_t row_sum = 0;  // < 16384 * 255
      if constexpr (C == 1) {
        for (int x = 0; x < src.width; ++x) row_sum += s[x];
      } else {
        for (int x = 0; x < src.width; ++x, s += C) row_sum += Gray601(s[0], s[1], s[2]);
      }
      sum += row_sum;
    }
  });
  return static_cast<double>(sum) / (static_cast<double>(src.width) * src.height);
}

std::array<uint8_t, 256> BlendLut(float factor, float other) {
  std::array<uint8_t, 256> lut;
  const float rest = (1.0f - factor) * other;
  for (int v = 0; v < 256; ++v) lut[v] = ClampTrunc(factor * static_cast<float>(v) + rest);
  return lut;
}

Status ApplyLuts(ImageView src, MutableImageView dst, const ChannelLuts& luts) {
  HR_RETURN_IF_ERROR(CheckSameShape(src, dst, "ApplyLuts"));
  const auto& l0 = luts[0];
  const auto& l1 = luts[1];
  const auto& l2 = luts[2];
  WithChannels(src.channels, [&]<int C>() {
    for (int y = 0; y < src.height; ++y) {
      const uint8_t* s = src.row(y);
      uint8_t* d = dst.row(y);
      if constexpr (C == 1) {
        for (int x = 0; x < src.width; ++x) d[x] = l0[s[x]];
      } else {
        for (int x = 0; x < src.width; ++x, s += C, d += C) {
          d[0] = l0[s[0]];
          d[1] = l1[s[1]];
          d[2] = l2[s[2]];
          if constexpr (C == 4) d[3] = s[3];
        }
      }
    }
  });
  return Status::Ok();
}

Status AdjustBrightnessInto(ImageView src, MutableImageView dst, float factor) {
  const auto lut = BlendLut(factor, 0.0f);
  return ApplyLuts(src, dst, ChannelLuts{lut, lut, lut});
}

Status AdjustContrastInto(ImageView src, MutableImageView dst, float factor) {
  HR_RETURN_IF_ERROR(CheckSameShape(src, dst, "AdjustContrastInto"));
  const auto lut = BlendLut(factor, static_cast<float>(MeanGray(src)));
  return ApplyLuts(src, dst, ChannelLuts{lut, lut, lut});
}

Status AdjustSaturationInto(ImageView src, MutableImageView dst, float factor) {
  HR_RETURN_IF_ERROR(CheckSameShape(src, dst, "AdjustSaturationInto"));
  if (src.channels == 1) {
    CopyImage(src, dst);
    return Status::Ok();
  }
  // (1 - factor) * grey for each grey value: one multiply-add per channel remains.
  std::array<float, 256> rest;
  for (int g = 0; g < 256; ++g) rest[g] = (1.0f - factor) * static_cast<float>(g);
  WithChannels(src.channels, [&]<int C>() {
    if constexpr (C != 1) {
      for (int y = 0; y < src.height; ++y) {
        const uint8_t* s = src.row(y);
        uint8_t* d = dst.row(y);
        for (int x = 0; x < src.width; ++x, s += C, d += C) {
          const float r = rest[Gray601(s[0], s[1], s[2])];
          const uint8_t x3 = C == 4 ? s[3] : 0;
          d[0] = ClampTrunc(factor * s[0] + r);
          d[1] = ClampTrunc(factor * s[1] + r);
          d[2] = ClampTrunc(factor * s[2] + r);
          if constexpr (C == 4) d[3] = x3;
        }
      }
    }
  });
  return Status::Ok();
}

Status AdjustHueInto(ImageView src, MutableImageView dst, float shift) {
  HR_RETURN_IF_ERROR(CheckSameShape(src, dst, "AdjustHueInto"));
  if (!(shift >= -0.5f && shift <= 0.5f)) {
    return Status::InvalidArgument("AdjustHueInto: shift must be in [-0.5, 0.5]");
  }
  if (src.channels == 1) {
    CopyImage(src, dst);
    return Status::Ok();
  }
  constexpr float kInv255 = 1.0f / 255.0f;
  WithChannels(src.channels, [&]<int C>() {
    if constexpr (C != 1) {
      for (int y = 0; y < src.height; ++y) {
        const uint8_t* s = src.row(y);
        uint8_t* d = dst.row(y);
        for (int x = 0; x < src.width; ++x, s += C, d += C) {
          float h, sat, v;
          RgbToHsv(s[0] * kInv255, s[1] * kInv255, s[2] * kInv255, h, sat, v);
          h = std::fmod(h + shift, 1.0f);
          if (h < 0) h += 1.0f;  // Python's % is never negative
          float r, g, b;
          HsvToRgb(h, sat, v, r, g, b);
          const uint8_t x3 = C == 4 ? s[3] : 0;
          d[0] = UnitToByte(r);
          d[1] = UnitToByte(g);
          d[2] = UnitToByte(b);
          if constexpr (C == 4) d[3] = x3;
        }
      }
    }
  });
  return Status::Ok();
}

Status GrayscaleInto(ImageView src, MutableImageView dst) {
  const int c = src.channels;
  if (src.empty() || (c != 3 && c != 4) || dst.data == nullptr || dst.width != src.width ||
      dst.height != src.height || (dst.channels != 1 && dst.channels != c)) {
    return Status::InvalidArgument(
        "GrayscaleInto: needs a 3- or 4-channel source and a same-size 1-channel or "
        "same-channel destination");
  }
  WithChannels(c, [&]<int C>() {
    if constexpr (C != 1) {
      for (int y = 0; y < src.height; ++y) {
        const uint8_t* s = src.row(y);
        uint8_t* d = dst.row(y);
        if (dst.channels == 1) {
          for (int x = 0; x < src.width; ++x, s += C) d[x] = Gray601(s[0], s[1], s[2]);
        } else {
          for (int x = 0; x < src.width; ++x, s += C, d += C) {
            const uint8_t g = Gray601(s[0], s[1], s[2]);
            const uint8_t x3 = C == 4 ? s[3] : 0;
            d[0] = d[1] = d[2] = g;
            if constexpr (C == 4) d[3] = x3;
          }
        }
      }
    }
  });
  return Status::Ok();
}

}  // namespace headrace
