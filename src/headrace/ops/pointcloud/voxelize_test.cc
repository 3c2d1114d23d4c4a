#include "headrace/ops/pointcloud/voxelize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "headrace/core/rng.h"

namespace headrace {
namespace {

struct Voxels {
  std::vector<float> voxels;       // [V, P, 4]
  std::vector<int32_t> coords;     // [V, 3]
  std::vector<int32_t> num_points; // [V]
  int64_t count = -1;
};

// Runs the op on `points` with rows pre-filled with garbage (every byte must be written).
Voxels VoxelizeWith(const VoxelizeSpec& spec, const std::vector<float>& points) {
  const auto v = static_cast<size_t>(spec.max_voxels), p = static_cast<size_t>(spec.max_points_per_voxel);
  Voxels out;
  out.voxels.assign(v * p * 4, 123.0f);
  out.coords.assign(v * 3, -7);
  out.num_points.assign(v, -7);
  std::vector<Value> values = {PointsView{points.data(), static_cast<int64_t>(points.size() / 4), 4}};
  uint8_t* rows[4] = {reinterpret_cast<uint8_t*>(out.voxels.data()),
                      reinterpret_cast<uint8_t*>(out.coords.data()),
                      reinterpret_cast<uint8_t*>(out.num_points.data()),
                      reinterpret_cast<uint8_t*>(&out.count)};
  ScratchArena scratch;
  SampleContext ctx;
  ctx.scratch = &scratch;
  ctx.values = values;
  ctx.rows = rows;
  VoxelizeOp op(spec, 0, 0, 1, 2, 3);
  EXPECT_TRUE(op.Run(ctx).ok());
  return out;
}

// A 4 x 4 x 2 grid of 1 m cells over [0, 4) x [-2, 2) x [0, 2).
VoxelizeSpec SmallGrid(int max_points = 3, int max_voxels = 10) {
  VoxelizeSpec spec;
  spec.voxel_size = {1, 1, 1};
  spec.point_range = {0, -2, 0, 4, 2, 2};
  spec.max_points_per_voxel = max_points;
  spec.max_voxels = max_voxels;
  return spec;
}

TEST(Voxelize, AKnownCloudGivesExactVoxels) {
  const std::vector<float> cloud = {
      0.5f, -1.5f, 0.5f, 1,  // cell (z0, y0, x0)
      3.9f, 1.9f,  1.9f, 2,  // cell (z1, y3, x3)
      0.1f, -1.1f, 0.9f, 3,  // cell (z0, y0, x0) again
      4.0f, 0.0f,  0.0f, 4,  // x = xmax: outside (max is exclusive)
      -0.01f, 0,   0,    5,  // x < xmin: outside
      2.5f, 0.5f,  1.0f, 6,  // cell (z1, y2, x2)
      1, 1, std::nanf(""), 7,  // not finite: dropped
  };
  const Voxels v = VoxelizeWith(SmallGrid(), cloud);
  ASSERT_EQ(v.count, 3);
  EXPECT_EQ(std::vector<int32_t>(v.coords.begin(), v.coords.begin() + 9),
            (std::vector<int32_t>{0, 0, 0, 1, 3, 3, 1, 2, 2}))
      << "(z, y, x), in order of first point";
  EXPECT_EQ(std::vector<int32_t>(v.num_points.begin(), v.num_points.begin() + 4),
            (std::vector<int32_t>{2, 1, 1, 0}));
  // Voxel 0 holds points 1 and 3 (file order), then a zero point.
  EXPECT_EQ(std::vector<float>(v.voxels.begin(), v.voxels.begin() + 12),
            (std::vector<float>{0.5f, -1.5f, 0.5f, 1, 0.1f, -1.1f, 0.9f, 3, 0, 0, 0, 0}));
  EXPECT_EQ(v.voxels[12 * 2 + 3], 6) << "voxel 2's first point is point 6";
  // Every row past the count is zero.
  for (size_t i = 3 * 3; i < v.coords.size(); ++i) EXPECT_EQ(v.coords[i], 0);
  for (size_t i = 3 * 12; i < v.voxels.size(); ++i) ASSERT_EQ(v.voxels[i], 0) << i;
}

TEST(Voxelize, FullVoxelsAndAFullGridDropFirstComeLastServed) {
  std::vector<float> cloud;
  for (int i = 0; i < 5; ++i) cloud.insert(cloud.end(), {0.5f, 0.5f, 0.5f, float(i)});  // one cell
  for (int x = 0; x < 4; ++x) cloud.insert(cloud.end(), {x + 0.5f, -0.5f, 1.5f, 10.0f + x});
  const Voxels v = VoxelizeWith(SmallGrid(/*max_points=*/2, /*max_voxels=*/3), cloud);
  ASSERT_EQ(v.count, 3);
  EXPECT_EQ(v.num_points, (std::vector<int32_t>{2, 1, 1}));
  EXPECT_EQ(v.voxels[3], 0);
  EXPECT_EQ(v.voxels[7], 1) << "the first two points of the full voxel";
  EXPECT_EQ(v.voxels[8 + 3], 10);
  EXPECT_EQ(v.voxels[16 + 3], 11) << "then the next new cells until the rows run out";
  EXPECT_EQ(v.coords, (std::vector<int32_t>{0, 2, 0, 1, 1, 0, 1, 1, 1}));
}

TEST(Voxelize, EmptyCloudWritesZeros) {
  const Voxels v = VoxelizeWith(SmallGrid(), {});
  EXPECT_EQ(v.count, 0);
  for (float f : v.voxels) ASSERT_EQ(f, 0);
  for (int32_t c : v.coords) ASSERT_EQ(c, 0);
  for (int32_t n : v.num_points) ASSERT_EQ(n, 0);
}

// Against a plain reference (std::map of cells, the same rules) on random clouds whose
// points are partly outside the range, with the row and point limits both reached.
TEST(Voxelize, MatchesAReferenceOnRandomClouds) {
  VoxelizeSpec spec;
  spec.voxel_size = {0.5, 0.4, 1.0};
  spec.point_range = {-3, -2, -1, 3, 2, 1};
  spec.max_points_per_voxel = 5;
  spec.max_voxels = 120;
  const auto grid = VoxelGrid(spec);
  ASSERT_EQ(grid, (std::array<int64_t, 3>{12, 10, 2}));
  Rng rng(HashKeys(3, 4));
  for (int round = 0; round < 20; ++round) {
    std::vector<float> cloud;
    for (int i = 0; i < 1500; ++i) {
      cloud.insert(cloud.end(), {static_cast<float>(rng.Uniform(-4, 4)),
                                 static_cast<float>(rng.Uniform(-3, 3)),
                                 static_cast<float>(rng.Uniform(-1.5, 1.5)), float(i)});
    }
    std::map<std::tuple<int, int, int>, int> row_of;
    std::vector<std::vector<float>> want;  // per voxel, the intensities (point ids) kept
    for (size_t i = 0; i < cloud.size(); i += 4) {
      int c[3];
      bool inside = true;
      for (int a = 0; a < 3; ++a) {
        c[a] = static_cast<int>(std::floor((double{cloud[i + a]} - spec.point_range[a]) /
                                           spec.voxel_size[a]));
        inside &= c[a] >= 0 && c[a] < grid[a];
      }
      if (!inside) continue;
      auto [it, added] = row_of.try_emplace({c[2], c[1], c[0]}, static_cast<int>(want.size()));
      if (added) {
        if (static_cast<int>(want.size()) == spec.max_voxels) {
          row_of.erase(it);
          continue;
        }
        want.emplace_back();
      }
      auto& kept = want[static_cast<size_t>(it->second)];
      if (static_cast<int>(kept.size()) < spec.max_points_per_voxel) kept.push_back(cloud[i + 3]);
    }
    const Voxels v = VoxelizeWith(spec, cloud);
    ASSERT_EQ(v.count, static_cast<int64_t>(want.size()));
    for (const auto& [cell, row] : row_of) {
      const auto r = static_cast<size_t>(row);
      EXPECT_EQ(v.coords[r * 3], std::get<0>(cell));
      EXPECT_EQ(v.coords[r * 3 + 1], std::get<1>(cell));
      EXPECT_EQ(v.coords[r * 3 + 2], std::get<2>(cell));
      ASSERT_EQ(v.num_points[r], static_cast<int32_t>(want[r].size()));
      for (size_t k = 0; k < want[r].size(); ++k) {
        EXPECT_EQ(v.voxels[(r * 5 + k) * 4 + 3], want[r][k]);
      }
    }
  }
}

TEST(Voxelize, ValidateNamesTheKey) {
  VoxelizeSpec spec;
  EXPECT_TRUE(VoxelizeOp::Validate(spec, "v").ok());
  spec.voxel_size = {0.1, 0, 0.1};
  EXPECT_NE(VoxelizeOp::Validate(spec, "v").message().find("v.voxel_size"), std::string::npos);
  spec = {};
  spec.point_range = {0, 0, 0, 0, 0, 0};
  EXPECT_NE(VoxelizeOp::Validate(spec, "v").message().find("v.point_range"), std::string::npos);
  spec = {};
  spec.voxel_size = {1e-9, 1e-9, 1e-9};
  EXPECT_NE(VoxelizeOp::Validate(spec, "v").message().find("cells"), std::string::npos);
  spec = {};
  spec.max_voxels = 1 << 20;
  spec.max_points_per_voxel = 4096;
  EXPECT_NE(VoxelizeOp::Validate(spec, "v").message().find("1 GiB"), std::string::npos);
}

}  // namespace
}  // namespace headrace
