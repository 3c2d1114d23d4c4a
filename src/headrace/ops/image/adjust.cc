#include "headrace/ops/image/adjust.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace headrace {
namespace {

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

// Not under ASan or TSan: their runtimes are not set up yet when the loader runs an
// ifunc resolver (normalize.cc says what TSan does then).
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define HR_ADJUST_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HR_ADJUST_CLONES
#endif
// Comparisons are not assumed to trap, so that gcc may turn the selects into blends; the
// values computed are the same.
#define HR_NO_TRAPPING __attribute__((optimize("no-trapping-math")))

// torchvision's adjust_hue on n pixels of planar float rows (values v / 255): _rgb2hsv,
// h = (h + shift) mod 1, _hsv2rgb, written branch-free so that gcc vectorizes it. The
// float operations are torchvision's, in its order (fmod(x, 1) of x in [0, 2) is x or
// x - 1, exactly); without -ffp-contract nothing is fused, so both clones agree.
HR_ADJUST_CLONES HR_NO_TRAPPING void HueRow(float* __restrict r, float* __restrict g, float* __restrict b, int n,
                             float shift) {
  for (int k = 0; k < n; ++k) {
    const float rr = r[k], gg = g[k], bb = b[k];
    // Plain selects, not std::max/min/clamp: those would not inline here (another
    // optimize attribute), and a call stops vectorization.
    const float max_gb = gg > bb ? gg : bb, min_gb = gg < bb ? gg : bb;
    const float maxc = rr > max_gb ? rr : max_gb;
    const float minc = rr < min_gb ? rr : min_gb;
    const bool eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / (eqc ? 1.0f : maxc);
    const float div = eqc ? 1.0f : cr;
    const float rc = (maxc - rr) / div;
    const float gc = (maxc - gg) / div;
    const float bc = (maxc - bb) / div;
    // Selects written one at a time (no short-circuit): gcc if-converts them.
    float hue = 4.0f + gc - rc;
    hue = maxc == gg ? 2.0f + rc - bc : hue;
    hue = maxc == rr ? bc - gc : hue;
    float h = hue / 6.0f + 1.0f;
    h = h >= 1.0f ? h - 1.0f : h;
    h = h + shift;  // Python's % 1.0: into [0, 1)
    h = h >= 1.0f ? h - 1.0f : h;
    h = h < 0.0f ? h + 1.0f : h;
    const float v = maxc;
    const float i6 = __builtin_floorf(h * 6.0f);
    const float f = h * 6.0f - i6;
    const float i = i6 >= 6.0f ? 0.0f : i6;  // i % 6 (h * 6 may round up to 6)
    float p = v * (1.0f - s), q = v * (1.0f - s * f), t = v * (1.0f - s * (1.0f - f));
    p = p < 0.0f ? 0.0f : p > 1.0f ? 1.0f : p;  // torch.clamp(x, 0, 1)
    q = q < 0.0f ? 0.0f : q > 1.0f ? 1.0f : q;
    t = t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
    // torchvision's table: i -> (r, g, b) = (v,t,p) (q,v,p) (p,v,t) (p,q,v) (t,p,v) (v,p,q).
    float ro = p, go = p, bo = v;
    ro = i == 0.0f ? v : ro;
    ro = i == 5.0f ? v : ro;
    ro = i == 1.0f ? q : ro;
    ro = i == 4.0f ? t : ro;
    go = i == 0.0f ? t : go;
    go = i == 1.0f ? v : go;
    go = i == 2.0f ? v : go;
    go = i == 3.0f ? q : go;
    bo = i == 0.0f ? p : bo;
    bo = i == 1.0f ? p : bo;
    bo = i == 2.0f ? t : bo;
    bo = i == 5.0f ? q : bo;
    r[k] = ro;
    g[k] = go;
    b[k] = bo;
  }
}

#undef HR_ADJUST_CLONES
#undef HR_NO_TRAPPING

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
  // Per thread, reused: one row as planar floats.
  thread_local std::vector<float> planes;
  planes.resize(static_cast<size_t>(src.width) * 3);
  float* r = planes.data();
  float* g = r + src.width;
  float* b = g + src.width;
  WithChannels(src.channels, [&]<int C>() {
    if constexpr (C != 1) {
      for (int y = 0; y < src.height; ++y) {
        const uint8_t* s = src.row(y);
        // uint8 -> float is a division by 255, as convert_image_dtype does.
        for (int x = 0; x < src.width; ++x) {
          r[x] = static_cast<float>(s[x * C]) / 255.0f;
          g[x] = static_cast<float>(s[x * C + 1]) / 255.0f;
          b[x] = static_cast<float>(s[x * C + 2]) / 255.0f;
        }
        HueRow(r, g, b, src.width, shift);
        uint8_t* d = dst.row(y);
        for (int x = 0; x < src.width; ++x) {
          d[x * C] = UnitToByte(r[x]);
          d[x * C + 1] = UnitToByte(g[x]);
          d[x * C + 2] = UnitToByte(b[x]);
          if constexpr (C == 4) d[x * C + 3] = s[x * C + 3];
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
