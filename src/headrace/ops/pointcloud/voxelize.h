// pointcloud.voxelize: a point cloud to a fixed voxel grid, as PointPillars / SECOND /
// mmcv's hard voxelization do, written straight into batch rows (V = max_voxels,
// P = max_points_per_voxel, C = 4):
//   <out>_voxels      f32 [V, P, C]  each voxel's points, in file order, zero-padded
//   <out>_coords      i32 [V, 3]     each voxel's cell (z, y, x)
//   <out>_num_points  i32 [V]        points in each voxel (1..P; 0 past the count)
//   <out>_count       i64            voxels used (the rows past it are zero)
// The grid spans point_range [xmin, ymin, zmin, xmax, ymax, zmax] in cells of
// voxel_size [dx, dy, dz]: round((max - min) / size) cells per axis, and a point's cell
// is floor((p - min) / size) (in double). Points whose cell falls outside the grid
// (outside the range, or not finite) are dropped.
//
// First come, first served (mmcv's rule, so that results match it): points are taken in
// the cloud's order; a voxel gets the next row when its first point arrives, while
// rows remain; once all V rows are taken, points of new cells are dropped; a voxel keeps
// its first P points and drops the rest. Shuffle the points beforehand for a random
// choice instead (OpenPCDet shuffles at train time).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/pointcloud/read.h"

namespace headrace {

struct VoxelizeSpec {  // pointcloud.voxelize (defaults: PointPillars on KITTI)
  std::array<double, 3> voxel_size = {0.16, 0.16, 4.0};
  PointRange point_range = {0, -39.68, -3, 69.12, 39.68, 1};
  int max_points_per_voxel = 32;
  int max_voxels = 16000;
  std::string field = "pointcloud";
  std::string output;  // the batch fields' prefix; empty: named like `field`
};

// The grid of a spec: cells per axis (x, y, z).
std::array<int64_t, 3> VoxelGrid(const VoxelizeSpec& spec);

// Where one cloud's voxels go: rows as the header describes, for V = max_voxels and
// P = max_points_per_voxel.
struct VoxelRows {
  float* voxels = nullptr;      // [V, P, channels]
  int32_t* coords = nullptr;    // [V, 3]
  int32_t* num_points = nullptr;  // [V]
};

// The kernel: voxelizes `points` into `rows` (every byte of them written) and returns
// the voxels used. Thread-safe (its cell table is per thread). `points.channels` must
// be kPointChannels.
int64_t Voxelize(const VoxelizeSpec& spec, const PointsView& points, const VoxelRows& rows);

class VoxelizeOp : public Op {
 public:
  static constexpr std::string_view kName = "pointcloud.voxelize";
  static constexpr std::string_view kDoc =
      "Voxelize a point cloud to a fixed grid (PointPillars/SECOND): <out>_voxels, "
      "_coords (z, y, x), _num_points, _count.";
  using Spec = VoxelizeSpec;
  static void Fields(auto& s, auto&& f) {
    f("voxel_size", s.voxel_size);
    f("point_range", s.point_range);
    f("max_points_per_voxel", s.max_points_per_voxel);
    f("max_voxels", s.max_voxels);
    f("field", s.field);
    f("output", s.output);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() {
    return Spec{.voxel_size = {2, 2, 2},
                .point_range = {0, -30, -4, 60, 30, 4},
                .max_points_per_voxel = 4,
                .max_voxels = 50,
                .field = "pointcloud",
                .output = ""};
  }

  VoxelizeOp(const VoxelizeSpec& spec, int slot, int voxels_row, int coords_row,
             int num_points_row, int count_row)
      : spec_(spec),
        slot_(slot),
        voxels_row_(voxels_row),
        coords_row_(coords_row),
        num_points_row_(num_points_row),
        count_row_(count_row) {}
  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  VoxelizeSpec spec_;
  int slot_, voxels_row_, coords_row_, num_points_row_, count_row_;
};

}  // namespace headrace
