// image.resize: scale the image to a shorter side (keeping aspect) or to an exact size.
//
// Filtering follows torchvision's `antialias=True`: per axis, a downscale averages the
// source area each output pixel covers (box filter, exact fractional coverage) and an
// upscale interpolates bilinearly with half-pixel centres (align_corners=False). With
// antialias off, downscales are bilinear too.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"

namespace headrace {

struct ResizeSpec {  // image.resize
  // Exactly one of: shorter_side > 0 (keep aspect), or width and height > 0 (exact).
  int shorter_side = 0;
  int width = 0;
  int height = 0;
  bool antialias = true;  // area-average when downscaling
  std::string field = "image";  // the image value resized in place
};

struct ImageSize {
  int width = 0;
  int height = 0;
};

// The size `spec` asks for, given an input of width x height: in shorter-side mode the
// shorter side becomes spec.shorter_side and the longer is scaled by the same factor,
// rounded to nearest (at least 1).
ImageSize ResizeOutputSize(const ResizeSpec& spec, int width, int height);

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

// The operator: resizes the image value `field` into the next scratch slot (or leaves
// it as is when it already has the requested size).
class ResizeOp : public Op {
 public:
  static constexpr std::string_view kName = "image.resize";
  static constexpr std::string_view kDoc =
      "To shorter_side (keeping aspect) or to exactly width x height (antialiased).";
  using Spec = ResizeSpec;
  static void Fields(auto& s, auto&& f) {
    f("shorter_side", s.shorter_side);
    f("width", s.width);
    f("height", s.height);
    f("antialias", s.antialias);
    f("field", s.field);
  }
  // Exactly one mode: shorter_side > 0, or width and height > 0; sizes at most
  // kMaxImageSide.
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads and writes the image `field`; an exact size fixes its shape.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  // Asks its producer for an image at least as large as it needs (DCT scaling).
  static void Hint(const Spec& spec, ValueHints& hints);
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{.shorter_side = 24}; }

  ResizeOp(const ResizeSpec& spec, int slot);

  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  ResizeSpec spec_;
  int slot_;
  Status valid_;  // Validate(spec_), returned by every Run when not ok (direct construction)
};

}  // namespace headrace
