// Hand-written kernel: none of libjpeg-turbo, libpng, libwebp or libyuv has a Gaussian
// blur (libyuv's ARGBBlur is a box filter over a cumulative sum, 4-byte pixels only).
#include "headrace/ops/image/gaussian_blur.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

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

// The hot loops: gcc vectorizes them, in an AVX2 clone where the CPU has it. Without
// -ffp-contract (ISO C++), no FMA is formed, so both clones compute the same floats.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define HR_BLUR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HR_BLUR_CLONES
#endif

// acc[i] = sum_j kernel[j] * rows[j][i], i < n.
HR_BLUR_CLONES void VerticalPass(const uint8_t* const* rows, const float* kernel, int taps,
                                 int n, float* __restrict acc) {
  for (int i = 0; i < n; ++i) acc[i] = 0.0f;
  for (int j = 0; j < taps; ++j) {
    const uint8_t* __restrict row = rows[j];
    const float w = kernel[j];
    for (int i = 0; i < n; ++i) acc[i] += w * static_cast<float>(row[i]);
  }
}

// out[i] = round(sum_j kernel[j] * padded[i + j * channels]), i < n.
HR_BLUR_CLONES void HorizontalPass(const float* padded, const float* kernel, int taps,
                                   int channels, int n, float* __restrict acc,
                                   uint8_t* __restrict out) {
  for (int i = 0; i < n; ++i) acc[i] = 0.0f;
  for (int j = 0; j < taps; ++j) {
    const float* __restrict in = padded + static_cast<ptrdiff_t>(j) * channels;
    const float w = kernel[j];
    for (int i = 0; i < n; ++i) acc[i] += w * in[i];
  }
  for (int i = 0; i < n; ++i) {
    out[i] = static_cast<uint8_t>(std::nearbyint(std::clamp(acc[i], 0.0f, 255.0f)));
  }
}

#undef HR_BLUR_CLONES

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
  // Per thread, reused: the padded row (radius columns each side), the accumulator and the
  // row pointers of one output row's vertical window.
  thread_local std::vector<float> padded, acc;
  thread_local std::vector<const uint8_t*> rows;
  padded.resize(static_cast<size_t>(w + 2 * radius) * c);
  acc.resize(static_cast<size_t>(n));
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
    HorizontalPass(padded.data(), kernel.data(), taps, c, n, acc.data(), dst.row(y));
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
