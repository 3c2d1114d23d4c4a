// image.center_crop: the centred width x height window of the image.
//
// When the image is at least the crop size in both dimensions the result is a view into
// the current image (no copy). A dimension smaller than the crop is padded with zeros on
// both sides, as torchvision's CenterCrop does, into a scratch image; upscaling is
// image.resize's job, not this operator's.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"

namespace headrace {

struct CenterCropSpec {  // image.center_crop
  int width = 0;
  int height = 0;
  std::string field = "image";  // the image value cropped in place
};

// "ops[2].image.center_crop.size 224", or "... .width 300, height 200": the key that
// fixes the size a crop writes, for messages.
std::string CropSizeSource(const std::string& key, int width, int height);

// Offset of a centred window of `crop` in `size` >= crop: torchvision's
// int(round((size - crop) / 2)), rounding half to even.
int CenterOffset(int size, int crop);

// The centred crop of `src` when it fits (a view; src must be at least width x height).
ImageView CenterCropView(ImageView src, int width, int height);

// Writes the centred crop of `src` into `dst` (its size is the crop size), padding with
// zeros where src is smaller. dst must not overlap src.
Status CenterCropInto(ImageView src, MutableImageView dst);

class CenterCropOp : public Op {
 public:
  static constexpr std::string_view kName = "image.center_crop";
  static constexpr std::string_view kDoc =
      "The centred size x size (or width x height) window, zero-padded when smaller.";
  using Spec = CenterCropSpec;
  static constexpr bool kSizeKey = true;  // `size: N` sets width and height
  static void Fields(auto& s, auto&& f) {
    f("width", s.width);
    f("height", s.height);
    f("field", s.field);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads and writes the image `field`, fixing its size.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{.width = 24, .height = 20}; }

  CenterCropOp(const CenterCropSpec& spec, int slot);

  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  CenterCropSpec spec_;
  int slot_;
  Status valid_;
};

}  // namespace headrace
