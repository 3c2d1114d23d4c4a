// Fuzz target: pointcloud.read's parser (ParsePoints: KITTI .bin, PCD ascii/binary/
// binary_compressed) on
// arbitrary bytes, as auto, kitti and pcd, with and without a range, then voxelization
// of what it accepted.
//
// Properties checked besides "no crash, no leak, no UB":
//   - a parse fails only with kCorruptData or kUnsupportedFormat;
//   - memory is asked for once, for at most size / 16 points (KITTI, binary PCD),
//     size / 2 (ascii: two bytes per value at least) or 88 x size / 3 (binary_compressed:
//     LZF expands at most 88-fold, a record is 3 bytes at least), before any point is
//     written, and the points kept fit in it;
//   - kept points have finite x, y, z, inside the range when one is given;
//   - voxelizing them uses at most max_voxels rows, each with 1..P points and a cell
//     inside the grid; the rows past the count are zero.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "headrace/ops/pointcloud/read.h"
#include "headrace/ops/pointcloud/voxelize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headrace;
  const Buffer bytes = fuzz::ExactCopy(data, size);
  const PointRange ranges[] = {{0, 0, 0, 0, 0, 0}, {-10, -10, -3, 10, 10, 3}};
  const bool compressed = std::string_view(reinterpret_cast<const char*>(data), size)
                              .find("binary_compressed") != std::string_view::npos;
  const uint64_t max_points = compressed ? 88 * static_cast<uint64_t>(size) / 3 + 1 : size / 2 + 1;
  for (PointFormat format : {PointFormat::kAuto, PointFormat::kKitti, PointFormat::kPcd}) {
    for (const PointRange& range : ranges) {
      std::vector<float> points;
      int64_t asked = -1;
      const Result<int64_t> kept = ParsePoints(
          bytes.data(), bytes.size(), format, range, [&](int64_t n) -> Result<float*> {
            HR_FUZZ_CHECK(asked < 0, "memory asked for twice");
            HR_FUZZ_CHECK(n >= 0 && static_cast<uint64_t>(n) <= max_points,
                          "asked for %lld points for %zu bytes", static_cast<long long>(n), size);
            asked = n;
            points.resize(static_cast<size_t>(n) * kPointChannels + kPointChannels);
            return points.data();
          });
      if (!kept.ok()) {
        const StatusCode code = kept.status().code();
        HR_FUZZ_CHECK(code == StatusCode::kCorruptData || code == StatusCode::kUnsupportedFormat,
                      "%s", kept.status().ToString().c_str());
        continue;
      }
      HR_FUZZ_CHECK(asked >= 0 && *kept <= asked, "kept %lld of %lld",
                    static_cast<long long>(*kept), static_cast<long long>(asked));
      for (int64_t i = 0; i < *kept; ++i) {
        const float* p = points.data() + i * kPointChannels;
        HR_FUZZ_CHECK(std::isfinite(p[0]) && std::isfinite(p[1]) && std::isfinite(p[2]),
                      "point %lld not finite", static_cast<long long>(i));
        HR_FUZZ_CHECK(!HasRange(range) || InsideRange(range, p[0], p[1], p[2]),
                      "point %lld outside the range", static_cast<long long>(i));
      }
      VoxelizeSpec spec;
      spec.voxel_size = {1, 1, 2};
      spec.point_range = {-10, -10, -3, 10, 10, 3};
      spec.max_points_per_voxel = 3;
      spec.max_voxels = 20;
      std::vector<float> voxels(20 * 3 * 4, -1);
      std::vector<int32_t> coords(20 * 3, -1), num(20, -1);
      const int64_t count = Voxelize(spec, PointsView{points.data(), *kept, kPointChannels},
                                     VoxelRows{voxels.data(), coords.data(), num.data()});
      HR_FUZZ_CHECK(count >= 0 && count <= 20, "%lld voxels", static_cast<long long>(count));
      for (int64_t v = 0; v < 20; ++v) {
        const int32_t* c = coords.data() + v * 3;
        if (v < count) {
          HR_FUZZ_CHECK(num[v] >= 1 && num[v] <= 3 && c[0] >= 0 && c[0] < 3 && c[1] >= 0 &&
                            c[1] < 20 && c[2] >= 0 && c[2] < 20,
                        "voxel %lld", static_cast<long long>(v));
        } else {
          HR_FUZZ_CHECK(num[v] == 0 && c[0] == 0 && c[1] == 0 && c[2] == 0,
                        "row %lld past the count not zero", static_cast<long long>(v));
        }
      }
    }
  }
  return 0;
}
