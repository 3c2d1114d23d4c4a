// vision.patchify: an image whose sides are multiples of patch_size * merge_size (from
// image.smart_resize) as the rows a Qwen-VL vision tower eats, appended to the batch:
//   <output>       pixel_values, ragged [patches, 3 * T * P * P] (f32 | bf16 | f16), one
//                  entry of <output>_lengths per image, rows in transformers' order
//                  (PatchifyKernel, patchify.h);
//   <grid_output>  image_grid_thw, i64 [3] per image: (t, h / P, w / P).
// Over a single image field a batch has [samples, 3] grids; mapped over a media list
// (max_items), [images, 3] with the list's <list>_count (or [samples, max_items, 3] with
// pad_items), and pixel_values' lengths one entry per image, so that the model's
// image_grid_thw is the batch field as it is.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/core/tensor.h"
#include "headrace/ops/image/normalize.h"  // TableOf(DType): f32, f16, bf16
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/vision/patchify.h"
#include "headrace/ops/vision/preset.h"

namespace headrace {

struct PatchifySpec {  // vision.patchify
  // A model's values for the geometry and normalisation keys below
  // (ops/vision/preset.h). A key set (non-zero; mean/std given) overrides the preset's;
  // a key left unset takes the preset's value, or without a preset the default in its
  // comment (transformers' Qwen2VLImageProcessor class defaults), as on
  // image.smart_resize.
  VisionModel preset = VisionModel::kNone;
  int patch_size = 0;           // 0: preset or 14
  int temporal_patch_size = 0;  // 0: preset or 2 (a still image is repeated to it)
  int merge_size = 0;           // 0: preset or 2
  std::optional<std::array<float, 3>> mean{};  // unset: preset or OpenAI CLIP's
  std::optional<std::array<float, 3>> std{};   // unset: preset or OpenAI CLIP's
  DType dtype = DType::kF32;                   // f32, bf16 or f16
  std::string field = "image";                 // the image value read
  std::string output = "pixel_values";
  std::string grid_output = "image_grid_thw";
};

// spec's keys over its preset over the defaults (PatchifySpec says how).
PatchifyParams ResolvePatchify(const PatchifySpec& spec);

class PatchifyOp : public Op {
 public:
  static constexpr std::string_view kName = "vision.patchify";
  static constexpr std::string_view kDoc =
      "Qwen-VL patches of an image (sides multiples of patch*merge): pixel_values "
      "[patches, 3*T*P*P] ragged, image_grid_thw [3] per image.";
  using Spec = PatchifySpec;
  static void Fields(auto& s, auto&& f) {
    f("preset", s.preset);
    f("patch_size", s.patch_size);
    f("temporal_patch_size", s.temporal_patch_size);
    f("merge_size", s.merge_size);
    f("mean", s.mean);
    f("std", s.std);
    f("dtype", s.dtype);
    f("field", s.field);
    f("output", s.output);
    f("grid_output", s.grid_output);
  }
  // patch_size in [0, 1024], temporal_patch_size and merge_size in [0, 64], finite mean,
  // finite non-zero std, a known preset and dtype, outputs named and distinct.
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads the image `field` (mapped over a list's items when it is one); writes `output`
  // (ragged) and `grid_output`. A config error when the image's size is fixed here and
  // is not a multiple of patch_size * merge_size, or when image.smart_resize before it
  // was made for other patch or merge sizes (naming both keys).
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() {
    // Factor 10: the battery's 40x30 images are 8x6 patches.
    return Spec{.patch_size = 5, .merge_size = 2};
  }

  PatchifyOp(PatchifyKernel kernel, int slot, int pixels_row, int grid_row);

  std::string_view name() const override { return kName; }
  // A side that is not a multiple of patch_size * merge_size fails the sample
  // (kInvalidArgument naming the size); kInternal when there is no image.
  Status Run(SampleContext& ctx) const override;
  // The grid's patches of the size before it, appended to `output`.
  bool Predict(SizePass& pass) const override;
  Telling Tells() const override { return Telling::kRows; }

 private:
  PatchifyKernel kernel_;
  int slot_;
  int pixels_row_;
  int grid_row_;
};

}  // namespace headrace
