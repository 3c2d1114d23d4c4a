// image.normalize: (pixel / 255 - mean) / std per channel, written straight into this
// sample's row of the batch tensor as f32, f16 or bf16, CHW ([3, H, W]) or HWC
// ([H, W, 3]). The image's padding byte (RGBX) is ignored.
//
// f16 is IEEE binary16 and bf16 the top half of an f32, both rounded to nearest, ties
// to even. Values are computed once per channel and pixel value at construction (a
// 256-entry table per channel): f16/bf16 pixels are one table lookup; f32 pixels are one
// multiply-add with precomputed scale and offset, which the compiler vectorizes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/core/tensor.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/schema.h"

namespace headrace {

// Which axis order normalize writes.
enum class Layout {
  kCHW,  // channels first: what PyTorch vision models take
  kHWC,  // channels last
};

struct NormalizeSpec {  // image.normalize: (pixel / 255 - mean) / std
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
  DType dtype = DType::kF32;  // f32, f16 or bf16
  Layout layout = Layout::kCHW;
  std::string field = "image";  // the image value read (of fixed size)
  std::string output;           // the batch field written; empty: named like `field`
};

// The config names of Layout ("chw", "hwc") and of the dtypes normalize writes
// ("f32", "f16", "bf16").
EnumTable<Layout> TableOf(Layout);
EnumTable<DType> TableOf(DType);

// Round-to-nearest-even conversions (exposed for tests and other kernels).
uint16_t FloatToHalf(float value);
uint16_t FloatToBFloat16(float value);

// The per-channel tables of one NormalizeSpec.
class NormalizeTable {
 public:
  // Fails for a dtype other than f32/f16/bf16 or a std that is zero or not finite.
  static Result<NormalizeTable> Make(const NormalizeSpec& spec);

  DType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  // ((v / 255 - mean[c]) / std[c]) as f32, and its f16 or bf16 bits.
  const std::array<std::array<float, 256>, 3>& f32() const { return f32_; }
  const std::array<std::array<uint16_t, 256>, 3>& half() const { return half_; }
  // v * scale[c] + offset[c] is f32()[c][v] within 1e-6 (the f32 fast path).
  const std::array<float, 3>& scale() const { return scale_; }
  const std::array<float, 3>& offset() const { return offset_; }

 private:
  DType dtype_ = DType::kF32;
  Layout layout_ = Layout::kCHW;
  std::array<std::array<float, 256>, 3> f32_{};
  std::array<std::array<uint16_t, 256>, 3> half_{};
  std::array<float, 3> scale_{};
  std::array<float, 3> offset_{};
};

// Bytes one sample's row takes: 3 * width * height * sizeof(dtype).
size_t NormalizedBytes(const NormalizeSpec& spec, int width, int height);

// Writes the normalized `src` (3 or 4 channels) to `dst`, NormalizedBytes(spec,
// src.width, src.height) bytes, aligned to the dtype's size (as a tensor row is).
Status NormalizeInto(ImageView src, const NormalizeTable& table, uint8_t* dst);
// The same, building the table first (tests and tools; the op keeps its table).
Status NormalizeInto(ImageView src, const NormalizeSpec& spec, uint8_t* dst);

class NormalizeOp : public Op {
 public:
  static constexpr std::string_view kName = "image.normalize";
  static constexpr std::string_view kDoc =
      "(pixel / 255 - mean) / std of the image into a batch field ([3, H, W] or [H, W, 3]).";
  using Spec = NormalizeSpec;
  static void Fields(auto& s, auto&& f) {
    f("mean", s.mean);
    f("std", s.std);
    f("dtype", s.dtype);
    f("layout", s.layout);
    f("field", s.field);
    f("output", s.output);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads the image `field`, whose size must be fixed here, and writes the batch field
  // `output` (the image value is left as it is).
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{}; }
  static std::string OutputOf(const Spec& spec) {
    return spec.output.empty() ? spec.field : spec.output;
  }

  // row: the batch field written (ctx.rows[row]); width x height: the image size that
  // field was declared with; slot: the image value read.
  NormalizeOp(const NormalizeSpec& spec, int row, int width, int height, int slot);

  std::string_view name() const override { return kName; }
  // Fails with kInternal when the image is not exactly width x height.
  Status Run(SampleContext& ctx) const override;

 private:
  Status valid_;
  NormalizeTable table_;
  int row_;
  int width_;
  int height_;
  int slot_;
};

}  // namespace headrace
