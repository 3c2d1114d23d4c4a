// image.smart_resize: the dynamic resolution of the Qwen-VL models. Each image keeps its
// aspect ratio and is resized so that both sides are multiples of patch_size *
// merge_size and its pixel count lies in [min_pixels, max_pixels].
//
// Two references, both matched exactly (tests: smart_resize_test.cc and
// tests/python/test_vlm_reference.py):
//   - the size: transformers' `smart_resize` (models/qwen2_vl/image_processing_qwen2_vl.py,
//     also what Qwen3-VL's image processor runs, with factor 32);
//   - the pixels: PIL's `Image.resize(size, BICUBIC | BILINEAR)` on 8-bit images, what the
//     processor's PIL backend calls (PilResizeInto below: the same integers, byte for byte).
//
// Colour input as image.decode gives it; see README.md ("image.smart_resize") for where a
// decode + smart_resize differs from transformers' loading (alpha, 16-bit PNG).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/image/resize.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/vision/preset.h"

namespace headrace {

// PIL's resampling filters that smart_resize offers.
enum class ResampleFilter {
  kBicubic,   // "bicubic": Keys cubic, a = -0.5, support 2 (PIL Resampling.BICUBIC)
  kBilinear,  // "bilinear": triangle, support 1 (PIL Resampling.BILINEAR)
};
EnumTable<ResampleFilter> TableOf(ResampleFilter);

struct SmartResizeSpec {  // image.smart_resize
  // A model's values for the four geometry keys below (ops/vision/preset.h). A key set to
  // a non-zero value overrides the preset's; a key left 0 takes the preset's value, or,
  // without a preset, the default in its comment (transformers' Qwen2VLImageProcessor
  // class defaults).
  VisionModel preset = VisionModel::kNone;
  int patch_size = 0;      // 0: preset or 14
  int merge_size = 0;      // 0: preset or 2
  int64_t min_pixels = 0;  // 0: preset or 56 * 56
  int64_t max_pixels = 0;  // 0: preset or 28 * 28 * 1280
  // An image whose longer / shorter side is above this fails (a per-sample error, kind
  // pixel_limit), as transformers raises ValueError.
  double max_aspect_ratio = 200;
  ResampleFilter resample = ResampleFilter::kBicubic;
  std::string field = "image";  // the image value resized in place
};

// The size rule with every key resolved.
struct SmartResizeRule {
  int patch_size = 14;
  int merge_size = 2;
  int64_t min_pixels = 56 * 56;
  int64_t max_pixels = 28 * 28 * 1280;
  double max_aspect_ratio = 200;

  int factor() const { return patch_size * merge_size; }
};

// spec's keys over its preset over the defaults (SmartResizeSpec says how).
SmartResizeRule ResolveSmartResize(const SmartResizeSpec& spec);

// The output size of a width x height image: transformers' smart_resize in the same
// double arithmetic (round half to even, then floor / ceil after scaling by
// sqrt(pixels / limit)). kPixelLimit when the aspect ratio is above the limit (the
// message names the size and the limit); kInvalidArgument for an empty input.
Result<ImageSize> SmartResizeSize(int width, int height, const SmartResizeRule& rule);

// Qwen3-VL's video form (transformers' models/qwen3_vl/video_processing_qwen3_vl.py
// smart_resize): the pixel range bounds frames * h * w, the frame count rounded to a
// multiple of `temporal_factor` for the range test and taken as it is for the scale; a
// side below the factor is first scaled up to it (truncating, as Python's int()). The
// frame size for `frames` frames of width x height. kInvalidArgument when frames <
// temporal_factor (transformers raises ValueError) or the frame is empty; kPixelLimit
// for an aspect ratio above the limit.
Result<ImageSize> SmartResizeVideoSize(int frames, int temporal_factor, int width, int height,
                                       const SmartResizeRule& rule);

// Why hand-written: no linked library resamples as PIL does (libyuv's filters are box
// or bilinear without PIL's support scaling; resize.cc is torchvision's area filter), and
// matching the reference byte for byte needs PIL's own integers. PIL's ImagingResample
// on 8-bit images (Pillow 13): per axis, filter weights over the filter's support scaled
// by the downscale factor (antialiasing), normalised per output pixel and rounded to
// 22-bit fixed point; two passes, each value rounded and clipped to 8 bits between them:
// vertical first when the height loses more than twice as many pixels as the width, else
// horizontal first (then over only the rows the vertical pass reads); an axis whose size
// does not change is not filtered.
//
// Resamples `src` into `dst` (sizes from the views; 1, 3 or 4 channels, the same in both,
// every channel filtered alike). `temp` holds the horizontal pass:
// PilResizeTempBytes(...) bytes (0 when it is skipped; null then). dst and temp must not
// overlap src. Thread-safe; coefficient tables and the row accumulator are
// thread-local and reused when the sizes repeat.
size_t PilResizeTempBytes(int src_width, int src_height, int dst_width, int dst_height,
                          int channels, ResampleFilter filter);
Status PilResizeInto(ImageView src, MutableImageView dst, ResampleFilter filter, uint8_t* temp);

// Allocating form, for tests and tools.
Result<Image> PilResize(ImageView src, int width, int height, ResampleFilter filter);

// The operator: resizes the image value `field` into the next scratch slot (two slots:
// the horizontal pass and the result; none when the size already fits). Its Hint asks
// image.decode for full-resolution pixels (no DCT scaling: the reference resizes from
// them) and passes max_aspect_ratio, which the decode applies to the header.
class SmartResizeOp : public Op {
 public:
  static constexpr std::string_view kName = "image.smart_resize";
  static constexpr std::string_view kDoc =
      "Qwen-VL dynamic resolution: sides multiples of patch*merge, pixels in "
      "[min_pixels, max_pixels], PIL bicubic/bilinear.";
  using Spec = SmartResizeSpec;
  static void Fields(auto& s, auto&& f) {
    f("preset", s.preset);
    f("patch_size", s.patch_size);
    f("merge_size", s.merge_size);
    f("min_pixels", s.min_pixels);
    f("max_pixels", s.max_pixels);
    f("max_aspect_ratio", s.max_aspect_ratio);
    f("resample", s.resample);
    f("field", s.field);
  }
  // patch_size in [0, 1024], merge_size in [0, 64] (0: preset or default), the resolved
  // min_pixels >= 1 and <= max_pixels <= 2^28, max_aspect_ratio in [1, 1e6], known
  // preset and resample.
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads and writes the image `field`: its height and width vary per sample; notes its
  // patch and merge sizes on it (ValueDesc::geometry) for vision.patchify to check.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static void Hint(const Spec& spec, ValueHints& hints) {
    hints.Set(spec.field, SizeHint{.max_aspect_ratio = spec.max_aspect_ratio});
  }
  static Spec ExampleSpec() {
    // Small enough for the battery's 40x30 images to be scaled up, with a factor that
    // divides neither side.
    return Spec{.patch_size = 4, .merge_size = 2, .min_pixels = 48 * 48,
                .max_pixels = 64 * 64};
  }

  SmartResizeOp(const SmartResizeSpec& spec, int slot);

  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;
  // SmartResizeSize of the size before it.
  bool Predict(SizePass& pass) const override;
  Telling Tells() const override { return Telling::kRows; }

 private:
  SmartResizeSpec spec_;
  SmartResizeRule rule_;
  int slot_;
  Status valid_;  // Validate(spec_), returned by every Run when not ok (direct construction)
};

}  // namespace headrace
