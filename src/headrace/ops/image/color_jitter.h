// image.color_jitter: random brightness, contrast, saturation and hue, with probability p
// (torchvision's ColorJitter, inside a RandomApply when p < 1).
//
// Factors follow torchvision: brightness, contrast and saturation are drawn uniformly
// from [max(0, 1 - x), 1 + x], hue from [-h, h] (h <= 0.5); a parameter of 0 leaves that
// adjustment out. The four are applied in a random order per sample, as torchvision's
// randperm(4) does. All randomness comes from ctx.OpRng(op_position): the same (seed,
// epoch, index) gives the same bytes, another epoch another draw.
//
// The kernels are adjust.h's (hand-written: no linked library has them). Not applying
// costs nothing; applying writes one scratch image, then adjusts it in place.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/rng.h"
#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"

namespace headrace {

struct ColorJitterSpec {  // image.color_jitter (torchvision ColorJitter)
  double brightness = 0;  // factor in [max(0, 1 - b), 1 + b]; 0: unchanged
  double contrast = 0;    // factor in [max(0, 1 - c), 1 + c]; 0: unchanged
  double saturation = 0;  // factor in [max(0, 1 - s), 1 + s]; 0: unchanged
  double hue = 0;         // shift in [-h, h] turns, h <= 0.5; 0: unchanged
  double p = 1.0;         // probability of jittering a sample at all
  std::string field = "image";  // the image value adjusted in place
};

// One sample's draw: which adjustments, in which order, with which factors.
struct ColorJitterParams {
  enum class Kind { kBrightness, kContrast, kSaturation, kHue };
  struct Step {
    Kind kind;
    float factor;  // the hue shift for kHue
  };
  Step steps[4];
  int count = 0;  // 0: the image is left as it is
};

// Draws one sample's parameters from `rng` (torchvision's order of draws: the apply coin,
// the permutation, then brightness, contrast, saturation and hue factors).
ColorJitterParams DrawColorJitter(const ColorJitterSpec& spec, Rng& rng);
// Applies `params` to `src`, writing `dst` (same shape; may be src's memory).
Status ColorJitterInto(ImageView src, MutableImageView dst, const ColorJitterParams& params);

class ColorJitterOp : public Op {
 public:
  static constexpr std::string_view kName = "image.color_jitter";
  static constexpr std::string_view kDoc =
      "Random brightness, contrast, saturation and hue in random order (torchvision "
      "ColorJitter), with probability p, seeded per sample.";
  using Spec = ColorJitterSpec;
  static void Fields(auto& s, auto&& f) {
    f("brightness", s.brightness);
    f("contrast", s.contrast);
    f("saturation", s.saturation);
    f("hue", s.hue);
    f("p", s.p);
    f("field", s.field);
  }
  // brightness, contrast, saturation finite and >= 0; 0 <= hue <= 0.5; 0 <= p <= 1.
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads and writes the image `field`; its shape is unchanged.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static void Hint(const Spec&, ValueHints&) {}  // geometry-neutral
  // Draws from its random stream: its output changes with the seed and the epoch.
  static bool DrawsRandom(const Spec&) { return true; }
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() {
    return Spec{.brightness = 0.4, .contrast = 0.4, .saturation = 0.4, .hue = 0.1, .p = 0.8};
  }

  // op_position: this op's index in the chain, which keys its random stream.
  ColorJitterOp(const ColorJitterSpec& spec, int op_position, int slot);

  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  ColorJitterSpec spec_;
  int op_position_;
  int slot_;
  Status valid_;
};

}  // namespace headrace
