// image.grayscale: with probability p, the image's BT.601 grey (torchvision's
// RandomGrayscale; with p = 1 and num_output_channels 1, its Grayscale(1)).
//
// Grey is PIL's convert("L") (adjust.h: Gray601). With num_output_channels 3 the image
// keeps its channel count (RGB or RGBX) with the grey in R, G and B, so converted and
// unconverted samples batch together; 1 writes a 1-channel image, which needs p = 1
// (every sample the same shape) and an op after it that reads one channel
// (image.normalize does not). The coin comes from ctx.OpRng(op_position).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"

namespace headrace {

struct GrayscaleSpec {  // image.grayscale (torchvision RandomGrayscale)
  double p = 0.1;               // torchvision's default
  int num_output_channels = 3;  // 3: keep the channel count; 1: one channel (needs p = 1)
  std::string field = "image";  // the image value converted in place
};

class GrayscaleOp : public Op {
 public:
  static constexpr std::string_view kName = "image.grayscale";
  static constexpr std::string_view kDoc =
      "BT.601 grey with probability p (torchvision RandomGrayscale), 3 channels kept or 1, "
      "seeded per sample.";
  using Spec = GrayscaleSpec;
  static void Fields(auto& s, auto&& f) {
    f("p", s.p);
    f("num_output_channels", s.num_output_channels);
    f("field", s.field);
  }
  // 0 <= p <= 1; num_output_channels 1 or 3, and 1 only with p = 1.
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads and writes the image `field`: same size, 1 channel when num_output_channels is 1.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static void Hint(const Spec&, ValueHints&) {}  // geometry-neutral
  // A coin that is not always heads or tails: the result changes with the seed and epoch.
  static bool DrawsRandom(const Spec& spec) { return spec.p > 0 && spec.p < 1; }
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{.p = 0.5}; }

  // op_position: this op's index in the chain, which keys its random stream.
  GrayscaleOp(const GrayscaleSpec& spec, int op_position, int slot);

  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  GrayscaleSpec spec_;
  int op_position_;
  int slot_;
  Status valid_;
};

}  // namespace headrace
