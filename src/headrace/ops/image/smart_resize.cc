#include "headrace/ops/image/smart_resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "headrace/core/cpu_features.h"
#include "headrace/ops/schema.h"

namespace headrace {
namespace {

constexpr std::pair<ResampleFilter, std::string_view> kFilterNames[] = {
    {ResampleFilter::kBicubic, "bicubic"},
    {ResampleFilter::kBilinear, "bilinear"},
};

// --- PIL's resampling (libImaging/Resample.c), re-derived --------------------------------
//
// Every expression below is PIL's in the same order and precision (double weights, no
// FMA: ISO C++ keeps -ffp-contract off, and x86-64 without -mfma has none), so the
// fixed-point weights, and with them the output bytes, are PIL's.

constexpr int kPrecisionBits = 32 - 8 - 2;  // PIL's PRECISION_BITS

double BilinearFilter(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}

double BicubicFilter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double FilterSupport(ResampleFilter f) { return f == ResampleFilter::kBicubic ? 2.0 : 1.0; }

// One axis of PIL's precompute_coeffs for the whole-image box [0, in_size).
struct AxisGeometry {
  double scale, support, inv_filterscale;
  int ksize;
};

AxisGeometry Geometry(int in_size, int out_size, ResampleFilter f) {
  AxisGeometry g;
  // PIL's box corners are floats: in1 - in0 is computed in float, then widened.
  g.scale = static_cast<double>(static_cast<float>(in_size) - 0.0f) / out_size;
  const double filterscale = g.scale < 1.0 ? 1.0 : g.scale;
  g.support = FilterSupport(f) * filterscale;
  g.ksize = static_cast<int>(std::ceil(g.support)) * 2 + 1;
  g.inv_filterscale = 1.0 / filterscale;
  return g;
}

// The first source index and the count of them that output `xx` reads.
std::pair<int, int> Bounds(const AxisGeometry& g, int in_size, int xx, double* center_out) {
  const double center = 0.0 + (xx + 0.5) * g.scale;
  int xmin = static_cast<int>(center - g.support + 0.5);
  if (xmin < 0) xmin = 0;
  int xmax = static_cast<int>(center + g.support + 0.5);
  if (xmax > in_size) xmax = in_size;
  if (center_out != nullptr) *center_out = center;
  return {xmin, xmax - xmin};
}

// The fixed-point weights of one axis, cached per thread for the last sizes asked.
struct PilAxis {
  int in_size = -1, out_size = -1;
  ResampleFilter filter = ResampleFilter::kBicubic;
  int ksize = 0;
  std::vector<int32_t> bounds;  // (xmin, count) per output
  std::vector<int32_t> k;       // out_size * ksize, zero past each count
  std::vector<double> exact;    // one output's double weights while building
};

void BuildPilAxis(int in_size, int out_size, ResampleFilter f, PilAxis* a) {
  if (a->in_size == in_size && a->out_size == out_size && a->filter == f) return;
  const AxisGeometry g = Geometry(in_size, out_size, f);
  double (*filter)(double) = f == ResampleFilter::kBicubic ? BicubicFilter : BilinearFilter;
  a->in_size = in_size;
  a->out_size = out_size;
  a->filter = f;
  a->ksize = g.ksize;
  a->bounds.assign(static_cast<size_t>(out_size) * 2, 0);
  a->k.assign(static_cast<size_t>(out_size) * g.ksize, 0);
  a->exact.assign(g.ksize, 0.0);
  for (int xx = 0; xx < out_size; ++xx) {
    double center = 0;
    const auto [xmin, count] = Bounds(g, in_size, xx, &center);
    double ww = 0.0;
    for (int x = 0; x < count; ++x) {
      const double w = filter((x + xmin - center + 0.5) * g.inv_filterscale);
      a->exact[x] = w;
      ww += w;
    }
    int32_t* k = &a->k[static_cast<size_t>(xx) * g.ksize];
    for (int x = 0; x < count; ++x) {
      const double w = ww != 0.0 ? a->exact[x] / ww : a->exact[x];
      // normalize_coeffs_8bpc: round half away from zero.
      k[x] = w < 0 ? static_cast<int32_t>(-0.5 + w * (1 << kPrecisionBits))
                   : static_cast<int32_t>(0.5 + w * (1 << kPrecisionBits));
    }
    a->bounds[2 * xx] = xmin;
    a->bounds[2 * xx + 1] = count;
  }
}

// The source rows [first, last) that the vertical pass reads.
std::pair<int, int> VerticalSpan(int in_h, int out_h, ResampleFilter f) {
  const AxisGeometry g = Geometry(in_h, out_h, f);
  const int first = Bounds(g, in_h, 0, nullptr).first;
  const auto [xmin, count] = Bounds(g, in_h, out_h - 1, nullptr);
  return {first, xmin + count};
}

inline uint8_t Clip8(int32_t v) {
  return static_cast<uint8_t>(std::clamp(v >> kPrecisionBits, 0, 255));
}

// The horizontal pass over `rows` rows from source row `y0`, into out (out_stride bytes
// per row). Integer sums: the order does not change the result (no overflow, as in PIL).
template <int C>
[[gnu::always_inline]] inline void HorizontalPass(ImageView src, int y0, int rows,
                                                  const PilAxis& ax, uint8_t* out,
                                                  int64_t out_stride) {
  const int out_w = ax.out_size;
  const int ksize = ax.ksize;
  const int32_t* bounds = ax.bounds.data();
  const int32_t* weights = ax.k.data();
  for (int yy = 0; yy < rows; ++yy) {
    const uint8_t* in = src.row(y0 + yy);
    uint8_t* o = out + yy * out_stride;
    for (int xx = 0; xx < out_w; ++xx) {
      const uint8_t* p = in + static_cast<int64_t>(bounds[2 * xx]) * C;
      const int count = bounds[2 * xx + 1];
      const int32_t* k = weights + static_cast<size_t>(xx) * ksize;
      int32_t ss[C];
      for (int c = 0; c < C; ++c) ss[c] = 1 << (kPrecisionBits - 1);
      for (int x = 0; x < count; ++x) {
        for (int c = 0; c < C; ++c) ss[c] += p[x * C + c] * k[x];
      }
      for (int c = 0; c < C; ++c) o[xx * C + c] = Clip8(ss[c]);
    }
  }
}

// The vertical pass: each output row is a weighted sum of whole input rows (n bytes
// each; `in` holds source rows from `row0` on), accumulated in `acc` (n int32).
[[gnu::always_inline]] inline void VerticalPass(const uint8_t* in, int64_t in_stride, int row0,
                                                int n, const PilAxis& ay, MutableImageView dst,
                                                int32_t* acc) {
  for (int yy = 0; yy < ay.out_size; ++yy) {
    const int ymin = ay.bounds[2 * yy];
    const int count = ay.bounds[2 * yy + 1];
    const int32_t* k = &ay.k[static_cast<size_t>(yy) * ay.ksize];
    std::fill(acc, acc + n, 1 << (kPrecisionBits - 1));
    for (int y = 0; y < count; ++y) {
      const uint8_t* row = in + (ymin + y - row0) * in_stride;
      const int32_t w = k[y];
      for (int i = 0; i < n; ++i) acc[i] += row[i] * w;
    }
    uint8_t* o = dst.row(yy);
    for (int i = 0; i < n; ++i) o[i] = Clip8(acc[i]);
  }
}

// The integer loops again for AVX2 (gcc vectorises them there: 8 int32 lanes); the same
// integers either way. Not under the sanitizers, whose runtimes are not set up when the
// loader runs an ifunc resolver (normalize.cc).
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define HR_PIL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HR_PIL_CLONES
#endif

HR_PIL_CLONES void Horizontal1(ImageView s, int y0, int rows, const PilAxis& a, uint8_t* o,
                               int64_t os) {
  HorizontalPass<1>(s, y0, rows, a, o, os);
}
HR_PIL_CLONES void Horizontal3(ImageView s, int y0, int rows, const PilAxis& a, uint8_t* o,
                               int64_t os) {
  HorizontalPass<3>(s, y0, rows, a, o, os);
}
HR_PIL_CLONES void Horizontal4(ImageView s, int y0, int rows, const PilAxis& a, uint8_t* o,
                               int64_t os) {
  HorizontalPass<4>(s, y0, rows, a, o, os);
}
HR_PIL_CLONES void Vertical(const uint8_t* in, int64_t in_stride, int row0, int n,
                            const PilAxis& ay, MutableImageView dst, int32_t* acc) {
  VerticalPass(in, in_stride, row0, n, ay, dst, acc);
}

#if defined(__x86_64__)
// HorizontalPass<4> with AVX2 (the images decode to 4 channels; the pass was 41% of the
// VLM pipeline's CPU time as compiled code, one scalar multiply per channel and tap):
// two taps a step, each tap's 4 channels in 4 of the 8 int32 lanes, the halves added
// at the end. The same int32 products and sums as the scalar loop, in another order:
// integer addition (without overflow, as in PIL) gives the same bytes.
__attribute__((target("avx2"))) void Horizontal4Avx2(ImageView src, int y0, int rows,
                                                     const PilAxis& ax, uint8_t* out,
                                                     int64_t out_stride) {
  const int out_w = ax.out_size;
  const int ksize = ax.ksize;
  const int32_t* bounds = ax.bounds.data();
  const int32_t* weights = ax.k.data();
  const __m128i half = _mm_set1_epi32(1 << (kPrecisionBits - 1));
  for (int yy = 0; yy < rows; ++yy) {
    const uint8_t* in = src.row(y0 + yy);
    uint8_t* o = out + yy * out_stride;
    for (int xx = 0; xx < out_w; ++xx) {
      const uint8_t* p = in + static_cast<int64_t>(bounds[2 * xx]) * 4;
      const int count = bounds[2 * xx + 1];
      const int32_t* k = weights + static_cast<size_t>(xx) * ksize;
      __m256i acc = _mm256_setzero_si256();
      int x = 0;
      for (; x + 2 <= count; x += 2) {
        const __m256i px = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + x * 4)));
        const __m256i w = _mm256_set_m128i(_mm_set1_epi32(k[x + 1]), _mm_set1_epi32(k[x]));
        acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(px, w));
      }
      __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
      if (x < count) {
        int32_t last;
        std::memcpy(&last, p + x * 4, sizeof last);
        sum = _mm_add_epi32(sum, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(last)),
                                                 _mm_set1_epi32(k[x])));
      }
      // Clip8 of each: the shift, then saturation to [0, 255] (the shifted sums fit int16).
      sum = _mm_srai_epi32(_mm_add_epi32(sum, half), kPrecisionBits);
      const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(sum, sum), sum);
      const int32_t packed = _mm_cvtsi128_si32(bytes);
      std::memcpy(o + xx * 4, &packed, sizeof packed);
    }
  }
}
#endif

void Horizontal(ImageView s, int y0, int rows, const PilAxis& a, uint8_t* o, int64_t os) {
  switch (s.channels) {
    case 1: return Horizontal1(s, y0, rows, a, o, os);
    case 3: return Horizontal3(s, y0, rows, a, o, os);
    default:
#if defined(__x86_64__)
      if (HasAvx2()) return Horizontal4Avx2(s, y0, rows, a, o, os);
#endif
      return Horizontal4(s, y0, rows, a, o, os);
  }
}

struct PilBuffers {
  PilAxis x, y;
  std::vector<int32_t> acc;
};

}  // namespace

EnumTable<ResampleFilter> TableOf(ResampleFilter) { return kFilterNames; }

SmartResizeRule ResolveSmartResize(const SmartResizeSpec& spec) {
  SmartResizeRule rule;
  if (const VisionPreset* p = FindVisionPreset(spec.preset)) {
    rule.patch_size = p->patch_size;
    rule.merge_size = p->merge_size;
    rule.min_pixels = p->image_min_pixels;
    rule.max_pixels = p->image_max_pixels;
  }
  if (spec.patch_size != 0) rule.patch_size = spec.patch_size;
  if (spec.merge_size != 0) rule.merge_size = spec.merge_size;
  if (spec.min_pixels != 0) rule.min_pixels = spec.min_pixels;
  if (spec.max_pixels != 0) rule.max_pixels = spec.max_pixels;
  rule.max_aspect_ratio = spec.max_aspect_ratio;
  return rule;
}

Result<ImageSize> SmartResizeSize(int width, int height, const SmartResizeRule& rule) {
  if (width <= 0 || height <= 0) {
    return Status::InvalidArgument("image.smart_resize: empty image (" + std::to_string(width) +
                                   "x" + std::to_string(height) + ")");
  }
  // transformers: max(h, w) / min(h, w) > 200 raises; Python's int / int is the correctly
  // rounded quotient, as double / double of these exact values is.
  const double ratio = static_cast<double>(std::max(width, height)) / std::min(width, height);
  if (ratio > rule.max_aspect_ratio) {
    return Status::PixelLimit("image " + std::to_string(width) + "x" + std::to_string(height) +
                              ": aspect ratio " + schema::FormatDouble(ratio) +
                              " is above max_aspect_ratio " +
                              schema::FormatDouble(rule.max_aspect_ratio));
  }
  const int64_t factor = rule.factor();
  const double f = static_cast<double>(factor);
  const double h = height, w = width;
  // Python's round(): half to even, as nearbyint in the default rounding mode.
  int64_t h_bar = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  const double pixels = static_cast<double>(int64_t{width} * height);  // exact below 2^53
  if (h_bar * w_bar > rule.max_pixels) {
    const double beta = std::sqrt(pixels / static_cast<double>(rule.max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < rule.min_pixels) {
    const double beta = std::sqrt(static_cast<double>(rule.min_pixels) / pixels);
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  // Bounded by Validate's max_pixels and the aspect ratio; a side past int is a bug.
  if (h_bar > 0x7fffffff || w_bar > 0x7fffffff) {
    return Status::Internal("image.smart_resize: size overflow");
  }
  return ImageSize{static_cast<int>(w_bar), static_cast<int>(h_bar)};
}

Result<ImageSize> SmartResizeVideoSize(int frames, int temporal_factor, int width, int height,
                                       const SmartResizeRule& rule) {
  if (width <= 0 || height <= 0) {
    return Status::InvalidArgument("video smart_resize: empty frame (" + std::to_string(width) +
                                   "x" + std::to_string(height) + ")");
  }
  if (temporal_factor < 1 || frames < temporal_factor) {
    return Status::InvalidArgument("video smart_resize: " + std::to_string(frames) +
                                   " frames, fewer than temporal_patch_size " +
                                   std::to_string(temporal_factor));
  }
  const int64_t factor = rule.factor();
  const double f = static_cast<double>(factor);
  // transformers: a side below the factor scales both up (int() truncates).
  int64_t h0 = height, w0 = width;
  if (h0 < factor || w0 < factor) {
    const double scale = std::max(f / static_cast<double>(h0), f / static_cast<double>(w0));
    h0 = static_cast<int64_t>(static_cast<double>(h0) * scale);
    w0 = static_cast<int64_t>(static_cast<double>(w0) * scale);
  }
  const double ratio =
      static_cast<double>(std::max(w0, h0)) / static_cast<double>(std::min(w0, h0));
  if (ratio > rule.max_aspect_ratio) {
    return Status::PixelLimit("video frame " + std::to_string(width) + "x" +
                              std::to_string(height) + ": aspect ratio " +
                              schema::FormatDouble(ratio) + " is above max_aspect_ratio " +
                              schema::FormatDouble(rule.max_aspect_ratio));
  }
  const double h = static_cast<double>(h0), w = static_cast<double>(w0);
  const double t = frames;
  int64_t h_bar = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  const int64_t t_bar =
      static_cast<int64_t>(std::nearbyint(t / temporal_factor)) * temporal_factor;
  // Python's ints are exact; frames * h * w stays below 2^53 here (frames <= 4096,
  // sides < 2^20 after the scale-up).
  const double volume = t * h * w;
  if (t_bar * h_bar * w_bar > rule.max_pixels) {
    const double beta = std::sqrt(volume / static_cast<double>(rule.max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (t_bar * h_bar * w_bar < rule.min_pixels) {
    const double beta = std::sqrt(static_cast<double>(rule.min_pixels) / volume);
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  if (h_bar > 0x7fffffff || w_bar > 0x7fffffff) {
    return Status::Internal("video smart_resize: size overflow");
  }
  return ImageSize{static_cast<int>(w_bar), static_cast<int>(h_bar)};
}

namespace {
// Pillow 13's order (ImagingResampleInner, python-pillow/Pillow#9549, "if height is scaled
// down significantly more than width, resize vertically first"): vertical first when the
// height loses more than twice as many pixels as the width, else horizontal first. Read
// from the installed Pillow 13.0 (its disassembly: the released rule is not in the
// repository's main yet) and confirmed on 994 random size pairs against one-order
// emulations. Pillow 12 and older always filtered horizontally first (README.md).
bool HorizontalFirst(int src_width, int src_height, int dst_width, int dst_height) {
  const int64_t dh = int64_t{src_height} - dst_height;
  const int64_t dw = int64_t{src_width} - dst_width;
  return !(dh > 0 && dh > 2 * dw);
}
}  // namespace

size_t PilResizeTempBytes(int src_width, int src_height, int dst_width, int dst_height,
                          int channels, ResampleFilter filter) {
  if (src_width == dst_width || src_height == dst_height) return 0;  // a pass is skipped
  if (!HorizontalFirst(src_width, src_height, dst_width, dst_height)) {
    return static_cast<size_t>(src_width) * channels * static_cast<size_t>(dst_height);
  }
  const auto [first, last] = VerticalSpan(src_height, dst_height, filter);
  return static_cast<size_t>(dst_width) * channels * static_cast<size_t>(last - first);
}

Status PilResizeInto(ImageView src, MutableImageView dst, ResampleFilter filter, uint8_t* temp) {
  const int c = src.channels;
  if (src.empty() || dst.data == nullptr || dst.width <= 0 || dst.height <= 0 ||
      (c != 1 && c != 3 && c != 4) || dst.channels != c) {
    return Status::InvalidArgument(
        "PilResizeInto: needs non-empty 1-, 3- or 4-channel images with matching channels");
  }
  if (filter != ResampleFilter::kBicubic && filter != ResampleFilter::kBilinear) {
    return Status::InvalidArgument("PilResizeInto: unknown filter");
  }
  const bool horizontal = dst.width != src.width;
  const bool vertical = dst.height != src.height;
  if (horizontal && vertical && temp == nullptr) {
    return Status::InvalidArgument("PilResizeInto: needs a temp buffer");
  }
  thread_local PilBuffers buffers;
  PilBuffers& b = buffers;
  if (!horizontal && !vertical) {  // PIL returns a copy
    const size_t bytes = static_cast<size_t>(src.width) * c;
    for (int y = 0; y < src.height; ++y) std::memcpy(dst.row(y), src.row(y), bytes);
    return Status::Ok();
  }
  if (vertical) BuildPilAxis(src.height, dst.height, filter, &b.y);
  if (horizontal) BuildPilAxis(src.width, dst.width, filter, &b.x);
  if (!vertical) {
    Horizontal(src, 0, dst.height, b.x, dst.data, dst.stride);
    return Status::Ok();
  }
  if (!horizontal) {
    const int n = dst.width * c;
    if (b.acc.size() < static_cast<size_t>(n)) b.acc.resize(n);
    Vertical(src.data, src.stride, 0, n, b.y, dst, b.acc.data());
    return Status::Ok();
  }
  if (!HorizontalFirst(src.width, src.height, dst.width, dst.height)) {
    const int n = src.width * c;
    if (b.acc.size() < static_cast<size_t>(n)) b.acc.resize(n);
    const MutableImageView mid{temp, src.width, dst.height, c, n};
    Vertical(src.data, src.stride, 0, n, b.y, mid, b.acc.data());
    Horizontal(mid, 0, dst.height, b.x, dst.data, dst.stride);
    return Status::Ok();
  }
  // Horizontally, PIL filters only the rows [first, last) that the vertical pass reads.
  const int n = dst.width * c;
  if (b.acc.size() < static_cast<size_t>(n)) b.acc.resize(n);
  const int first = b.y.bounds[0];
  const int last = b.y.bounds[2 * (dst.height - 1)] + b.y.bounds[2 * (dst.height - 1) + 1];
  Horizontal(src, first, last - first, b.x, temp, n);
  Vertical(temp, n, first, n, b.y, dst, b.acc.data());
  return Status::Ok();
}

Result<Image> PilResize(ImageView src, int width, int height, ResampleFilter filter) {
  HR_ASSIGN_OR_RETURN(Image out, Image::Allocate(width, height, src.channels));
  std::vector<uint8_t> temp(
      PilResizeTempBytes(src.width, src.height, width, height, src.channels, filter));
  HR_RETURN_IF_ERROR(
      PilResizeInto(src, out.mutable_view(), filter, temp.empty() ? nullptr : temp.data()));
  return out;
}

Status SmartResizeOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".field", s.field, "the image value to resize"));
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".preset", s.preset));
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".resample", s.resample));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".patch_size", s.patch_size, 0, 1024));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".merge_size", s.merge_size, 0, 64));
  constexpr int64_t kMaxPixels = int64_t{1} << 28;  // 1 GiB of RGBX
  HR_RETURN_IF_ERROR(schema::InRange(p + ".min_pixels", s.min_pixels, int64_t{0}, kMaxPixels));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".max_pixels", s.max_pixels, int64_t{0}, kMaxPixels));
  HR_RETURN_IF_ERROR(
      schema::FiniteInRange(p + ".max_aspect_ratio", s.max_aspect_ratio, 1.0, 1e6));
  const SmartResizeRule rule = ResolveSmartResize(s);
  if (rule.min_pixels > rule.max_pixels) {
    return schema::Invalid(p + ".min_pixels",
                           "must be <= max_pixels (got min_pixels " +
                               std::to_string(rule.min_pixels) + ", max_pixels " +
                               std::to_string(rule.max_pixels) +
                               (s.preset != VisionModel::kNone
                                    ? ", with preset " + std::string(EnumName(s.preset))
                                    : std::string()) +
                               ")");
  }
  return Status::Ok();
}

Status SmartResizeOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc image, ctx.Read(spec.field, ValueKind::kImage));
  const int64_t channels = image.shape.size() == 3 ? image.shape[2] : -1;
  const SmartResizeRule rule = ResolveSmartResize(spec);
  image.shape = {-1, -1, channels};
  image.shape_source = ctx.key() + ".max_pixels " + std::to_string(rule.max_pixels) +
                       " (each image keeps its aspect ratio; sides are multiples of " +
                       std::to_string(rule.factor()) + ")";
  image.geometry =
      PatchGeometry{rule.patch_size, rule.merge_size, ctx.key(),
                    std::string(PresetOfSizes(spec.preset, spec.patch_size, spec.merge_size))};
  return ctx.Write(spec.field, std::move(image));
}

Result<std::unique_ptr<Op>> SmartResizeOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(std::make_unique<SmartResizeOp>(spec, ctx.slot(spec.field)));
}

SmartResizeOp::SmartResizeOp(const SmartResizeSpec& spec, int slot)
    : spec_(spec),
      rule_(ResolveSmartResize(spec)),
      slot_(slot),
      valid_(Validate(spec, std::string(kName))) {}

Status SmartResizeOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  const ImageView* in = ctx.Get<ImageView>(slot_);
  if (in == nullptr) return Status::Internal("image.smart_resize: no image (decode first)");
  const ImageView image = *in;
  HR_ASSIGN_OR_RETURN(ImageSize size, SmartResizeSize(image.width, image.height, rule_));
  if (size.width == image.width && size.height == image.height) return Status::Ok();
  uint8_t* temp = nullptr;
  if (const size_t bytes = PilResizeTempBytes(image.width, image.height, size.width,
                                              size.height, image.channels, spec_.resample)) {
    HR_ASSIGN_OR_RETURN(temp, ctx.NextScratchBytes(bytes));
  }
  HR_ASSIGN_OR_RETURN(MutableImageView out,
                      ctx.NextScratchImage(size.width, size.height, image.channels));
  HR_RETURN_IF_ERROR(PilResizeInto(image, out, spec_.resample, temp));
  ctx.Set(slot_, ImageView(out));
  return Status::Ok();
}

bool SmartResizeOp::Predict(SizePass& pass) const {
  SizePass::Size& image = pass.images[static_cast<size_t>(slot_)];
  if (!valid_.ok() || image.width <= 0) return false;
  const Result<ImageSize> size = SmartResizeSize(image.width, image.height, rule_);
  if (!size.ok()) return false;
  image = {size->width, size->height};
  return true;
}

}  // namespace headrace
