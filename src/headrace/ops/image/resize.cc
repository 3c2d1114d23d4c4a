#include "headrace/ops/image/resize.h"

#include "headrace/core/cpu_features.h"
#include "headrace/ops/schema.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace headrace {
namespace {

// Why not libyuv's ARGBScale here: it has no area filter for ARGB at arbitrary ratios
// (kFilterBox becomes bilinear below 2x and point sampling at odd integer factors, so a
// fine pattern aliases), and its bilinear upscale aligns corners instead of pixel
// centres. This separable fixed-point resampler costs about what ARGBScale does on the
// hot path (640x480 -> 341x256); see README.md.
//
// Arithmetic (integers only, so results do not depend on the CPU or on which of the
// AVX2 and portable paths ran): weights are Q14 and sum to exactly 1 << 14, so flat
// areas stay flat. The vertical pass turns 8-bit rows into one row of pixel * 128 (Q7)
// in int16, each tap rounded as pmulhrsw does, (p * 128 * w15 + 2^14) >> 15, with the
// weight in Q15; the horizontal pass sums Q7 x Q14 products in int32 (pmaddwd) and
// rounds once. The vertical rounding is at most taps/256 of a grey level.
//
// Past kLongTaps taps an output (a reduction of more than 63x along an axis) the Q14/Q15
// weights lose what they are for: every tap's rounding adds up (a flat 40 came out 64
// at 8192:1) and a weight below half a unit rounds to 0, its share moved to one tap
// (point sampling past 2^14 taps). Such an axis has no tables: each output's span and
// the coverage of its two end pixels (Q16; every pixel between is covered whole) are
// computed as it is filtered, values times coverage are summed in 64 bits, and the sum
// is rounded once. Scalar on both paths, so they stay identical; the work is still one
// multiply-add a source value, and the memory no longer grows with the source.

constexpr int kWeightBits = 14;
constexpr int kRowBits = 7;
constexpr int kRowPadding = 16;  // int16 after a row that the SIMD pass may read (zeros)
constexpr int kLongTaps = 64;    // past this, an area filter is a long one (above)

// For each output index along one axis: the first source index and `taps` weights.
struct AxisFilter {
  int src_n = -1, dst_n = -1;
  bool area = false;
  bool long_area = false;  // past kLongTaps: no tables, spans computed (LongSpanOf)
  int taps = 0;            // the most source indices one output touches
  std::vector<int32_t> start;
  std::vector<int16_t> weights;  // dst_n * taps
  // The same weights in Q15 (vertical pass, pmulhrsw; 1.0 saturates to 32767).
  std::vector<int16_t> weights15;
  // The same weights two by two, (w[2p] | w[2p + 1] << 16), for pmaddwd, laid out as
  // the AVX2 pass loads them: for outputs 2j and 2j + 1 and pair p, 4 copies of each.
  int pairs = 0;
  std::vector<int32_t> lane_weights;  // ceil(dst_n / 2) * pairs * 8
  std::vector<double> exact;          // scratch for one output's weights while building
};

// Which pass a filter serves: the column pass reads `weights` (Q14) and, with AVX2,
// `lane_weights`; the row pass only `weights15`, made in place of its Q14 weights. Each
// pass builds only its own: an 89,478,485 -> 8 row reduction built all of them for both
// passes, ~14 bytes a source row (1.25 GB), now ~4 (the Q15 weights, the exact weights of
// one output, the row pointers).
enum class Pass { kCols, kRows };

void BuildAxisFilter(int src_n, int dst_n, bool area, Pass pass, AxisFilter* f) {
  if (f->src_n == src_n && f->dst_n == dst_n && f->area == area) return;  // cached
  const double scale = static_cast<double>(src_n) / dst_n;
  // Upper bound of the source indices one output touches.
  int taps = area ? static_cast<int>(std::ceil(scale)) + 1 : 2;
  taps = std::min(taps, src_n);
  f->src_n = src_n;
  f->dst_n = dst_n;
  f->area = area;
  f->taps = taps;
  f->long_area = area && taps > kLongTaps;
  if (f->long_area) {
    f->start = {};
    f->weights = {};
    f->weights15 = {};
    f->lane_weights = {};
    f->exact = {};
    return;
  }
  f->start.assign(dst_n, 0);
  f->weights.assign(static_cast<size_t>(dst_n) * taps, 0);
  std::vector<double>& w = f->exact;  // reused: RandomResizedCrop rebuilds per sample
  w.resize(taps);
  for (int i = 0; i < dst_n; ++i) {
    std::fill(w.begin(), w.end(), 0.0);
    int first;
    if (area) {
      // Box: each source pixel weighs the fraction of it the output pixel covers.
      const double lo = i * scale, hi = (i + 1) * scale;
      first = std::min(static_cast<int>(lo), src_n - taps);
      for (int j = first; j < first + taps; ++j) {
        const double overlap = std::min(hi, j + 1.0) - std::max(lo, static_cast<double>(j));
        if (overlap > 0) w[j - first] = overlap / scale;
      }
    } else {
      // Bilinear with half-pixel centres; indices clamped (edge replication).
      const double c = (i + 0.5) * scale - 0.5;
      const int j = static_cast<int>(std::floor(c));
      const double frac = c - j;
      const int i0 = std::clamp(j, 0, src_n - 1);
      const int i1 = std::clamp(j + 1, 0, src_n - 1);
      first = std::min(i0, src_n - taps);
      w[i0 - first] += 1.0 - frac;
      w[i1 - first] += frac;
    }
    f->start[i] = first;
    // Quantize so that the weights sum to exactly 1 << kWeightBits: flat areas stay flat.
    int16_t* q = &f->weights[static_cast<size_t>(i) * taps];
    int sum = 0, largest = 0;
    for (int k = 0; k < taps; ++k) {
      q[k] = static_cast<int16_t>(std::lround(w[k] * (1 << kWeightBits)));
      sum += q[k];
      if (q[k] > q[largest]) largest = k;
    }
    q[largest] = static_cast<int16_t>(q[largest] + ((1 << kWeightBits) - sum));
  }
  if (pass == Pass::kRows) {
    for (int16_t& q : f->weights) q = static_cast<int16_t>(std::min(2 * q, 32767));
    f->weights15 = std::move(f->weights);
    f->weights = {};
    return;
  }
  f->pairs = (taps + 1) / 2;
  f->lane_weights.assign(static_cast<size_t>((dst_n + 1) / 2) * f->pairs * 8, 0);
  for (int i = 0; i < dst_n; ++i) {
    const int16_t* q = &f->weights[static_cast<size_t>(i) * taps];
    for (int p = 0; p < f->pairs; ++p) {
      const uint32_t lo = static_cast<uint16_t>(q[2 * p]);
      const uint32_t hi = 2 * p + 1 < taps ? static_cast<uint16_t>(q[2 * p + 1]) : 0;
      int32_t* lane =
          &f->lane_weights[((static_cast<size_t>(i / 2) * f->pairs + p) * 2 + i % 2) * 4];
      for (int k = 0; k < 4; ++k) lane[k] = static_cast<int32_t>(lo | (hi << 16));
    }
  }
}

// A filter's tables past this many weights (an extreme reduction: 2 MiB of Q14) are
// dropped after the resize that built them rather than kept by the thread.
constexpr size_t kKeptWeights = size_t{1} << 20;

struct ResizeBuffers {
  AxisFilter x, y;
  std::vector<int16_t> row;  // one vertically filtered row, Q7, plus kRowPadding zeros
  std::vector<uint64_t> sums;  // a long row pass's sums, one a value
};

// One output of a long area reduction: it covers source pixels [first, end), the two at
// the ends by `head` and `tail` (Q16), every one between whole; `total` is the sum.
struct LongSpan {
  int first = 0, end = 0;
  uint32_t head = 0, tail = 0;
  uint64_t total = 0;
  uint64_t Cover(int j) const { return j == first ? head : j == end - 1 ? tail : 1u << 16; }
};

LongSpan LongSpanOf(int src_n, int dst_n, int i) {
  const double scale = static_cast<double>(src_n) / dst_n;
  const double lo = i * scale, hi = std::min((i + 1) * scale, static_cast<double>(src_n));
  LongSpan s;
  s.first = static_cast<int>(lo);
  s.end = std::clamp(static_cast<int>(std::ceil(hi)), s.first + 1, src_n);
  const auto q16 = [](double part) {
    return static_cast<uint32_t>(std::lround(part * 65536));
  };
  s.head = q16(std::min(hi, s.first + 1.0) - lo);
  s.tail = s.end - 1 > s.first ? q16(hi - (s.end - 1)) : s.head;
  const int whole = std::max(0, s.end - s.first - 2);
  s.total = s.head + (s.end - 1 > s.first ? s.tail : 0) + (uint64_t{1} << 16) * whole;
  return s;
}

// The row pass of a long vertical reduction over values [begin, begin + n): each source
// row's values times its coverage, summed in 64 bits (at most 255 x 2^16 x 2^31), then
// rounded once into Q7.
void LongRows(ImageView src, const LongSpan& s, int begin, int n, std::vector<uint64_t>& sums,
              int16_t* out) {
  sums.assign(n, 0);
  for (int j = s.first; j < s.end; ++j) {
    const uint8_t* p = src.row(j) + begin;
    const uint64_t cover = s.Cover(j);
    for (int i = 0; i < n; ++i) sums[i] += p[i] * cover;
  }
  for (int i = 0; i < n; ++i) {
    const uint64_t q7 = (sums[i] * 128 + s.total / 2) / s.total;
    out[i] = static_cast<int16_t>(std::min<uint64_t>(q7, 32767));
  }
}

// One output pixel of a long horizontal reduction, from the Q7 row of the span's source
// columns (`row` starts at column s.first), rounded once into 8 bits.
template <int C>
void LongColPixel(const int16_t* row, const LongSpan& s, uint8_t* out) {
  uint64_t sum[C] = {};
  for (int j = s.first; j < s.end; ++j) {
    const uint64_t cover = s.Cover(j);
    const int16_t* p = row + static_cast<int64_t>(j - s.first) * C;
    for (int c = 0; c < C; ++c) sum[c] += static_cast<uint64_t>(p[c]) * cover;
  }
  const uint64_t unit = s.total * 128;
  for (int c = 0; c < C; ++c) {
    out[c] = static_cast<uint8_t>(std::min<uint64_t>((sum[c] + unit / 2) / unit, 255));
  }
}

// One vertical tap, exactly as pmulhrsw computes it: (p * 128 * w15 + 2^14) >> 15.
inline int32_t VerticalTap(uint8_t p, int16_t w15) {
  return (static_cast<int32_t>(p) * 128 * w15 + (1 << 14)) >> 15;
}

// Vertical pass: the weighted sum of `taps` source rows, values [begin, n), into Q7.
void FilterRowsScalar(const uint8_t* const* rows, const int16_t* w15, int taps, int begin, int n,
                      int16_t* out) {
  for (int i = begin; i < n; ++i) {
    int32_t a = 0;
    for (int k = 0; k < taps; ++k) a += VerticalTap(rows[k][i], w15[k]);
    out[i] = static_cast<int16_t>(std::min(a, 32767));
  }
}

constexpr int kColShift = kWeightBits + kRowBits;

// Horizontal pass over one Q7 row into 8-bit pixels [begin, end), portable form.
template <int C>
void FilterColsScalar(const int16_t* row, const AxisFilter& f, int begin, int end, uint8_t* out) {
  const int taps = f.taps;
  const int32_t* const start = f.start.data();
  const int16_t* const weights = f.weights.data();
  for (int x = begin; x < end; ++x) {
    const int16_t* p = row + static_cast<int64_t>(start[x]) * C;
    const int16_t* w = weights + static_cast<size_t>(x) * taps;
    int32_t a[C];
    for (int c = 0; c < C; ++c) a[c] = 1 << (kColShift - 1);
    for (int k = 0; k < taps; ++k) {
      for (int c = 0; c < C; ++c) a[c] += w[k] * p[k * C + c];
    }
    for (int c = 0; c < C; ++c) {
      out[x * C + c] = static_cast<uint8_t>(std::clamp(a[c] >> kColShift, 0, 255));
    }
  }
}

#if defined(__x86_64__)

constexpr int kMaxSimdTaps = 8;

// 16 values per step: zero-extend, * 128, pmulhrsw by the broadcast weight, add. Taps
// go in groups of kMaxSimdTaps, later groups adding to what earlier ones stored. The
// sum is at most 32640 plus half a unit per tap; adds saturate, as the scalar form does,
// so that even a >250-tap reduction cannot wrap.
// kTaps > 0 fixes the tap count at compile time (unrolled); 0 reads `taps`.
template <int kTaps>
__attribute__((target("avx2"))) void FilterRowsAvx2(const uint8_t* const* rows, const int16_t* w15,
                                                    int taps, int n, int16_t* out) {
  if (kTaps > 0) taps = kTaps;
  const int simd_n = n / 16 * 16;
  for (int group = 0; group < taps; group += kMaxSimdTaps) {
    const int group_taps = std::min(kMaxSimdTaps, taps - group);
    __m256i weight[kMaxSimdTaps];
    const uint8_t* src[kMaxSimdTaps];
    for (int k = 0; k < group_taps; ++k) {
      weight[k] = _mm256_set1_epi16(w15[group + k]);
      src[k] = rows[group + k];
    }
    for (int i = 0; i < simd_n; i += 16) {
      __m256i acc = group == 0 ? _mm256_setzero_si256()
                               : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(out + i));
      for (int k = 0; k < (kTaps > 0 ? kTaps : group_taps); ++k) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[k] + i));
        const __m256i q7 = _mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), kRowBits);
        acc = _mm256_adds_epi16(acc, _mm256_mulhrs_epi16(q7, weight[k]));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), acc);
    }
  }
  FilterRowsScalar(rows, w15, taps, simd_n, n, out);
}

// Two output pixels per step, one per 128-bit lane. Per pair of taps, one 16-byte load
// holds both source pixels; pshufb interleaves them channel by channel (a0 b0 a1 b1 ...)
// and pmaddwd applies both weights at once. kPairs > 0 fixes the pair count at compile
// time (unrolled); 0 reads it from f.
template <int C, int kPairs>
__attribute__((target("avx2"))) void FilterColsAvx2(const int16_t* row, const AxisFilter& f,
                                                    int dst_width, uint8_t* out) {
  const __m128i interleave128 =
      C == 4 ? _mm_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15)
             : _mm_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1);
  const __m256i interleave = _mm256_broadcastsi128_si256(interleave128);
  const __m256i round = _mm256_set1_epi32(1 << (kColShift - 1));
  // Locals, not f's members: stores through `out` (a uint8_t*) may alias anything, which
  // would make the compiler reload every member after every pixel.
  const int pairs = kPairs > 0 ? kPairs : f.pairs;
  const __m256i* weights = reinterpret_cast<const __m256i*>(f.lane_weights.data());
  const int32_t* const start = f.start.data();
  int x = 0;
  for (; x + 2 <= dst_width; x += 2, weights += pairs) {
    const int16_t* p0 = row + static_cast<int64_t>(start[x]) * C;
    const int16_t* p1 = row + static_cast<int64_t>(start[x + 1]) * C;
    __m256i acc = round;
    for (int k = 0; k < pairs; ++k) {
      const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + 2 * k * C));
      const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + 2 * k * C));
      const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(v0), v1, 1);
      const __m256i w = _mm256_loadu_si256(weights + k);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(v, interleave), w));
    }
    acc = _mm256_srai_epi32(acc, kColShift);
    const __m256i words = _mm256_packs_epi32(acc, acc);
    const __m256i bytes = _mm256_packus_epi16(words, words);
    const uint32_t first = static_cast<uint32_t>(_mm256_extract_epi32(bytes, 0));
    const uint32_t second = static_cast<uint32_t>(_mm256_extract_epi32(bytes, 4));
    std::memcpy(out + static_cast<int64_t>(x) * C, &first, C);
    std::memcpy(out + static_cast<int64_t>(x + 1) * C, &second, C);
  }
  FilterColsScalar<C>(row, f, x, dst_width, out);
}

template <int C>
void FilterColsAvx2Dispatch(const int16_t* row, const AxisFilter& f, int dst_width, uint8_t* out) {
  switch (f.pairs) {
    case 1: return FilterColsAvx2<C, 1>(row, f, dst_width, out);
    case 2: return FilterColsAvx2<C, 2>(row, f, dst_width, out);
    case 3: return FilterColsAvx2<C, 3>(row, f, dst_width, out);
    default: return FilterColsAvx2<C, 0>(row, f, dst_width, out);
  }
}
#endif

void FilterRows(const uint8_t* const* rows, const int16_t* w15, int taps, int n, int16_t* out,
                bool simd) {
#if defined(__x86_64__)
  if (simd && HasAvx2()) {
    switch (taps) {
      case 2: return FilterRowsAvx2<2>(rows, w15, taps, n, out);
      case 3: return FilterRowsAvx2<3>(rows, w15, taps, n, out);
      default: return FilterRowsAvx2<0>(rows, w15, taps, n, out);
    }
  }
#endif
  FilterRowsScalar(rows, w15, taps, 0, n, out);
}

void FilterCols(const int16_t* row, const AxisFilter& f, int dst_width, int channels, uint8_t* out,
                bool simd) {
#if defined(__x86_64__)
  if (simd && HasAvx2()) {
    channels == 4 ? FilterColsAvx2Dispatch<4>(row, f, dst_width, out)
                  : FilterColsAvx2Dispatch<3>(row, f, dst_width, out);
    return;
  }
#endif
  channels == 4 ? FilterColsScalar<4>(row, f, 0, dst_width, out)
                : FilterColsScalar<3>(row, f, 0, dst_width, out);
}

Status ResizeWith(ImageView src, MutableImageView dst, bool antialias, bool simd) {
  const int c = src.channels;
  if (src.empty() || dst.data == nullptr || dst.width <= 0 || dst.height <= 0 ||
      (c != 3 && c != 4) || dst.channels != c) {
    return Status::InvalidArgument(
        "ResizeInto: needs non-empty 3- or 4-channel images with "
        "matching channel counts");
  }
  thread_local ResizeBuffers buffers;
  ResizeBuffers& b = buffers;
  BuildAxisFilter(src.width, dst.width, antialias && dst.width < src.width, Pass::kCols, &b.x);
  BuildAxisFilter(src.height, dst.height, antialias && dst.height < src.height, Pass::kRows,
                  &b.y);
  const int n = src.width * c;
  // A long horizontal reduction filters rows one output's span at a time: its rows are
  // that long, not the source's width (an 89,478,485 x 1 PNG's would take 537 MB).
  const int row_n = b.x.long_area ? b.x.taps * c : n;
  if (b.row.size() < static_cast<size_t>(row_n) + kRowPadding) {
    b.row.assign(row_n + kRowPadding, 0);
  }
  std::fill(b.row.begin() + row_n, b.row.begin() + row_n + kRowPadding, 0);
  constexpr int kMaxStackTaps = kLongTaps;
  const uint8_t* rows[kMaxStackTaps];
  for (int y = 0; y < dst.height; ++y) {
    LongSpan span_y;
    if (b.y.long_area) span_y = LongSpanOf(src.height, dst.height, y);
    // The row pass over values [begin, begin + count) into b.row.
    const auto filter_rows = [&](int begin, int count) {
      if (b.y.long_area) return LongRows(src, span_y, begin, count, b.sums, b.row.data());
      const int first = b.y.start[y];
      for (int k = 0; k < b.y.taps; ++k) rows[k] = src.row(first + k) + begin;
      FilterRows(rows, &b.y.weights15[static_cast<size_t>(y) * b.y.taps], b.y.taps, count,
                 b.row.data(), simd);
    };
    if (!b.x.long_area) {
      filter_rows(0, n);
      FilterCols(b.row.data(), b.x, dst.width, c, dst.row(y), simd);
      continue;
    }
    for (int x = 0; x < dst.width; ++x) {
      const LongSpan span_x = LongSpanOf(src.width, dst.width, x);
      filter_rows(span_x.first * c, (span_x.end - span_x.first) * c);
      uint8_t* out = dst.row(y) + static_cast<int64_t>(x) * c;
      c == 4 ? LongColPixel<4>(b.row.data(), span_x, out)
             : LongColPixel<3>(b.row.data(), span_x, out);
    }
  }
  if (b.x.weights.size() > kKeptWeights || b.row.size() > kKeptWeights) {
    b.x = AxisFilter();
    b.row = {};
  }
  if (b.sums.size() > kKeptWeights) b.sums = {};
  if (b.y.weights15.size() > kKeptWeights) b.y = AxisFilter();
  return Status::Ok();
}

}  // namespace

ImageSize ResizeOutputSize(const ResizeSpec& spec, int width, int height) {
  if (spec.shorter_side <= 0) return {spec.width, spec.height};
  auto scaled = [&](int longer, int shorter) {
    return std::max(1, static_cast<int>(
                           std::lround(static_cast<double>(longer) * spec.shorter_side / shorter)));
  };
  if (width <= height) return {spec.shorter_side, scaled(height, width)};
  return {scaled(width, height), spec.shorter_side};
}

Status ResizeInto(ImageView src, MutableImageView dst, bool antialias) {
  return ResizeWith(src, dst, antialias, /*simd=*/true);
}

namespace internal {
Status ResizeIntoPortable(ImageView src, MutableImageView dst, bool antialias) {
  return ResizeWith(src, dst, antialias, /*simd=*/false);
}
}  // namespace internal

Result<Image> Resize(ImageView src, int width, int height, bool antialias) {
  HR_ASSIGN_OR_RETURN(Image out, Image::Allocate(width, height, src.channels));
  HR_RETURN_IF_ERROR(ResizeInto(src, out.mutable_view(), antialias));
  return out;
}

Status ResizeOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".field", s.field, "the image value to resize"));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".shorter_side", s.shorter_side, 0, kMaxImageSide));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".width", s.width, 0, kMaxImageSide));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".height", s.height, 0, kMaxImageSide));
  const bool exact = s.width > 0 || s.height > 0;
  if (s.shorter_side > 0 && exact) {
    return schema::Invalid(p, "set shorter_side, or width and height, not both");
  }
  if (s.shorter_side == 0 && !exact) {
    return schema::Invalid(p + ".shorter_side", "set shorter_side > 0, or width and height > 0");
  }
  if (exact && s.width == 0) return schema::Invalid(p + ".width", "must be > 0 when height is set");
  if (exact && s.height == 0) {
    return schema::Invalid(p + ".height", "must be > 0 when width is set");
  }
  return Status::Ok();
}

Status ResizeOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc image, ctx.Read(spec.field, ValueKind::kImage));
  const int64_t channels = image.shape.size() == 3 ? image.shape[2] : -1;
  if (spec.shorter_side > 0) {
    image.shape = {-1, -1, channels};
    image.shape_source = ctx.key() + ".shorter_side " + std::to_string(spec.shorter_side) +
                         " (keeps each image's aspect ratio)";
  } else {
    image.shape = {spec.height, spec.width, channels};
    image.shape_source = ctx.key() + ".width " + std::to_string(spec.width) + ", height " +
                         std::to_string(spec.height);
  }
  return ctx.Write(spec.field, std::move(image));
}

void ResizeOp::Hint(const Spec& spec, ValueHints& hints) {
  SizeHint need;
  if (spec.shorter_side > 0) {
    need.min_shorter_side = spec.shorter_side;
  } else {
    need.min_width = spec.width;
    need.min_height = spec.height;
  }
  hints.Set(spec.field, need);
}

Result<std::unique_ptr<Op>> ResizeOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(std::make_unique<ResizeOp>(spec, ctx.slot(spec.field)));
}

ResizeOp::ResizeOp(const ResizeSpec& spec, int slot)
    : spec_(spec), slot_(slot), valid_(Validate(spec, std::string(kName))) {}

Status ResizeOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  const ImageView* in = ctx.Get<ImageView>(slot_);
  if (in == nullptr) return Status::Internal("image.resize: no image (decode first)");
  const ImageView image = *in;
  const ImageSize size = ResizeOutputSize(spec_, image.width, image.height);
  if (size.width == image.width && size.height == image.height) return Status::Ok();
  HR_ASSIGN_OR_RETURN(MutableImageView out,
                      ctx.NextScratchImage(size.width, size.height, image.channels));
  HR_RETURN_IF_ERROR(ResizeInto(image, out, spec_.antialias));
  ctx.Set(slot_, ImageView(out));
  return Status::Ok();
}

}  // namespace headrace
