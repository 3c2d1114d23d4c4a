// image.resize: scale the image to a shorter side (keeping aspect) or to an exact size.
//
// Filtering follows torchvision's `antialias=True`: per axis, a downscale averages the
// source area each output pixel covers (box filter, exact fractional coverage) and an
// upscale interpolates bilinearly with half-pixel centres (align_corners=False). With
// antialias off, downscales are bilinear too.
#pragma once

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/specs.h"

namespace headrace {

struct ImageSize {
  int width = 0;
  int height = 0;
};

// The size `spec` asks for, given an input of width x height: in shorter-side mode the
// shorter side becomes spec.shorter_side and the longer is scaled by the same factor,
// rounded to nearest (at least 1).
ImageSize ResizeOutputSize(const ResizeSpec& spec, int width, int height);

// Ok if exactly one mode is set: shorter_side > 0, or width > 0 and height > 0.
Status ValidateResizeSpec(const ResizeSpec& spec);

// Resamples `src` into `dst` (sizes from the views). Both must have the same channel
// count, 3 or 4; dst must not overlap src. Thread-safe; reuses thread-local filter and
// row buffers, so a steady state allocates nothing.
Status ResizeInto(ImageView src, MutableImageView dst, bool antialias);

namespace internal {
// ResizeInto without the AVX2 kernels, for tests: the results must be identical.
Status ResizeIntoPortable(ImageView src, MutableImageView dst, bool antialias);
}  // namespace internal

// Allocating form, for tests and tools.
Result<Image> Resize(ImageView src, int width, int height, bool antialias = true);

// The operator: resizes ctx.image into the next scratch slot (or leaves it as is when
// it already has the requested size).
class ResizeOp : public Op {
 public:
  explicit ResizeOp(const ResizeSpec& spec);

  std::string_view name() const override { return "image.resize"; }
  Status Run(SampleContext& ctx) const override;

 private:
  ResizeSpec spec_;
  Status valid_;  // ValidateResizeSpec(spec_), returned by every Run when not ok
};

}  // namespace headrace
