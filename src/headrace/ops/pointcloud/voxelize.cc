#include "headrace/ops/pointcloud/voxelize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "headrace/ops/schema.h"

namespace headrace {
namespace {

// Bounds: the rows of one sample stay under 1 GiB, and cell indices fit int32 per axis
// (the coords' type) and int64 overall.
constexpr int kMaxVoxels = 1 << 20;
constexpr int kMaxPointsPerVoxel = 4096;
constexpr int64_t kMaxRowBytes = int64_t{1} << 30;
constexpr int64_t kMaxCellsPerAxis = int64_t{1} << 24;

std::string OutputOf(const VoxelizeSpec& spec) {
  return spec.output.empty() ? spec.field : spec.output;
}

// Cell index -> voxel row, open addressing, sized to twice max_voxels so probes stay
// short. Per thread; after each cloud only the entries it used are cleared, so a
// sample costs its points, not the table.
class CellTable {
 public:
  void Prepare(int max_voxels) {
    const size_t want = std::bit_ceil(static_cast<size_t>(max_voxels) * 2);
    if (entries_.size() < want) entries_.assign(want, Entry{});
    mask_ = entries_.size() - 1;
    shift_ = 64 - std::countr_zero(entries_.size());
    used_.clear();
  }
  // The row of `cell`, or -1 when it has none; `slot` is where it would go.
  int32_t Find(int64_t cell, size_t& slot) const {
    slot = static_cast<size_t>((static_cast<uint64_t>(cell) * 0x9E3779B97F4A7C15ULL) >> shift_);
    while (entries_[slot].cell != kEmpty) {
      if (entries_[slot].cell == cell) return entries_[slot].row;
      slot = (slot + 1) & mask_;
    }
    return -1;
  }
  void Insert(size_t slot, int64_t cell, int32_t row) {
    entries_[slot] = Entry{cell, row};
    used_.push_back(slot);
  }
  void Clear() {
    for (size_t slot : used_) entries_[slot].cell = kEmpty;
    used_.clear();
  }

 private:
  static constexpr int64_t kEmpty = -1;
  // Key and row side by side: a lookup touches one cache line.
  struct Entry {
    int64_t cell = kEmpty;
    int32_t row = 0;
  };
  std::vector<Entry> entries_;
  std::vector<size_t> used_;
  size_t mask_ = 0;
  int shift_ = 64;
};

}  // namespace

std::array<int64_t, 3> VoxelGrid(const VoxelizeSpec& spec) {
  std::array<int64_t, 3> grid{};
  for (int a = 0; a < 3; ++a) {
    grid[a] = std::llround((spec.point_range[a + 3] - spec.point_range[a]) / spec.voxel_size[a]);
  }
  return grid;
}

int64_t Voxelize(const VoxelizeSpec& spec, const PointsView& points, const VoxelRows& rows) {
  const int64_t max_voxels = spec.max_voxels;
  const int64_t max_points = spec.max_points_per_voxel;
  const int channels = points.channels;
  const std::array<int64_t, 3> grid = VoxelGrid(spec);
  const double x0 = spec.point_range[0], y0 = spec.point_range[1], z0 = spec.point_range[2];
  const double dx = spec.voxel_size[0], dy = spec.voxel_size[1], dz = spec.voxel_size[2];
  thread_local CellTable table;
  table.Prepare(spec.max_voxels);
  int32_t used = 0;
  for (int64_t i = 0; i < points.count; ++i) {
    const float* p = points.point(i);
    // NaN fails every comparison, so it is dropped with the points outside.
    const double fx = std::floor((p[0] - x0) / dx);
    const double fy = std::floor((p[1] - y0) / dy);
    const double fz = std::floor((p[2] - z0) / dz);
    if (!(fx >= 0 && fx < static_cast<double>(grid[0]) && fy >= 0 &&
          fy < static_cast<double>(grid[1]) && fz >= 0 && fz < static_cast<double>(grid[2]))) {
      continue;
    }
    const auto cx = static_cast<int64_t>(fx), cy = static_cast<int64_t>(fy),
               cz = static_cast<int64_t>(fz);
    const int64_t cell = (cz * grid[1] + cy) * grid[0] + cx;
    size_t slot = 0;
    int32_t row = table.Find(cell, slot);
    if (row < 0) {
      if (used == max_voxels) continue;  // no rows left: new cells are dropped
      row = used++;
      table.Insert(slot, cell, row);
      int32_t* c = rows.coords + static_cast<int64_t>(row) * 3;
      c[0] = static_cast<int32_t>(cz);
      c[1] = static_cast<int32_t>(cy);
      c[2] = static_cast<int32_t>(cx);
      rows.num_points[row] = 0;
    }
    int32_t& n = rows.num_points[row];
    if (n == max_points) continue;
    std::memcpy(rows.voxels + (static_cast<int64_t>(row) * max_points + n) * channels, p,
                static_cast<size_t>(channels) * sizeof(float));
    ++n;
  }
  table.Clear();
  // Zero what no point wrote: each used voxel's tail, then every unused row.
  const size_t point_bytes = static_cast<size_t>(channels) * sizeof(float);
  for (int32_t v = 0; v < used; ++v) {
    const int64_t n = rows.num_points[v];
    std::memset(rows.voxels + (static_cast<int64_t>(v) * max_points + n) * channels, 0,
                static_cast<size_t>(max_points - n) * point_bytes);
  }
  const auto rest = static_cast<size_t>(max_voxels - used);
  std::memset(rows.voxels + static_cast<int64_t>(used) * max_points * channels, 0,
              rest * static_cast<size_t>(max_points) * point_bytes);
  std::memset(rows.coords + static_cast<int64_t>(used) * 3, 0, rest * 3 * sizeof(int32_t));
  std::memset(rows.num_points + used, 0, rest * sizeof(int32_t));
  return used;
}

Status VoxelizeOp::Validate(const Spec& s, const std::string& p) {
  for (int a = 0; a < 3; ++a) {
    if (!(s.voxel_size[a] > 0) || !std::isfinite(s.voxel_size[a])) {
      return schema::Invalid(p + ".voxel_size", "each size must be > 0 (axis " +
                                                    std::string(1, "xyz"[a]) + ": " +
                                                    schema::FormatDouble(s.voxel_size[a]) + ")");
    }
  }
  HR_RETURN_IF_ERROR(ValidateRange(p + ".point_range", s.point_range, /*allow_none=*/false));
  for (int a = 0; a < 3; ++a) {
    // Counted as a double before VoxelGrid rounds it to int64_t (out of its range for a
    // tiny size: an unspecified value).
    const double cells = (s.point_range[a + 3] - s.point_range[a]) / s.voxel_size[a];
    if (!(cells <= static_cast<double>(kMaxCellsPerAxis))) {
      return schema::Invalid(p + ".voxel_size",
                             "gives " + schema::FormatDouble(cells) + " cells along " +
                                 std::string(1, "xyz"[a]) + " of point_range (allowed: 1 to " +
                                 std::to_string(kMaxCellsPerAxis) + ")");
    }
  }
  const std::array<int64_t, 3> grid = VoxelGrid(s);
  for (int a = 0; a < 3; ++a) {
    if (grid[a] < 1 || grid[a] > kMaxCellsPerAxis) {
      return schema::Invalid(p + ".voxel_size",
                             "gives " + std::to_string(grid[a]) + " cells along " +
                                 std::string(1, "xyz"[a]) + " of point_range (allowed: 1 to " +
                                 std::to_string(kMaxCellsPerAxis) + ")");
    }
  }
  if (static_cast<double>(grid[0]) * static_cast<double>(grid[1]) * static_cast<double>(grid[2]) >
      0x1p62) {
    return schema::Invalid(p + ".voxel_size", "gives more than 2^62 cells in point_range");
  }
  HR_RETURN_IF_ERROR(
      schema::InRange(p + ".max_points_per_voxel", s.max_points_per_voxel, 1, kMaxPointsPerVoxel));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".max_voxels", s.max_voxels, 1, kMaxVoxels));
  const int64_t bytes = int64_t{s.max_voxels} * s.max_points_per_voxel * kPointChannels * 4;
  if (bytes > kMaxRowBytes) {
    return schema::Invalid(p + ".max_voxels", "max_voxels x max_points_per_voxel x 16 bytes is " +
                                                  std::to_string(bytes) +
                                                  " per sample (at most 1 GiB)");
  }
  return schema::NonEmpty(p + ".field", s.field, "the point cloud to voxelize");
}

Status VoxelizeOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_RETURN_IF_ERROR(ctx.Read(spec.field, ValueKind::kPoints).status());
  const std::string out = OutputOf(spec);
  const std::string source = ctx.key() + ".max_voxels " + std::to_string(spec.max_voxels) +
                             ", max_points_per_voxel " +
                             std::to_string(spec.max_points_per_voxel);
  const int64_t v = spec.max_voxels, p = spec.max_points_per_voxel;
  ctx.AddField(FieldSpec{out + "_voxels", DType::kF32, {v, p, kPointChannels}}, source);
  ctx.AddField(FieldSpec{out + "_coords", DType::kI32, {v, 3}}, source);
  ctx.AddField(FieldSpec{out + "_num_points", DType::kI32, {v}}, source);
  ctx.AddField(FieldSpec{out + "_count", DType::kI64, {}}, source);
  return Status::Ok();
}

Result<std::unique_ptr<Op>> VoxelizeOp::Make(const Spec& spec, PlanContext& ctx) {
  const std::string out = OutputOf(spec);
  return std::unique_ptr<Op>(std::make_unique<VoxelizeOp>(
      spec, ctx.slot(spec.field), ctx.row(out + "_voxels"), ctx.row(out + "_coords"),
      ctx.row(out + "_num_points"), ctx.row(out + "_count")));
}

Status VoxelizeOp::Run(SampleContext& ctx) const {
  const PointsView* points = ctx.Get<PointsView>(slot_);
  if (points == nullptr) {
    return Status::MissingField("pointcloud.voxelize: no point cloud '" + spec_.field + "'");
  }
  if (points->channels != kPointChannels) {
    return Status::Internal("pointcloud.voxelize: " + std::to_string(points->channels) +
                            " channels per point where the plan has " +
                            std::to_string(kPointChannels));
  }
  const VoxelRows rows{reinterpret_cast<float*>(ctx.rows[voxels_row_]),
                       reinterpret_cast<int32_t*>(ctx.rows[coords_row_]),
                       reinterpret_cast<int32_t*>(ctx.rows[num_points_row_])};
  const int64_t count = Voxelize(spec_, *points, rows);
  std::memcpy(ctx.rows[count_row_], &count, sizeof count);
  return Status::Ok();
}

}  // namespace headrace
