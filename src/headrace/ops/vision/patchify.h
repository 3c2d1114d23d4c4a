// The Qwen-VL patch layout: an image (or a video's frames) whose sides are multiples of
// patch_size * merge_size, rescaled by 1/255, normalised per channel and cut into
// `pixel_values` rows of C * T * P * P values, in exactly the order transformers'
// Qwen2VLImageProcessor (PIL and torchvision backends) and Qwen2VLVideoProcessor write:
//
//   rows:    for t < grid_t, for each merge window (row-major over the grid / merge),
//            for its merge_size x merge_size patches (row-major): one row per patch;
//   columns: for channel c < 3, for frame k < temporal_patch_size, for py < P, px < P.
//
// A still image is one frame, repeated to temporal_patch_size; a video's frames are
// padded to a multiple of it by repeating the last one (both as transformers does).
// Pure kernels: no op, no batch field (vision.patchify, patchify_op.h, builds on them).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "headrace/core/status.h"
#include "headrace/core/tensor.h"
#include "headrace/ops/image_view.h"

namespace headrace {

struct PatchifyParams {
  int patch_size = 14;           // P
  int temporal_patch_size = 2;   // T
  int merge_size = 2;            // M: M x M patches form one LLM token
  // Per channel, on pixel / 255: (pixel / 255 - mean) / std. Default: OpenAI CLIP.
  std::array<float, 3> mean = {0.48145466f, 0.4578275f, 0.40821073f};
  std::array<float, 3> std = {0.26862954f, 0.26130258f, 0.27577711f};
  DType dtype = DType::kF32;  // f32, bf16 or f16 (rounded to nearest even from the f32)
};

// transformers' image_grid_thw / video_grid_thw row.
struct PatchGrid {
  int t = 0;  // temporal groups: ceil(frames / temporal_patch_size)
  int h = 0;  // patch rows: height / patch_size
  int w = 0;  // patch columns: width / patch_size

  int64_t patches() const { return int64_t{t} * h * w; }  // rows of pixel_values
  // The <|image_pad|> / <|video_pad|> tokens the text needs: patches / merge_size^2.
  int64_t tokens(int merge_size) const { return patches() / (int64_t{merge_size} * merge_size); }
  bool operator==(const PatchGrid&) const = default;
};

// Built once per parameter set (an op's Make): validates the parameters and holds the
// 256-entry value table of each channel. Immutable, thread-safe.
class PatchifyKernel {
 public:
  // kInvalidArgument for patch_size or merge_size outside [1, 1024] / [1, 64],
  // temporal_patch_size outside [1, 64], a std of 0 or a dtype other than f32/bf16/f16.
  static Result<PatchifyKernel> Make(const PatchifyParams& params);

  const PatchifyParams& params() const { return params_; }
  // Values per row of pixel_values: 3 * T * P * P.
  int64_t patch_dim() const;

  // The size pass. The grid of a width x height image with `frames` frames (1 for a
  // still image); kInvalidArgument naming the size when a side is not a multiple of
  // patch_size * merge_size or frames < 1.
  Result<PatchGrid> Grid(int width, int height, int frames) const;
  // Bytes PatchifyInto writes for `grid`: patches * patch_dim * the dtype's size.
  size_t Bytes(const PatchGrid& grid) const;

  // Writes the rows of `frames` (1 for a still image; all the same size, 1, 3 or 4
  // channels: 1 is grey, replicated to RGB; the 4th channel of RGBX is ignored) into
  // `out`, which must hold exactly Bytes(Grid(...)) bytes, aligned to the dtype's size;
  // returns the grid.
  Result<PatchGrid> Into(std::span<const ImageView> frames, std::span<uint8_t> out) const;

  // The value a pixel byte `v` of channel `c` becomes, as float (before the dtype).
  float Value(int c, uint8_t v) const { return f32_[c][v]; }

 private:
  PatchifyParams params_;
  std::array<std::array<float, 256>, 3> f32_{};
  std::array<std::array<uint16_t, 256>, 3> half_{};  // bf16 or f16 bits
};

}  // namespace headrace
