// Hand-written kernels: none of libjpeg-turbo, libpng, libwebp or libyuv has RandAugment's
// operations (libyuv's ARGBAffineRow samples nearest without fill or pixel centres, on
// 4-byte pixels only; it has no equalize, solarize, posterize or sharpness).
#include "headrace/ops/image/rand_augment.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>
#include <utility>

#include "headrace/ops/image/adjust.h"

namespace headrace {
namespace {

constexpr std::pair<WarpInterpolation, std::string_view> kInterpolations[] = {
    {WarpInterpolation::kNearest, "nearest"}, {WarpInterpolation::kBilinear, "bilinear"}};

constexpr std::string_view kKindNames[kRandAugmentKinds] = {
    "Identity",   "ShearX",     "ShearY",    "TranslateX", "TranslateY",
    "Rotate",     "Brightness", "Color",     "Contrast",   "Sharpness",
    "Posterize",  "Solarize",   "AutoContrast", "Equalize"};

// Per-channel tables of a function of the value (the channel count of `src` decides how
// many apply); X is copied.
template <typename F>
Status ApplyPerChannel(ImageView src, MutableImageView dst, F&& make_lut) {
  ChannelLuts luts;
  for (int c = 0; c < 3; ++c) luts[c] = make_lut(std::min(c, src.channels - 1));
  return ApplyLuts(src, dst, luts);
}

// Per channel (at most 3), the histogram of `src`.
std::array<std::array<uint32_t, 256>, 3> Histograms(ImageView src) {
  std::array<std::array<uint32_t, 256>, 3> hist{};
  const int c = src.channels;
  const int used = std::min(c, 3);
  for (int y = 0; y < src.height; ++y) {
    const uint8_t* s = src.row(y);
    for (int x = 0; x < src.width; ++x, s += c) {
      for (int ch = 0; ch < used; ++ch) ++hist[ch][s[ch]];
    }
  }
  return hist;
}

}  // namespace

EnumTable<WarpInterpolation> TableOf(WarpInterpolation) { return kInterpolations; }

std::string_view RandAugmentKindName(RandAugmentKind kind) {
  const int k = static_cast<int>(kind);
  return k >= 0 && k < kRandAugmentKinds ? kKindNames[k] : std::string_view();
}

bool IsPointwise(RandAugmentKind kind) {
  switch (kind) {
    case RandAugmentKind::kShearX:
    case RandAugmentKind::kShearY:
    case RandAugmentKind::kTranslateX:
    case RandAugmentKind::kTranslateY:
    case RandAugmentKind::kRotate:
    case RandAugmentKind::kSharpness: return false;
    default: return true;
  }
}

int DrawRandAugment(const RandAugmentSpec& spec, int width, int height, Rng& rng,
                    std::span<RandAugmentStep> steps) {
  const int n = std::min<int>(spec.num_ops, static_cast<int>(steps.size()));
  // torchvision: linspace(0, max, bins)[magnitude]; posterize 8 - round(m / ((bins-1)/4)).
  const double t = spec.num_magnitude_bins > 1
                       ? static_cast<double>(spec.magnitude) / (spec.num_magnitude_bins - 1)
                       : 0.0;
  for (int i = 0; i < n; ++i) {
    const auto kind = static_cast<RandAugmentKind>(rng.Below(kRandAugmentKinds));
    double m = 0;
    bool is_signed = true;
    switch (kind) {
      case RandAugmentKind::kShearX:
      case RandAugmentKind::kShearY: m = 0.3 * t; break;
      case RandAugmentKind::kTranslateX: m = 150.0 / 331.0 * width * t; break;
      case RandAugmentKind::kTranslateY: m = 150.0 / 331.0 * height * t; break;
      case RandAugmentKind::kRotate: m = 30.0 * t; break;
      case RandAugmentKind::kBrightness:
      case RandAugmentKind::kColor:
      case RandAugmentKind::kContrast:
      case RandAugmentKind::kSharpness: m = 0.9 * t; break;
      case RandAugmentKind::kPosterize:
        m = 8 - static_cast<int>(std::nearbyint(4.0 * t));
        is_signed = false;
        break;
      case RandAugmentKind::kSolarize:
        m = 255.0 * (1.0 - t);
        is_signed = false;
        break;
      default: is_signed = false; break;  // Identity, AutoContrast, Equalize
    }
    if (is_signed && rng.Below(2) == 1) m = -m;
    // Translations move by whole pixels (torchvision's int(magnitude)).
    if (kind == RandAugmentKind::kTranslateX || kind == RandAugmentKind::kTranslateY) {
      m = std::trunc(m);
    }
    steps[i] = RandAugmentStep{kind, static_cast<float>(m)};
  }
  return n;
}

Status SolarizeInto(ImageView src, MutableImageView dst, float threshold) {
  return ApplyPerChannel(src, dst, [&](int) {
    std::array<uint8_t, 256> lut;
    for (int v = 0; v < 256; ++v) lut[v] = static_cast<float>(v) >= threshold ? 255 - v : v;
    return lut;
  });
}

Status PosterizeInto(ImageView src, MutableImageView dst, int bits) {
  if (bits < 0 || bits > 8) return Status::InvalidArgument("PosterizeInto: bits must be in [0, 8]");
  const int mask = -(1 << (8 - bits));
  return ApplyPerChannel(src, dst, [&](int) {
    std::array<uint8_t, 256> lut;
    for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v & mask);
    return lut;
  });
}

Status AutoContrastInto(ImageView src, MutableImageView dst) {
  HR_RETURN_IF_ERROR(CheckSameShape(src, dst, "AutoContrastInto"));
  const auto hist = Histograms(src);
  return ApplyPerChannel(src, dst, [&](int c) {
    int lo = 0, hi = 255;
    while (lo < 255 && hist[c][lo] == 0) ++lo;
    while (hi > 0 && hist[c][hi] == 0) --hi;
    float minimum = static_cast<float>(lo);
    float scale = hi > lo ? 255.0f / static_cast<float>(hi - lo) : 1.0f;
    if (hi <= lo) minimum = 0;  // a flat channel stays as it is
    std::array<uint8_t, 256> lut;
    for (int v = 0; v < 256; ++v) lut[v] = ClampTrunc((static_cast<float>(v) - minimum) * scale);
    return lut;
  });
}

Status EqualizeInto(ImageView src, MutableImageView dst) {
  HR_RETURN_IF_ERROR(CheckSameShape(src, dst, "EqualizeInto"));
  const auto hist = Histograms(src);
  return ApplyPerChannel(src, dst, [&](int c) {
    const auto& h = hist[c];
    std::array<uint8_t, 256> lut;
    // step: the pixels outside the last non-empty bin, / 255.
    int last = 255;
    while (last > 0 && h[last] == 0) --last;
    uint64_t total = 0;
    for (int v = 0; v < 256; ++v) total += h[v];
    const uint64_t step = (total - h[last]) / 255;
    if (step == 0) {
      for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v);
      return lut;
    }
    uint64_t cum = 0;
    lut[0] = 0;
    for (int v = 1; v < 256; ++v) {
      cum += h[v - 1];
      lut[v] = static_cast<uint8_t>(std::min<uint64_t>(255, (cum + step / 2) / step));
    }
    return lut;
  });
}

Status AdjustSharpnessInto(ImageView src, MutableImageView dst, float factor) {
  HR_RETURN_IF_ERROR(CheckSameShape(src, dst, "AdjustSharpnessInto"));
  if (src.data == dst.data) return Status::InvalidArgument("AdjustSharpnessInto: not in place");
  const int c = src.channels, w = src.width, h = src.height;
  const size_t row_bytes = static_cast<size_t>(w) * c;
  if (w <= 2 || h <= 2) {
    for (int y = 0; y < h; ++y) std::memcpy(dst.row(y), src.row(y), row_bytes);
    return Status::Ok();
  }
  const float rest = 1.0f - factor;
  // torchvision blends the whole image with a "degenerate" one equal to it on the border.
  auto blend = [&](uint8_t v, uint8_t degenerate) {
    return ClampTrunc(factor * static_cast<float>(v) + rest * static_cast<float>(degenerate));
  };
  for (int y = 0; y < h; ++y) {
    const uint8_t* s = src.row(y);
    uint8_t* d = dst.row(y);
    if (y == 0 || y == h - 1) {
      for (size_t i = 0; i < row_bytes; ++i) d[i] = blend(s[i], s[i]);
      continue;
    }
    const uint8_t* up = src.row(y - 1);
    const uint8_t* down = src.row(y + 1);
    for (int ch = 0; ch < c; ++ch) d[ch] = blend(s[ch], s[ch]);
    for (size_t i = static_cast<size_t>(c); i < row_bytes - c; ++i) {
      const uint32_t sum = up[i - c] + up[i] + up[i + c] + s[i - c] + 5u * s[i] + s[i + c] +
                           down[i - c] + down[i] + down[i + c];
      // round(sum / 13): never a tie, 13 being odd.
      d[i] = blend(s[i], static_cast<uint8_t>((2 * sum + 13) / 26));
    }
    for (size_t i = row_bytes - c; i < row_bytes; ++i) d[i] = blend(s[i], s[i]);
  }
  if (c == 4) {  // X is padding: copied, not sharpened
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) dst.row(y)[x * 4 + 3] = src.row(y)[x * 4 + 3];
    }
  }
  return Status::Ok();
}

std::array<float, 6> InverseAffineMatrix(double cx, double cy, double angle, double tx,
                                         double ty, double scale, double shear_x,
                                         double shear_y) {
  constexpr double kRad = std::numbers::pi / 180.0;
  const double rot = angle * kRad, sx = shear_x * kRad, sy = shear_y * kRad;
  // Rotation, scale and shear without scaling (torchvision's RSS).
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  double m[6] = {d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  std::array<float, 6> out;
  for (int i = 0; i < 6; ++i) out[i] = static_cast<float>(m[i]);
  return out;
}

namespace {

// One row of the warp, C channels: source point (sx, sy) = base + x * step.
template <int C, WarpInterpolation kInterpolation>
void WarpRow(ImageView src, float bx, float by, float step_x, float step_y, uint8_t fill,
             uint8_t* d) {
  const int w = src.width, h = src.height;
  const float fw = static_cast<float>(w), fh = static_cast<float>(h);
  for (int x = 0; x < w; ++x, d += C) {
    const float sx = bx + step_x * static_cast<float>(x);
    const float sy = by + step_y * static_cast<float>(x);
    if constexpr (kInterpolation == WarpInterpolation::kNearest) {
      // The nearest pixel, halves rounded up: sx + 0.5 in [0, w) and truncated (no libm
      // call; torch rounds halves to even, which only exact halves tell apart).
      const float rx = sx + 0.5f, ry = sy + 0.5f;
      if (rx >= 0.0f && rx < fw && ry >= 0.0f && ry < fh) {
        const uint8_t* p = src.row(static_cast<int>(ry)) + static_cast<ptrdiff_t>(rx) * C;
        for (int ch = 0; ch < C; ++ch) d[ch] = p[ch];
      } else {
        for (int ch = 0; ch < C; ++ch) d[ch] = fill;
      }
    } else {
      // Bilinear: the in-image taps weighted, the rest of the weight on `fill` (as
      // torchvision's mask blend does).
      if (!(sx > -1.0f && sx < fw && sy > -1.0f && sy < fh)) {
        for (int ch = 0; ch < C; ++ch) d[ch] = fill;
        continue;
      }
      const int x0 = static_cast<int>(sx + 1.0f) - 1, y0 = static_cast<int>(sy + 1.0f) - 1;
      const float ax = sx - static_cast<float>(x0), ay = sy - static_cast<float>(y0);
      const float wt[4] = {(1 - ax) * (1 - ay), ax * (1 - ay), (1 - ax) * ay, ax * ay};
      const int tx[4] = {x0, x0 + 1, x0, x0 + 1};
      const int ty[4] = {y0, y0, y0 + 1, y0 + 1};
      float acc[C] = {};
      float outside = 0;
      for (int k = 0; k < 4; ++k) {
        if (tx[k] < 0 || tx[k] >= w || ty[k] < 0 || ty[k] >= h) {
          outside += wt[k];
          continue;
        }
        const uint8_t* p = src.row(ty[k]) + static_cast<ptrdiff_t>(tx[k]) * C;
        for (int ch = 0; ch < C; ++ch) acc[ch] += wt[k] * static_cast<float>(p[ch]);
      }
      const float f = outside * static_cast<float>(fill);
      for (int ch = 0; ch < C; ++ch) {
        d[ch] = static_cast<uint8_t>(std::clamp(acc[ch] + f, 0.0f, 255.0f) + 0.5f);
      }
    }
  }
}

template <WarpInterpolation kInterpolation>
void WarpRowAnyChannels(ImageView src, float bx, float by, float step_x, float step_y,
                        uint8_t fill, uint8_t* d) {
  switch (src.channels) {
    case 1: return WarpRow<1, kInterpolation>(src, bx, by, step_x, step_y, fill, d);
    case 3: return WarpRow<3, kInterpolation>(src, bx, by, step_x, step_y, fill, d);
    default: return WarpRow<4, kInterpolation>(src, bx, by, step_x, step_y, fill, d);
  }
}

}  // namespace

Status AffineWarpInto(ImageView src, MutableImageView dst, const std::array<float, 6>& m,
                      WarpInterpolation interpolation, uint8_t fill) {
  HR_RETURN_IF_ERROR(CheckSameShape(src, dst, "AffineWarpInto"));
  if (src.data == dst.data) return Status::InvalidArgument("AffineWarpInto: not in place");
  const int h = src.height;
  const float half_w = 0.5f * static_cast<float>(src.width);
  const float half_h = 0.5f * static_cast<float>(h);
  for (int y = 0; y < h; ++y) {
    const float yc = static_cast<float>(y) - half_h + 0.5f;
    // Source coordinates in pixels are linear in x: base + x * (m0, m3).
    const float bx = m[1] * yc + m[2] + half_w - 0.5f + m[0] * (0.5f - half_w);
    const float by = m[4] * yc + m[5] + half_h - 0.5f + m[3] * (0.5f - half_w);
    if (interpolation == WarpInterpolation::kNearest) {
      WarpRowAnyChannels<WarpInterpolation::kNearest>(src, bx, by, m[0], m[3], fill, dst.row(y));
    } else {
      WarpRowAnyChannels<WarpInterpolation::kBilinear>(src, bx, by, m[0], m[3], fill, dst.row(y));
    }
  }
  return Status::Ok();
}

Status ApplyRandAugmentStep(ImageView src, MutableImageView dst, RandAugmentStep step,
                            WarpInterpolation interpolation, uint8_t fill) {
  const double m = step.magnitude;
  const double w = src.width, h = src.height;
  constexpr double kDeg = 180.0 / std::numbers::pi;
  switch (step.kind) {
    case RandAugmentKind::kIdentity:
      HR_RETURN_IF_ERROR(CheckSameShape(src, dst, "ApplyRandAugmentStep"));
      if (src.data != dst.data) {
        for (int y = 0; y < src.height; ++y) {
          std::memcpy(dst.row(y), src.row(y), static_cast<size_t>(src.width) * src.channels);
        }
      }
      return Status::Ok();
    case RandAugmentKind::kShearX:  // about the top-left corner, as torchvision's center=[0, 0]
      return AffineWarpInto(
          src, dst, InverseAffineMatrix(-0.5 * w, -0.5 * h, 0, 0, 0, 1, std::atan(m) * kDeg, 0),
          interpolation, fill);
    case RandAugmentKind::kShearY:
      return AffineWarpInto(
          src, dst, InverseAffineMatrix(-0.5 * w, -0.5 * h, 0, 0, 0, 1, 0, std::atan(m) * kDeg),
          interpolation, fill);
    case RandAugmentKind::kTranslateX:
      return AffineWarpInto(src, dst, InverseAffineMatrix(0, 0, 0, m, 0, 1, 0, 0), interpolation,
                            fill);
    case RandAugmentKind::kTranslateY:
      return AffineWarpInto(src, dst, InverseAffineMatrix(0, 0, 0, 0, m, 1, 0, 0), interpolation,
                            fill);
    case RandAugmentKind::kRotate:  // F.rotate passes -angle: positive is counter-clockwise
      return AffineWarpInto(src, dst, InverseAffineMatrix(0, 0, -m, 0, 0, 1, 0, 0), interpolation,
                            fill);
    case RandAugmentKind::kBrightness:
      return AdjustBrightnessInto(src, dst, static_cast<float>(1.0 + m));
    case RandAugmentKind::kColor: return AdjustSaturationInto(src, dst, static_cast<float>(1.0 + m));
    case RandAugmentKind::kContrast:
      return AdjustContrastInto(src, dst, static_cast<float>(1.0 + m));
    case RandAugmentKind::kSharpness:
      return AdjustSharpnessInto(src, dst, static_cast<float>(1.0 + m));
    case RandAugmentKind::kPosterize: return PosterizeInto(src, dst, static_cast<int>(m));
    case RandAugmentKind::kSolarize: return SolarizeInto(src, dst, static_cast<float>(m));
    case RandAugmentKind::kAutoContrast: return AutoContrastInto(src, dst);
    case RandAugmentKind::kEqualize: return EqualizeInto(src, dst);
  }
  return Status::InvalidArgument("ApplyRandAugmentStep: unknown operation");
}

Status RandAugmentOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".field", s.field, "the image value to augment"));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".num_ops", s.num_ops, 0, kMaxOps));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".num_magnitude_bins", s.num_magnitude_bins, 2, 1000));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".magnitude", s.magnitude, 0, s.num_magnitude_bins - 1));
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".interpolation", s.interpolation));
  return schema::InRange(p + ".fill", s.fill, 0, 255);
}

Status RandAugmentOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc image, ctx.Read(spec.field, ValueKind::kImage));
  return ctx.Write(spec.field, std::move(image));
}

Result<std::unique_ptr<Op>> RandAugmentOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(
      std::make_unique<RandAugmentOp>(spec, ctx.position(), ctx.slot(spec.field)));
}

RandAugmentOp::RandAugmentOp(const RandAugmentSpec& spec, int op_position, int slot)
    : spec_(spec),
      op_position_(op_position),
      slot_(slot),
      valid_(Validate(spec, std::string(kName))) {}

Status RandAugmentOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  const ImageView* in = ctx.Get<ImageView>(slot_);
  if (in == nullptr || in->empty()) {
    return Status::Internal("image.rand_augment: no image (decode first)");
  }
  const ImageView image = *in;
  Rng rng = ctx.OpRng(op_position_);
  RandAugmentStep steps[kMaxOps];
  const int n = DrawRandAugment(spec_, image.width, image.height, rng, steps);
  // Two scratch images at most, taken when first needed: pointwise steps run in place in
  // the current one, the others write the other.
  MutableImageView buffers[2];
  int current = -1;  // which buffer holds the image; -1: still the input
  ImageView cur = image;
  for (int i = 0; i < n; ++i) {
    if (steps[i].kind == RandAugmentKind::kIdentity) continue;
    const int target = current >= 0 && IsPointwise(steps[i].kind) ? current : (current + 1) % 2;
    if (buffers[target].data == nullptr) {
      HR_ASSIGN_OR_RETURN(buffers[target],
                          ctx.NextScratchImage(image.width, image.height, image.channels));
    }
    HR_RETURN_IF_ERROR(ApplyRandAugmentStep(cur, buffers[target], steps[i], spec_.interpolation,
                                            static_cast<uint8_t>(spec_.fill)));
    current = target;
    cur = buffers[target];
  }
  if (current >= 0) ctx.Set(slot_, cur);
  return Status::Ok();
}

}  // namespace headrace
