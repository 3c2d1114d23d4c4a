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

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/specs.h"

namespace headrace {

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
  // field_index: the batch field written (ctx.slots[field_index]); width x height: the
  // image size that field was declared with.
  NormalizeOp(const NormalizeSpec& spec, int field_index, int width, int height);

  std::string_view name() const override { return "image.normalize"; }
  // Fails with kInternal when ctx.image is not exactly width x height.
  Status Run(SampleContext& ctx) const override;

 private:
  Status valid_;
  NormalizeTable table_;
  int field_index_;
  int width_;
  int height_;
};

}  // namespace headrace
