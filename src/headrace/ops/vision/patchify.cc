#include "headrace/ops/vision/patchify.h"

#include <algorithm>
#include <string>

#include "headrace/ops/image/normalize.h"
#include "headrace/ops/schema.h"

namespace headrace {
namespace {

std::string Dims(int w, int h) { return std::to_string(w) + "x" + std::to_string(h); }

// One output row (a patch) of values of type T from the per-channel tables `table`:
// for c, for k < T frames, for py, for px. `frames[k]` is already padded to T.
template <typename Out, typename Table>
void WritePatch(const ImageView* const* frames, int t_size, int p, int x0, int y0,
                const Table& table, Out* out) {
  for (int c = 0; c < 3; ++c) {
    const auto& lut = table[c];
    for (int k = 0; k < t_size; ++k) {
      if (k > 0 && frames[k] == frames[k - 1]) {
        // A still image (or a clip's last frame) repeated to fill the group: the same
        // values again, copied rather than looked up (half an image's patch work).
        std::copy(out - p * p, out, out);
        out += p * p;
        continue;
      }
      const ImageView& f = *frames[k];
      const int ch = f.channels;
      const int src_c = ch == 1 ? 0 : c;
      for (int py = 0; py < p; ++py) {
        const uint8_t* row = f.row(y0 + py) + static_cast<int64_t>(x0) * ch + src_c;
        for (int px = 0; px < p; ++px) *out++ = lut[row[px * ch]];
      }
    }
  }
}

template <typename Out, typename Table>
void WriteAll(std::span<const ImageView> frames, const PatchGrid& g, const PatchifyParams& pp,
              const Table& table, Out* out) {
  const int p = pp.patch_size, m = pp.merge_size, t_size = pp.temporal_patch_size;
  const int64_t dim = int64_t{3} * t_size * p * p;
  const int n = static_cast<int>(frames.size());
  constexpr int kMaxT = 64;  // Make bounds temporal_patch_size
  const ImageView* group[kMaxT];
  for (int gt = 0; gt < g.t; ++gt) {
    for (int k = 0; k < t_size; ++k) {
      group[k] = &frames[static_cast<size_t>(std::min(gt * t_size + k, n - 1))];
    }
    for (int bh = 0; bh < g.h / m; ++bh) {
      for (int bw = 0; bw < g.w / m; ++bw) {
        for (int mh = 0; mh < m; ++mh) {
          for (int mw = 0; mw < m; ++mw) {
            WritePatch(group, t_size, p, (bw * m + mw) * p, (bh * m + mh) * p, table, out);
            out += dim;
          }
        }
      }
    }
  }
}

}  // namespace

Result<PatchifyKernel> PatchifyKernel::Make(const PatchifyParams& params) {
  const std::string key = "patchify";
  HR_RETURN_IF_ERROR(schema::InRange(key + ".patch_size", params.patch_size, 1, 1024));
  HR_RETURN_IF_ERROR(schema::InRange(key + ".merge_size", params.merge_size, 1, 64));
  HR_RETURN_IF_ERROR(
      schema::InRange(key + ".temporal_patch_size", params.temporal_patch_size, 1, 64));
  if (params.dtype != DType::kF32 && params.dtype != DType::kBF16 &&
      params.dtype != DType::kF16) {
    return Status::InvalidArgument("patchify.dtype must be f32, bf16 or f16, got " +
                                   std::string(DTypeName(params.dtype)));
  }
  PatchifyKernel k;
  k.params_ = params;
  for (int c = 0; c < 3; ++c) {
    if (!(params.std[c] != 0.0f)) {
      return Status::InvalidArgument("patchify.std[" + std::to_string(c) + "] must not be 0");
    }
    for (int v = 0; v < 256; ++v) {
      // transformers: rescale in float64 (pixel * (1 / 255)) then to float32, and
      // normalize in float32: (x - mean) / std. The same IEEE operations, so the same bits.
      const float x = static_cast<float>(static_cast<double>(v) * (1.0 / 255.0));
      const float f = (x - params.mean[c]) / params.std[c];
      k.f32_[c][v] = f;
      k.half_[c][v] = params.dtype == DType::kBF16 ? FloatToBFloat16(f) : FloatToHalf(f);
    }
  }
  return k;
}

int64_t PatchifyKernel::patch_dim() const {
  return int64_t{3} * params_.temporal_patch_size * params_.patch_size * params_.patch_size;
}

Result<PatchGrid> PatchifyKernel::Grid(int width, int height, int frames) const {
  const int factor = params_.patch_size * params_.merge_size;
  if (width <= 0 || height <= 0 || width % factor != 0 || height % factor != 0) {
    return Status::InvalidArgument(
        "patchify: image " + Dims(width, height) + " has a side that is not a multiple of " +
        "patch_size * merge_size = " + std::to_string(factor) + " (image.smart_resize first)");
  }
  if (frames < 1) return Status::InvalidArgument("patchify: no frame");
  const int t = params_.temporal_patch_size;
  return PatchGrid{(frames + t - 1) / t, height / params_.patch_size, width / params_.patch_size};
}

size_t PatchifyKernel::Bytes(const PatchGrid& grid) const {
  return static_cast<size_t>(grid.patches()) * static_cast<size_t>(patch_dim()) *
         DTypeSize(params_.dtype);
}

Result<PatchGrid> PatchifyKernel::Into(std::span<const ImageView> frames,
                                       std::span<uint8_t> out) const {
  if (frames.empty()) return Status::InvalidArgument("patchify: no frame");
  const ImageView& first = frames[0];
  for (const ImageView& f : frames) {
    if (f.empty() || f.width != first.width || f.height != first.height ||
        (f.channels != 1 && f.channels != 3 && f.channels != 4)) {
      return Status::InvalidArgument("patchify: frames must be non-empty, all " +
                                     Dims(first.width, first.height) +
                                     ", with 1, 3 or 4 channels");
    }
  }
  HR_ASSIGN_OR_RETURN(PatchGrid grid,
                      Grid(first.width, first.height, static_cast<int>(frames.size())));
  if (out.size() != Bytes(grid)) {
    return Status::InvalidArgument("patchify: output holds " + std::to_string(out.size()) +
                                   " bytes, the grid needs " + std::to_string(Bytes(grid)));
  }
  if (params_.dtype == DType::kF32) {
    WriteAll(frames, grid, params_, f32_, reinterpret_cast<float*>(out.data()));
  } else {
    WriteAll(frames, grid, params_, half_, reinterpret_cast<uint16_t*>(out.data()));
  }
  return grid;
}

}  // namespace headrace
