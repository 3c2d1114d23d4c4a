// image.random_resized_crop: a random window of random area and aspect ratio, resized
// to width x height (torchvision's RandomResizedCrop, antialiased).
//
// The window follows torchvision's get_params exactly: up to 10 tries of an area
// fraction drawn uniformly from `scale` and an aspect ratio drawn log-uniformly from
// `ratio`, kept when it fits; otherwise the centred crop of the whole image clamped to
// the ratio range. All randomness comes from ctx.OpRng(op_position), so a sample's crop
// is the same on every run and thread.
#pragma once

#include "headrace/core/rng.h"
#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/specs.h"

namespace headrace {

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

// Ok if width, height > 0, 0 < scale[0] <= scale[1] and 0 < ratio[0] <= ratio[1].
Status ValidateRandomResizedCropSpec(const RandomResizedCropSpec& spec);

class RandomResizedCropOp : public Op {
 public:
  // op_position: this op's index in the chain, which keys its random stream.
  RandomResizedCropOp(const RandomResizedCropSpec& spec, int op_position);

  std::string_view name() const override { return "image.random_resized_crop"; }
  Status Run(SampleContext& ctx) const override;

 private:
  RandomResizedCropSpec spec_;
  int op_position_;
  Status valid_;
};

}  // namespace headrace
