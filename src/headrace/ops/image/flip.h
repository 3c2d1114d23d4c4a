// image.flip: mirror the image left-right with probability p.
//
// The coin comes from ctx.OpRng(op_position), so the same sample flips the same way on
// every run. Not flipping costs nothing (the image is left as is); flipping writes a
// mirrored copy into the next scratch slot.
#pragma once

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/specs.h"

namespace headrace {

// Writes `src` mirrored left-right into `dst` (same size and channels, 3 or 4, no
// overlap).
Status FlipHorizontalInto(ImageView src, MutableImageView dst);

// Ok if 0 <= p <= 1.
Status ValidateFlipSpec(const FlipSpec& spec);

class FlipOp : public Op {
 public:
  // op_position: this op's index in the chain, which keys its random stream.
  FlipOp(const FlipSpec& spec, int op_position);

  std::string_view name() const override { return "image.flip"; }
  Status Run(SampleContext& ctx) const override;

 private:
  FlipSpec spec_;
  int op_position_;
  Status valid_;
};

}  // namespace headrace
