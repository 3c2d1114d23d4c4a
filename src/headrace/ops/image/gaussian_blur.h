// image.gaussian_blur: with probability p, a Gaussian blur whose sigma is drawn per sample
// from [sigma[0], sigma[1]] (torchvision's GaussianBlur).
//
// The kernel is torchvision's: kernel_size taps at -(k-1)/2 ... (k-1)/2, exp(-x^2 / 2
// sigma^2), normalised to sum 1; the same sigma on both axes; borders reflect (mirror
// without repeating the edge pixel, torch's "reflect" padding), periodically when the
// image is smaller than the kernel, where torch would refuse. Separable: a vertical then a
// horizontal pass in float per row, rounded half to even at the end as torchvision does
// for uint8. The coin and sigma come from ctx.OpRng(op_position).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <span>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"

namespace headrace {

inline constexpr int kMaxBlurKernel = 255;

struct GaussianBlurSpec {  // image.gaussian_blur (torchvision GaussianBlur)
  int kernel_size = 0;                      // odd, in [1, 255]; required
  std::array<double, 2> sigma = {0.1, 2.0};  // [min, max], drawn uniformly per sample
  double p = 1.0;                           // probability of blurring a sample
  std::string field = "image";              // the image value blurred in place
};

// torchvision's _get_gaussian_kernel1d: fills `kernel` (its size is the kernel size) with
// weights summing to 1, symmetric.
void GaussianKernel1d(double sigma, std::span<float> kernel);

// The index `i` of a row or column of an image `n` long, reflected into [0, n) (period
// 2 (n - 1); 0 when n is 1).
int ReflectIndex(int i, int n);

// Blurs `src` (1, 3 or 4 channels; every byte, X included) into `dst` (same shape, not
// overlapping) with the separable kernel `kernel` (odd length).
Status GaussianBlurInto(ImageView src, MutableImageView dst, std::span<const float> kernel);

class GaussianBlurOp : public Op {
 public:
  static constexpr std::string_view kName = "image.gaussian_blur";
  static constexpr std::string_view kDoc =
      "Gaussian blur of kernel_size with sigma drawn from [min, max] (torchvision "
      "GaussianBlur), with probability p, seeded per sample.";
  using Spec = GaussianBlurSpec;
  static void Fields(auto& s, auto&& f) {
    f("kernel_size", s.kernel_size);
    f("sigma", s.sigma);
    f("p", s.p);
    f("field", s.field);
  }
  // kernel_size odd in [1, 255]; 0 < sigma[0] <= sigma[1] (finite); 0 <= p <= 1.
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads and writes the image `field`; its shape is unchanged.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static void Hint(const Spec&, ValueHints&) {}  // geometry-neutral
  // Draws from its random stream: its output changes with the seed and the epoch.
  static bool DrawsRandom(const Spec&) { return true; }
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{.kernel_size = 5, .sigma = {0.1, 2.0}, .p = 0.5}; }

  // op_position: this op's index in the chain, which keys its random stream.
  GaussianBlurOp(const GaussianBlurSpec& spec, int op_position, int slot);

  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  GaussianBlurSpec spec_;
  int op_position_;
  int slot_;
  Status valid_;
};

}  // namespace headrace
