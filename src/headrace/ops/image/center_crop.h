// image.center_crop: the centred width x height window of the image.
//
// When the image is at least the crop size in both dimensions the result is a view into
// the current image (no copy). A dimension smaller than the crop is padded with zeros on
// both sides, as torchvision's CenterCrop does, into a scratch image; upscaling is
// image.resize's job, not this operator's.
#pragma once

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/specs.h"

namespace headrace {

// Offset of a centred window of `crop` in `size` >= crop: torchvision's
// int(round((size - crop) / 2)), rounding half to even.
int CenterOffset(int size, int crop);

// The centred crop of `src` when it fits (a view; src must be at least width x height).
ImageView CenterCropView(ImageView src, int width, int height);

// Writes the centred crop of `src` into `dst` (its size is the crop size), padding with
// zeros where src is smaller. dst must not overlap src.
Status CenterCropInto(ImageView src, MutableImageView dst);

Status ValidateCenterCropSpec(const CenterCropSpec& spec);

class CenterCropOp : public Op {
 public:
  explicit CenterCropOp(const CenterCropSpec& spec);

  std::string_view name() const override { return "image.center_crop"; }
  Status Run(SampleContext& ctx) const override;

 private:
  CenterCropSpec spec_;
  Status valid_;
};

}  // namespace headrace
