// pointcloud.sample: a fixed number of a cloud's points into the batch, for point-based
// models (PointNet++, PointRCNN's first stage): `<output>` f32 [points, 4] and
// `<output>_length` i64, the real points in it. A larger cloud gives a subset: `random`
// (uniform without replacement, seeded per sample and epoch, kept in the cloud's order)
// or `first`; a smaller one is copied whole and zero-padded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/schema.h"

namespace headrace {

enum class PointSelection {
  kRandom,  // a seeded uniform subset, in the cloud's order
  kFirst,   // the first `points` points
};
EnumTable<PointSelection> TableOf(PointSelection);

struct PointSampleSpec {  // pointcloud.sample
  int points = 16384;
  PointSelection select = PointSelection::kRandom;
  std::string field = "pointcloud";
  std::string output;  // the batch field written; empty: named like `field`
};

class PointSampleOp : public Op {
 public:
  static constexpr std::string_view kName = "pointcloud.sample";
  static constexpr std::string_view kDoc =
      "A fixed number of points (seeded random subset or the first; zero-padded) into "
      "f32 [N, 4] plus <output>_length.";
  using Spec = PointSampleSpec;
  static void Fields(auto& s, auto&& f) {
    f("points", s.points);
    f("select", s.select);
    f("field", s.field);
    f("output", s.output);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  static Status Declare(const Spec& spec, PlanContext& ctx);
  // Draws from its random stream: its output changes with the seed and the epoch.
  static bool DrawsRandom(const Spec&) { return true; }
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() {
    Spec spec;
    spec.points = 200;
    return spec;
  }

  PointSampleOp(const PointSampleSpec& spec, int op_position, int slot, int row, int length_row)
      : spec_(spec), op_position_(op_position), slot_(slot), row_(row), length_row_(length_row) {}
  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

 private:
  PointSampleSpec spec_;
  int op_position_, slot_, row_, length_row_;
};

}  // namespace headrace
