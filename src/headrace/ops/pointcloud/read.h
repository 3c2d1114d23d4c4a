// pointcloud.read: a point-cloud file to points (x, y, z, intensity as float32, N x 4) in
// scratch: the value `field` becomes a point cloud. Formats:
//   kitti  the KITTI velodyne `.bin`: little-endian float32 records (x, y, z, intensity),
//          16 bytes each; a size that is not a multiple of 16 is kCorruptData.
//   pcd    PCD v0.7 (PCL), DATA ascii, binary or binary_compressed (LZF, column-major,
//          what PCL writes by default): fields x, y, z and, when present, intensity (or
//          `i`); other fields are skipped; TYPE F/I/U of any SIZE. A header that lies
//          (WIDTH x HEIGHT != POINTS, fewer or more data than POINTS records, compressed
//          sizes that do not match the file or the points, a stream that does not
//          decompress to its declared size) is kCorruptData.
//   auto   pcd when the file starts with "# .PCD", "VERSION" or "FIELDS", else kitti.
// Points whose x, y or z is not finite (NaN marks "no return" in organized PCDs) are
// dropped, and with a point_range, so are points outside it. An empty file is
// kCorruptData; a valid file with no points (PCD POINTS 0, or all cropped) is an empty
// cloud.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/schema.h"

namespace headrace {

enum class PointFormat {
  kAuto,   // by the first bytes: PCD's header, else KITTI
  kKitti,  // float32 x, y, z, intensity records
  kPcd,    // PCD v0.7, ascii, binary or binary_compressed
};
EnumTable<PointFormat> TableOf(PointFormat);

// An axis-aligned box [xmin, ymin, zmin, xmax, ymax, zmax]; all zeros: none.
using PointRange = std::array<double, 6>;

// Whether `range` is set (not all zeros), and whether point p lies inside it
// (min <= p < max on each axis, as voxelization bins them).
bool HasRange(const PointRange& range);
inline bool InsideRange(const PointRange& r, float x, float y, float z) {
  return x >= r[0] && y >= r[1] && z >= r[2] && x < r[3] && y < r[4] && z < r[5];
}
// kInvalidArgument naming `key` unless every min < max (or the range is all zeros,
// when `allow_none`).
Status ValidateRange(const std::string& key, const PointRange& range, bool allow_none);

// Memory for `points` points (kPointChannels floats each; at least one point's worth),
// asked for once, after the header's claims are checked against the bytes.
using PointAllocator = std::function<Result<float*>(int64_t points)>;

// The kernel: parses `bytes` as `format` into memory from `allocate`, keeping the points
// inside `range` (when set) with finite x, y, z, in file order; returns how many it kept.
// `allocate` is not called when the bytes are refused before any point is read.
// `decode_bytes` > 0 (memory.decode_bytes_per_thread) bounds what a binary_compressed
// body decompresses to plus its points: a header declaring more is refused
// (kResourceExhausted) before anything is allocated.
Result<int64_t> ParsePoints(const uint8_t* bytes, size_t size, PointFormat format,
                            const PointRange& range, const PointAllocator& allocate,
                            int64_t decode_bytes = 0);

struct PointReadSpec {  // pointcloud.read
  PointFormat format = PointFormat::kAuto;
  PointRange point_range = {0, 0, 0, 0, 0, 0};  // all zeros: keep every point
  std::string field = "pointcloud";
};

class PointReadOp : public Op {
 public:
  static constexpr std::string_view kName = "pointcloud.read";
  static constexpr std::string_view kDoc =
      "Read a point cloud (KITTI .bin, PCD ascii/binary/binary_compressed) to float32 x, y, z, intensity; "
      "optional range crop.";
  using Spec = PointReadSpec;
  static void Fields(auto& s, auto&& f) {
    f("format", s.format);
    f("point_range", s.point_range);
    f("field", s.field);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads the encoded `field`, writes it back as a point cloud [N, 4].
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{}; }
  // The battery's input: a small KITTI .bin (a ramp of 100 + index points).
  static std::vector<uint8_t> ExampleInput(int index);

  PointReadOp(const PointReadSpec& spec, int slot, int64_t decode_bytes = 0)
      : spec_(spec), slot_(slot), decode_bytes_(decode_bytes) {}
  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  PointReadSpec spec_;
  int slot_;
  int64_t decode_bytes_;
};

}  // namespace headrace
