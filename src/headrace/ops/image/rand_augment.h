// image.rand_augment: RandAugment (Cubuk et al. 2019) with torchvision's policy: per
// sample, num_ops operations drawn uniformly (with repeats) from the 14 below, each at
// magnitude bin `magnitude` of num_magnitude_bins, the signed ones negated with
// probability 1/2.
//
//   Identity, ShearX, ShearY (0 .. 0.3), TranslateX, TranslateY (0 .. 150/331 of the
//   width / height, in whole pixels), Rotate (0 .. 30 degrees), Brightness, Color,
//   Contrast, Sharpness (factor 1 + (0 .. 0.9)), Posterize (8 .. 4 bits), Solarize
//   (threshold 255 .. 0), AutoContrast, Equalize.
//
// The pixel kernels follow torchvision's uint8 tensor functions (adjust.h and below); the
// geometric ones are one affine warp (torchvision's inverse matrix, pixel centres, output
// the input's size) sampled nearest (torchvision's default for RandAugment) or bilinear,
// with `fill` outside the image. All randomness comes from ctx.OpRng(op_position).
#pragma once

#include <array>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "headrace/core/rng.h"
#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/schema.h"

namespace headrace {

// How the affine warp samples its source.
enum class WarpInterpolation {
  kNearest,   // the nearest pixel, torchvision's RandAugment default
  kBilinear,  // the 4 nearest pixels, weighted; taps outside the image take `fill`
  // Both round halves up (a coordinate, a value) where torch rounds them to even: only
  // exact halves tell the two apart.
};
EnumTable<WarpInterpolation> TableOf(WarpInterpolation);  // "nearest", "bilinear"

// torchvision's RandAugment operations, in its order (the draw indexes this list).
enum class RandAugmentKind {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
};
inline constexpr int kRandAugmentKinds = 14;
std::string_view RandAugmentKindName(RandAugmentKind kind);  // "ShearX", ...

struct RandAugmentSpec {  // image.rand_augment (torchvision RandAugment)
  int num_ops = 2;
  int magnitude = 9;             // the bin, in [0, num_magnitude_bins - 1]
  int num_magnitude_bins = 31;
  WarpInterpolation interpolation = WarpInterpolation::kNearest;
  int fill = 0;                  // the value of pixels warped in from outside, 0..255
  std::string field = "image";   // the image value augmented in place
};

// One drawn operation; `magnitude` is signed and in the op's own unit (a shear, pixels,
// degrees, an enhancement delta, bits, a threshold).
struct RandAugmentStep {
  RandAugmentKind kind = RandAugmentKind::kIdentity;
  float magnitude = 0;
};

// Draws spec.num_ops steps (at most steps.size()) for an image of width x height, in
// torchvision's order of draws: the operation, then (signed ones) the sign.
int DrawRandAugment(const RandAugmentSpec& spec, int width, int height, Rng& rng,
                    std::span<RandAugmentStep> steps);

// Whether a step works pixel by pixel (may run in place: src and dst the same memory).
bool IsPointwise(RandAugmentKind kind);

// The pixel kernels (src and dst the same shape, 1, 3 or 4 channels; X copied). The
// pointwise ones may run in place; sharpness and the warp may not.
Status SolarizeInto(ImageView src, MutableImageView dst, float threshold);  // v >= t: 255 - v
Status PosterizeInto(ImageView src, MutableImageView dst, int bits);        // keep `bits` high bits
// Per channel, stretch [min, max] to [0, 255] (unchanged when min == max).
Status AutoContrastInto(ImageView src, MutableImageView dst);
// Per channel histogram equalisation (torchvision's _scale_channel).
Status EqualizeInto(ImageView src, MutableImageView dst);
// Blend with the 3x3 smoothed image (centre weight 5 of 13), borders kept; images of 2
// pixels or fewer in a dimension are copied.
Status AdjustSharpnessInto(ImageView src, MutableImageView dst, float factor);

// torchvision's _get_inverse_affine_matrix: output pixel centre (relative to the image
// centre) -> source point. Angles in degrees, center and translate in pixels.
std::array<float, 6> InverseAffineMatrix(double center_x, double center_y, double angle,
                                         double translate_x, double translate_y, double scale,
                                         double shear_x, double shear_y);
// dst(x, y) = src(matrix * (x - w/2 + 1/2, y - h/2 + 1/2, 1) + (w/2 - 1/2, h/2 - 1/2)).
Status AffineWarpInto(ImageView src, MutableImageView dst, const std::array<float, 6>& matrix,
                      WarpInterpolation interpolation, uint8_t fill);

// Applies one step (the warps with `interpolation` and `fill`).
Status ApplyRandAugmentStep(ImageView src, MutableImageView dst, RandAugmentStep step,
                            WarpInterpolation interpolation, uint8_t fill);

class RandAugmentOp : public Op {
 public:
  static constexpr std::string_view kName = "image.rand_augment";
  static constexpr std::string_view kDoc =
      "RandAugment (torchvision): num_ops random operations of 14 at one magnitude bin, "
      "seeded per sample.";
  using Spec = RandAugmentSpec;
  static constexpr int kMaxOps = 16;
  static void Fields(auto& s, auto&& f) {
    f("num_ops", s.num_ops);
    f("magnitude", s.magnitude);
    f("num_magnitude_bins", s.num_magnitude_bins);
    f("interpolation", s.interpolation);
    f("fill", s.fill);
    f("field", s.field);
  }
  // num_ops in [0, 16]; num_magnitude_bins in [2, 1000]; magnitude in [0, bins - 1];
  // fill in [0, 255].
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads and writes the image `field`; its shape is unchanged.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static void Hint(const Spec&, ValueHints&) {}  // keeps the size
  // Draws from its random stream: its output changes with the seed and the epoch.
  static bool DrawsRandom(const Spec&) { return true; }
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{.num_ops = 3, .magnitude = 9}; }

  // op_position: this op's index in the chain, which keys its random stream.
  RandAugmentOp(const RandAugmentSpec& spec, int op_position, int slot);

  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  RandAugmentSpec spec_;
  int op_position_;
  int slot_;
  Status valid_;
};

}  // namespace headrace
