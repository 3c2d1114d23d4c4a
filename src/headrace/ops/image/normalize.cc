#include "headrace/ops/image/normalize.h"

#include <bit>
#include <cmath>
#include <string>

namespace headrace {

uint16_t FloatToHalf(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u) return static_cast<uint16_t>(sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (u >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65536: inf
  if (u < 0x38800000u) {
    // Below 2^-14: a subnormal half. Adding 0.5 (2^-1) puts the value's 2^-24 units in
    // the low mantissa bits, and the float addition rounds to nearest even for us.
    const float shifted = std::bit_cast<float>(u) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to
  // nearest even; a carry out of the mantissa correctly bumps the exponent (up to inf).
  const uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000fffu + odd;  // (15 - 127) << 23, plus rounding
  return static_cast<uint16_t>(sign | (u >> 13));
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t odd = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + odd) >> 16);
}

Result<NormalizeTable> NormalizeTable::Make(const NormalizeSpec& spec) {
  if (spec.dtype != DType::kF32 && spec.dtype != DType::kF16 && spec.dtype != DType::kBF16) {
    return Status::InvalidArgument("image.normalize dtype must be f32, f16 or bf16, got " +
                                   std::string(DTypeName(spec.dtype)));
  }
  NormalizeTable t;
  t.dtype_ = spec.dtype;
  t.layout_ = spec.layout;
  for (int c = 0; c < 3; ++c) {
    const float mean = spec.mean[c], std = spec.std[c];
    if (!std::isfinite(mean) || !std::isfinite(std) || std == 0.0f) {
      return Status::InvalidArgument("image.normalize needs finite mean and non-zero std");
    }
    for (int v = 0; v < 256; ++v) {
      const float f = (static_cast<float>(v) / 255.0f - mean) / std;
      t.f32_[c][v] = f;
      t.half_[c][v] = spec.dtype == DType::kBF16 ? FloatToBFloat16(f) : FloatToHalf(f);
    }
    t.scale_[c] = static_cast<float>(1.0 / (255.0 * std));
    t.offset_[c] = static_cast<float>(-static_cast<double>(mean) / std);
  }
  return t;
}

size_t NormalizedBytes(const NormalizeSpec& spec, int width, int height) {
  return size_t{3} * static_cast<size_t>(width) * static_cast<size_t>(height) *
         DTypeSize(spec.dtype);
}

namespace {

// The hot loops, one instance per (channels, layout). Plain loops over restrict
// pointers; with -O2 and the avx2 clone gcc turns the f32 ones into shuffles + FMAs.
template <int C>
inline __attribute__((always_inline)) void F32Chw(ImageView src, const float* s, const float* o,
                                                  float* dst) {
  const int64_t plane = static_cast<int64_t>(src.width) * src.height;
  for (int y = 0; y < src.height; ++y) {
    const uint8_t* __restrict p = src.row(y);
    float* __restrict d0 = dst + static_cast<int64_t>(y) * src.width;
    float* __restrict d1 = d0 + plane;
    float* __restrict d2 = d1 + plane;
    for (int x = 0; x < src.width; ++x) {
      d0[x] = static_cast<float>(p[C * x]) * s[0] + o[0];
      d1[x] = static_cast<float>(p[C * x + 1]) * s[1] + o[1];
      d2[x] = static_cast<float>(p[C * x + 2]) * s[2] + o[2];
    }
  }
}

template <int C>
inline __attribute__((always_inline)) void F32Hwc(ImageView src, const float* s, const float* o,
                                                  float* dst) {
  for (int y = 0; y < src.height; ++y) {
    const uint8_t* __restrict p = src.row(y);
    float* __restrict d = dst + static_cast<int64_t>(y) * src.width * 3;
    for (int x = 0; x < src.width; ++x) {
      d[3 * x] = static_cast<float>(p[C * x]) * s[0] + o[0];
      d[3 * x + 1] = static_cast<float>(p[C * x + 1]) * s[1] + o[1];
      d[3 * x + 2] = static_cast<float>(p[C * x + 2]) * s[2] + o[2];
    }
  }
}

template <int C>
inline __attribute__((always_inline)) void U16Chw(ImageView src,
                                                  const std::array<std::array<uint16_t, 256>, 3>& t,
                                                  uint16_t* dst) {
  const int64_t plane = static_cast<int64_t>(src.width) * src.height;
  for (int y = 0; y < src.height; ++y) {
    const uint8_t* __restrict p = src.row(y);
    uint16_t* __restrict d0 = dst + static_cast<int64_t>(y) * src.width;
    uint16_t* __restrict d1 = d0 + plane;
    uint16_t* __restrict d2 = d1 + plane;
    for (int x = 0; x < src.width; ++x) {
      d0[x] = t[0][p[C * x]];
      d1[x] = t[1][p[C * x + 1]];
      d2[x] = t[2][p[C * x + 2]];
    }
  }
}

template <int C>
inline __attribute__((always_inline)) void U16Hwc(ImageView src,
                                                  const std::array<std::array<uint16_t, 256>, 3>& t,
                                                  uint16_t* dst) {
  for (int y = 0; y < src.height; ++y) {
    const uint8_t* __restrict p = src.row(y);
    uint16_t* __restrict d = dst + static_cast<int64_t>(y) * src.width * 3;
    for (int x = 0; x < src.width; ++x) {
      d[3 * x] = t[0][p[C * x]];
      d[3 * x + 1] = t[1][p[C * x + 1]];
      d[3 * x + 2] = t[2][p[C * x + 2]];
    }
  }
}

// TSan: a target_clones resolver (an ifunc) runs while the dynamic loader relocates, before
// the TSan runtime is set up, and crashes the process (seen: every test binary linking
// this file, at start); the TSan build keeps the portable version.
#if !defined(__SANITIZE_THREAD__)
#define HR_NORMALIZE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HR_NORMALIZE_CLONES
#endif

HR_NORMALIZE_CLONES void F32Chw3(ImageView s, const float* a, const float* b, float* d) {
  F32Chw<3>(s, a, b, d);
}
HR_NORMALIZE_CLONES void F32Chw4(ImageView s, const float* a, const float* b, float* d) {
  F32Chw<4>(s, a, b, d);
}
HR_NORMALIZE_CLONES void F32Hwc3(ImageView s, const float* a, const float* b, float* d) {
  F32Hwc<3>(s, a, b, d);
}
HR_NORMALIZE_CLONES void F32Hwc4(ImageView s, const float* a, const float* b, float* d) {
  F32Hwc<4>(s, a, b, d);
}

#undef HR_NORMALIZE_CLONES

}  // namespace

Status NormalizeInto(ImageView src, const NormalizeTable& table, uint8_t* dst) {
  const int c = src.channels;
  if (src.empty() || (c != 3 && c != 4) || dst == nullptr) {
    return Status::InvalidArgument("NormalizeInto: needs a non-empty 3- or 4-channel image");
  }
  const size_t elem = DTypeSize(table.dtype());
  if (reinterpret_cast<uintptr_t>(dst) % elem != 0) {
    return Status::InvalidArgument("NormalizeInto: destination not aligned to its dtype");
  }
  const bool chw = table.layout() == Layout::kCHW;
  if (table.dtype() == DType::kF32) {
    float* out = reinterpret_cast<float*>(dst);
    const float* s = table.scale().data();
    const float* o = table.offset().data();
    if (chw) {
      c == 4 ? F32Chw4(src, s, o, out) : F32Chw3(src, s, o, out);
    } else {
      c == 4 ? F32Hwc4(src, s, o, out) : F32Hwc3(src, s, o, out);
    }
  } else {
    uint16_t* out = reinterpret_cast<uint16_t*>(dst);
    if (chw) {
      c == 4 ? U16Chw<4>(src, table.half(), out) : U16Chw<3>(src, table.half(), out);
    } else {
      c == 4 ? U16Hwc<4>(src, table.half(), out) : U16Hwc<3>(src, table.half(), out);
    }
  }
  return Status::Ok();
}

Status NormalizeInto(ImageView src, const NormalizeSpec& spec, uint8_t* dst) {
  HR_ASSIGN_OR_RETURN(NormalizeTable table, NormalizeTable::Make(spec));
  return NormalizeInto(src, table, dst);
}

namespace {
constexpr std::pair<Layout, std::string_view> kLayouts[] = {{Layout::kCHW, "chw"},
                                                            {Layout::kHWC, "hwc"}};
// Only the float types: normalize's output.
constexpr std::pair<DType, std::string_view> kNormalizeDTypes[] = {
    {DType::kF32, "f32"}, {DType::kF16, "f16"}, {DType::kBF16, "bf16"}};
}  // namespace

EnumTable<Layout> TableOf(Layout) { return kLayouts; }
EnumTable<DType> TableOf(DType) { return kNormalizeDTypes; }

Status NormalizeOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".field", s.field, "the image value to normalize"));
  for (size_t c = 0; c < 3; ++c) {
    if (!std::isfinite(s.mean[c])) {
      return schema::Invalid(p + ".mean[" + std::to_string(c) + "]",
                             "must be finite" + schema::Got(s.mean[c]));
    }
    if (!std::isfinite(s.std[c]) || s.std[c] == 0) {
      return schema::Invalid(p + ".std[" + std::to_string(c) + "]",
                             "must be finite and non-zero" + schema::Got(s.std[c]));
    }
  }
  if (EnumName(s.dtype).empty()) {
    return schema::Invalid(p + ".dtype", "unsupported dtype " + schema::Quote(DTypeName(s.dtype)) +
                                             " (allowed: " + AllowedNames(TableOf(s.dtype)) + ")");
  }
  return schema::KnownEnum(p + ".layout", s.layout);
}

Status NormalizeOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc image, ctx.Read(spec.field, ValueKind::kImage));
  if (image.shape.size() != 3 || image.shape[0] <= 0 || image.shape[1] <= 0) {
    return ctx.Error("the image size is not fixed here (" + image.shape_source +
                     "): add image.center_crop, image.random_resized_crop or an exact "
                     "image.resize before it");
  }
  if (image.shape[2] == 1) {
    return ctx.Error("reads '" + spec.field +
                     "' as a 1-channel image (image.grayscale num_output_channels: 1), but "
                     "normalize writes 3 channels: use num_output_channels: 3");
  }
  const int64_t h = image.shape[0], w = image.shape[1];
  FieldSpec field{OutputOf(spec), spec.dtype, {}};
  field.sample_shape = spec.layout == Layout::kCHW ? std::vector<int64_t>{3, h, w}
                                                   : std::vector<int64_t>{h, w, 3};
  ctx.AddField(std::move(field), image.shape_source);
  return Status::Ok();
}

Result<std::unique_ptr<Op>> NormalizeOp::Make(const Spec& spec, PlanContext& ctx) {
  const ValueDesc* image = ctx.input(spec.field);
  if (image == nullptr) return ctx.Error("made without its declaration");
  return std::unique_ptr<Op>(std::make_unique<NormalizeOp>(
      spec, ctx.row(OutputOf(spec)), static_cast<int>(image->shape[1]),
      static_cast<int>(image->shape[0]), ctx.slot(spec.field)));
}

NormalizeOp::NormalizeOp(const NormalizeSpec& spec, int row, int width, int height, int slot)
    : row_(row), width_(width), height_(height), slot_(slot) {
  Result<NormalizeTable> table = NormalizeTable::Make(spec);
  if (table.ok()) {
    table_ = *std::move(table);
  } else {
    valid_ = table.status();
  }
  if (valid_.ok() && (width <= 0 || height <= 0 || row < 0)) {
    valid_ = Status::InvalidArgument("image.normalize needs a field index and a positive size");
  }
}

Status NormalizeOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  const ImageView* in = ctx.Get<ImageView>(slot_);
  if (in == nullptr) return Status::Internal("image.normalize: no image (decode first)");
  const ImageView& image = *in;
  if (image.width != width_ || image.height != height_) {
    return Status::Internal("image.normalize: image is " + std::to_string(image.width) + "x" +
                            std::to_string(image.height) + " but the batch field is " +
                            std::to_string(width_) + "x" + std::to_string(height_) +
                            "; end the chain with a resize/crop to exactly that size");
  }
  if (ctx.rows == nullptr || ctx.rows[row_] == nullptr) {
    return Status::Internal("image.normalize: no batch row for field " + std::to_string(row_));
  }
  return NormalizeInto(image, table_, ctx.rows[row_]);
}

}  // namespace headrace
