// image.flip: mirror the image left-right with probability p.
//
// The coin comes from ctx.OpRng(op_position), so the same sample flips the same way on
// every run. Not flipping costs nothing (the image is left as is); flipping writes a
// mirrored copy into the next scratch slot.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"

namespace headrace {

struct FlipSpec {  // image.flip (random horizontal)
  double p = 0.5;
  std::string field = "image";  // the image value flipped in place
};

// Writes `src` mirrored left-right into `dst` (same size and channels, 3 or 4, no
// overlap).
Status FlipHorizontalInto(ImageView src, MutableImageView dst);

class FlipOp : public Op {
 public:
  static constexpr std::string_view kName = "image.flip";
  static constexpr std::string_view kDoc =
      "Random horizontal flip with probability p, seeded per sample.";
  using Spec = FlipSpec;
  static void Fields(auto& s, auto&& f) {
    f("p", s.p);
    f("field", s.field);
  }
  static Status Validate(const Spec& spec, const std::string& key);  // 0 <= p <= 1
  // Reads and writes the image `field`; its shape is unchanged.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  // Geometry-neutral: what later ops need of the image, they need of its input.
  static void Hint(const Spec&, ValueHints&) {}
  // A coin that is not always heads or tails: the flip changes with the seed and epoch.
  static bool DrawsRandom(const Spec& spec) { return spec.p > 0 && spec.p < 1; }
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{.p = 0.5}; }

  // op_position: this op's index in the chain, which keys its random stream.
  FlipOp(const FlipSpec& spec, int op_position, int slot);

  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  FlipSpec spec_;
  int op_position_;
  int slot_;
  Status valid_;
};

}  // namespace headrace
