// image.random_resized_crop: a random window of random area and aspect ratio, resized
// to width x height (torchvision's RandomResizedCrop, antialiased).
//
// The window follows torchvision's get_params exactly: up to 10 tries of an area
// fraction drawn uniformly from `scale` and an aspect ratio drawn log-uniformly from
// `ratio`, kept when it fits; otherwise the centred crop of the whole image clamped to
// the ratio range. All randomness comes from ctx.OpRng(op_position), so a sample's crop
// is the same on every run and thread.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/rng.h"
#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"

namespace headrace {

struct RandomResizedCropSpec {  // image.random_resized_crop (torchvision semantics)
  int width = 0;
  int height = 0;
  std::array<double, 2> scale = {0.08, 1.0};
  std::array<double, 2> ratio = {3.0 / 4.0, 4.0 / 3.0};
  std::string field = "image";  // the image value cropped in place
};

struct CropWindow {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
};

// The window for an image of width x height, drawing from `rng`. Always inside the
// image, at least 1x1.
CropWindow RandomResizedCropWindow(int width, int height, const RandomResizedCropSpec& spec,
                                   Rng& rng);

class RandomResizedCropOp : public Op {
 public:
  static constexpr std::string_view kName = "image.random_resized_crop";
  static constexpr std::string_view kDoc =
      "A random window of random area and aspect, resized to size (torchvision), seeded "
      "per sample.";
  using Spec = RandomResizedCropSpec;
  static constexpr bool kSizeKey = true;  // `size: N` sets width and height
  static void Fields(auto& s, auto&& f) {
    f("width", s.width);
    f("height", s.height);
    f("scale", s.scale);
    f("ratio", s.ratio);
    f("field", s.field);
  }
  // width, height in [1, kMaxImageSide], 0 < scale[0] <= scale[1] <= 1,
  // 0 < ratio[0] <= ratio[1] (finite).
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads and writes the image `field`, fixing its size.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  // Draws from its random stream: its output changes with the seed and the epoch.
  static bool DrawsRandom(const Spec&) { return true; }
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{.width = 16, .height = 12}; }

  // op_position: this op's index in the chain, which keys its random stream.
  RandomResizedCropOp(const RandomResizedCropSpec& spec, int op_position, int slot);

  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  RandomResizedCropSpec spec_;
  int op_position_;
  int slot_;
  Status valid_;
};

}  // namespace headrace
