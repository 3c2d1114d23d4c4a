// pointcloud.augment: the global augmentations of LiDAR detection pipelines (OpenPCDet's
// random_world_flip / random_world_rotation / random_world_scaling, mmdet3d's
// RandomFlip3D + GlobalRotScaleTrans), seeded per (seed, epoch, index): a resumed epoch
// repeats them and a new epoch differs. In this order:
//   flip    y -> -y with probability flip_y (a mirror across the x-z plane: OpenPCDet's
//           "flip along x"), then x -> -x with probability flip_x;
//   rotate  about z by an angle uniform in rotation_degrees [lo, hi];
//   scale   x, y, z by a factor uniform in scale [lo, hi].
// Intensity is kept. The result is a new point cloud in scratch (the input is left as
// it was). With `transform` set, the 3 x 3 matrix M applied (p' = M p, row-major f32
// [3, 3]) is written to that batch field, so that a trainer can move its boxes the same
// way (a box's yaw turns by atan2(M[1][0], M[0][0]) / flips with det M < 0).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/rng.h"
#include "headrace/core/status.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"

namespace headrace {

struct PointAugmentSpec {  // pointcloud.augment
  std::array<double, 2> rotation_degrees = {-45, 45};
  double flip_x = 0.0;  // probability of x -> -x
  double flip_y = 0.5;  // probability of y -> -y
  std::array<double, 2> scale = {0.95, 1.05};
  std::string field = "pointcloud";
  std::string transform;  // a batch field for the matrix applied; empty: none
};

// The 3 x 3 row-major matrix of one sample's draws: flip, then rotate, then scale.
using PointTransform = std::array<float, 9>;
// Draws one sample's transform from `rng` (always the same number of draws, whatever
// the probabilities, so that changing one parameter does not shift the others' draws).
PointTransform DrawPointTransform(const PointAugmentSpec& spec, Rng& rng);
// out[i] = M in[i] for x, y, z; intensity copied. `out` may not alias `in`.
void TransformPoints(const PointTransform& m, const float* in, int64_t count, int channels,
                     float* out);

class PointAugmentOp : public Op {
 public:
  static constexpr std::string_view kName = "pointcloud.augment";
  static constexpr std::string_view kDoc =
      "Seeded random flip (x/y), rotation about z and global scaling of a point cloud.";
  using Spec = PointAugmentSpec;
  static void Fields(auto& s, auto&& f) {
    f("rotation_degrees", s.rotation_degrees);
    f("flip_x", s.flip_x);
    f("flip_y", s.flip_y);
    f("scale", s.scale);
    f("field", s.field);
    f("transform", s.transform);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads the point cloud `field` and writes it back, same shape.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  // Draws from its random stream: its output changes with the seed and the epoch.
  static bool DrawsRandom(const Spec&) { return true; }
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() {
    Spec spec;
    spec.flip_x = 0.5;
    spec.transform = "augment";
    return spec;
  }

  PointAugmentOp(const PointAugmentSpec& spec, int op_position, int slot, int transform_row)
      : spec_(spec), op_position_(op_position), slot_(slot), transform_row_(transform_row) {}
  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  PointAugmentSpec spec_;
  int op_position_, slot_, transform_row_;
};

}  // namespace headrace
