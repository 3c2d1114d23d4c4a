// Hand-written kernel: none of libjpeg-turbo, libpng, libwebp or libyuv has a Gaussian
// blur (libyuv's ARGBBlur is a box filter over a cumulative sum, 4-byte pixels only).
#include "headrace/ops/image/gaussian_blur.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "headrace/core/cpu_features.h"
#include "headrace/core/rng.h"
#include "headrace/ops/schema.h"

namespace headrace {

void GaussianKernel1d(double sigma, std::span<float> kernel) {
  const double half = (static_cast<double>(kernel.size()) - 1) * 0.5;
  double sum = 0;
  for (size_t j = 0; j < kernel.size(); ++j) {
    const double x = (static_cast<double>(j) - half) / sigma;
    sum += std::exp(-0.5 * x * x);
  }
  for (size_t j = 0; j < kernel.size(); ++j) {
    const double x = (static_cast<double>(j) - half) / sigma;
    kernel[j] = static_cast<float>(std::exp(-0.5 * x * x) / sum);
  }
}

int ReflectIndex(int i, int n) {
  if (n <= 1) return 0;
  const int period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

namespace {

// The passes: per tap j, sum += kernel[j] * x, in tap order, in float, one row at a time.
// The AVX2 forms do the same IEEE operations in the same order (a multiply then an add,
// never fused), so both give the same bytes on every machine.

// acc[i] = sum_j kernel[j] * rows[j][i], for i in [from, n).
void VerticalPassScalar(const uint8_t* const* rows, const float* kernel, int taps, int from,
                        int n, float* acc) {
  for (int i = from; i < n; ++i) {
    float sum = 0.0f;
    for (int j = 0; j < taps; ++j) sum += kernel[j] * static_cast<float>(rows[j][i]);
    acc[i] = sum;
  }
}

inline uint8_t RoundToByte(float v) {
  return static_cast<uint8_t>(std::nearbyint(std::clamp(v, 0.0f, 255.0f)));
}

// out[i] = round(sum_j kernel[j] * padded[i + j * channels]), for i in [from, n).
void HorizontalPassScalar(const float* padded, const float* kernel, int taps, int channels,
                          int from, int n, uint8_t* out) {
  for (int i = from; i < n; ++i) {
    float sum = 0.0f;
    for (int j = 0; j < taps; ++j) {
      sum += kernel[j] * padded[i + static_cast<ptrdiff_t>(j) * channels];
    }
    out[i] = RoundToByte(sum);
  }
}

#if defined(__x86_64__)

// 16 values per step, both sums in registers over all taps.
__attribute__((target("avx2"))) void VerticalPassAvx2(const uint8_t* const* rows,
                                                      const float* kernel, int taps, int n,
                                                      float* acc) {
  const int simd_n = n / 16 * 16;
  for (int i = 0; i < simd_n; i += 16) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int j = 0; j < taps; ++j) {
      const __m256 w = _mm256_broadcast_ss(kernel + j);
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + i));
      const __m256 x0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
      const __m256 x1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8)));
      lo = _mm256_add_ps(lo, _mm256_mul_ps(w, x0));
      hi = _mm256_add_ps(hi, _mm256_mul_ps(w, x1));
    }
    _mm256_storeu_ps(acc + i, lo);
    _mm256_storeu_ps(acc + i + 8, hi);
  }
  VerticalPassScalar(rows, kernel, taps, simd_n, n, acc);
}

__attribute__((target("avx2"))) void HorizontalPassAvx2(const float* padded, const float* kernel,
                                                        int taps, int channels, int n,
                                                        uint8_t* out) {
  const int simd_n = n / 16 * 16;
  const __m256 zero = _mm256_setzero_ps(), max = _mm256_set1_ps(255.0f);
  for (int i = 0; i < simd_n; i += 16) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    const float* p = padded + i;
    for (int j = 0; j < taps; ++j, p += channels) {
      const __m256 w = _mm256_broadcast_ss(kernel + j);
      lo = _mm256_add_ps(lo, _mm256_mul_ps(w, _mm256_loadu_ps(p)));
      hi = _mm256_add_ps(hi, _mm256_mul_ps(w, _mm256_loadu_ps(p + 8)));
    }
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    lo = _mm256_round_ps(_mm256_min_ps(_mm256_max_ps(lo, zero), max), kRound);
    hi = _mm256_round_ps(_mm256_min_ps(_mm256_max_ps(hi, zero), max), kRound);
    // 16 int32 -> 16 bytes (values are 0..255: the saturating packs change nothing).
    const __m256i words = _mm256_packus_epi32(_mm256_cvtps_epi32(lo), _mm256_cvtps_epi32(hi));
    const __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(words),
                                           _mm256_extracti128_si256(words, 1));
    // packus_epi32 interleaves the 128-bit lanes: (lo0-3, hi0-3, lo4-7, hi4-7).
    const __m128i ordered = _mm_shuffle_epi32(bytes, _MM_SHUFFLE(3, 1, 2, 0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), ordered);
  }
  HorizontalPassScalar(padded, kernel, taps, channels, simd_n, n, out);
}
#endif

void VerticalPass(const uint8_t* const* rows, const float* kernel, int taps, int n, float* acc) {
#if defined(__x86_64__)
  if (HasAvx2()) return VerticalPassAvx2(rows, kernel, taps, n, acc);
#endif
  VerticalPassScalar(rows, kernel, taps, 0, n, acc);
}

void HorizontalPass(const float* padded, const float* kernel, int taps, int channels, int n,
                    uint8_t* out) {
#if defined(__x86_64__)
  if (HasAvx2()) return HorizontalPassAvx2(padded, kernel, taps, channels, n, out);
#endif
  HorizontalPassScalar(padded, kernel, taps, channels, 0, n, out);
}

}  // namespace

Status GaussianBlurInto(ImageView src, MutableImageView dst, std::span<const float> kernel) {
  const int c = src.channels;
  if (src.empty() || (c != 1 && c != 3 && c != 4) || dst.data == nullptr ||
      dst.width != src.width || dst.height != src.height || dst.channels != c) {
    return Status::InvalidArgument("GaussianBlurInto: needs same-shape 1-, 3- or 4-channel images");
  }
  if (kernel.empty() || kernel.size() % 2 == 0) {
    return Status::InvalidArgument("GaussianBlurInto: the kernel needs an odd length");
  }
  const int taps = static_cast<int>(kernel.size());
  const int radius = taps / 2;
  const int w = src.width;
  const int n = w * c;
  // Per thread, reused: the vertical pass's row, padded by radius columns each side, and
  // the row pointers of one output row's vertical window.
  thread_local std::vector<float> padded;
  thread_local std::vector<const uint8_t*> rows;
  padded.resize(static_cast<size_t>(w + 2 * radius) * c);
  rows.resize(static_cast<size_t>(taps));
  float* center = padded.data() + static_cast<ptrdiff_t>(radius) * c;
  for (int y = 0; y < src.height; ++y) {
    for (int j = 0; j < taps; ++j) rows[j] = src.row(ReflectIndex(y - radius + j, src.height));
    VerticalPass(rows.data(), kernel.data(), taps, n, center);
    for (int k = 1; k <= radius; ++k) {
      const int left = ReflectIndex(-k, w), right = ReflectIndex(w - 1 + k, w);
      for (int ch = 0; ch < c; ++ch) {
        center[-k * c + ch] = center[left * c + ch];
        center[(w - 1 + k) * c + ch] = center[right * c + ch];
      }
    }
    HorizontalPass(padded.data(), kernel.data(), taps, c, n, dst.row(y));
  }
  return Status::Ok();
}

Status GaussianBlurOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".field", s.field, "the image value to blur"));
  if (s.kernel_size < 1 || s.kernel_size > kMaxBlurKernel || s.kernel_size % 2 == 0) {
    return schema::Invalid(p + ".kernel_size", "must be odd, in [1, " +
                                                   std::to_string(kMaxBlurKernel) + "]" +
                                                   schema::Got(s.kernel_size));
  }
  const auto& [s0, s1] = s.sigma;
  if (!(s0 > 0 && s0 <= s1 && std::isfinite(s1))) {
    return schema::Invalid(p + ".sigma", "must be [min, max] with 0 < min <= max (got [" +
                                             schema::FormatDouble(s0) + ", " +
                                             schema::FormatDouble(s1) + "])");
  }
  return schema::Probability(p + ".p", s.p);
}

Status GaussianBlurOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc image, ctx.Read(spec.field, ValueKind::kImage));
  return ctx.Write(spec.field, std::move(image));
}

Result<std::unique_ptr<Op>> GaussianBlurOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(
      std::make_unique<GaussianBlurOp>(spec, ctx.position(), ctx.slot(spec.field)));
}

GaussianBlurOp::GaussianBlurOp(const GaussianBlurSpec& spec, int op_position, int slot)
    : spec_(spec),
      op_position_(op_position),
      slot_(slot),
      valid_(Validate(spec, std::string(kName))) {}

Status GaussianBlurOp::Run(SampleContext& ctx) const {
  HR_RETURN_IF_ERROR(valid_);
  const ImageView* in = ctx.Get<ImageView>(slot_);
  if (in == nullptr || in->empty()) {
    return Status::Internal("image.gaussian_blur: no image (decode first)");
  }
  const ImageView image = *in;
  Rng rng = ctx.OpRng(op_position_);
  if (!rng.Bernoulli(spec_.p)) return Status::Ok();
  const double sigma = rng.Uniform(spec_.sigma[0], spec_.sigma[1]);
  float weights[kMaxBlurKernel];
  const std::span<float> kernel(weights, static_cast<size_t>(spec_.kernel_size));
  GaussianKernel1d(sigma, kernel);
  HR_ASSIGN_OR_RETURN(MutableImageView out,
                      ctx.NextScratchImage(image.width, image.height, image.channels));
  HR_RETURN_IF_ERROR(GaussianBlurInto(image, out, kernel));
  ctx.Set(slot_, ImageView(out));
  return Status::Ok();
}

}  // namespace headrace
