#include "headrace/ops/pointcloud/augment.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace headrace {
namespace {

struct Augmented {
  Status status;
  std::vector<float> points;
  std::vector<float> transform = std::vector<float>(9, -1);
};

std::vector<float> Cloud() {
  std::vector<float> p;
  for (int i = 0; i < 50; ++i) {
    p.insert(p.end(), {0.3f * i - 5, 7 - 0.2f * i, 0.05f * i - 1, static_cast<float>(i)});
  }
  return p;
}

// Runs the op as the engine would for sample `index` of `epoch` under `seed`.
Augmented Augment(const PointAugmentSpec& spec, uint64_t seed, uint64_t epoch, uint64_t index,
                  const std::vector<float>& in = Cloud()) {
  std::vector<Value> values = {PointsView{in.data(), static_cast<int64_t>(in.size() / 4), 4}};
  Augmented out;
  uint8_t* rows[1] = {reinterpret_cast<uint8_t*>(out.transform.data())};
  ScratchArena scratch;
  SampleContext ctx;
  ctx.sample_seed = HashKeys(seed, epoch, index);
  ctx.scratch = &scratch;
  ctx.values = values;
  ctx.rows = rows;
  PointAugmentOp op(spec, 2, 0, 0);
  out.status = op.Run(ctx);
  const auto* v = std::get_if<PointsView>(&values[0]);
  EXPECT_NE(v, nullptr);
  if (v != nullptr) {
    EXPECT_NE(v->data, in.data()) << "a new cloud, the input left alone";
    out.points.assign(v->data, v->data + v->count * v->channels);
  }
  return out;
}

TEST(PointAugment, SameSampleKeySameCloudAndANewEpochDiffers) {
  const PointAugmentSpec spec;
  const Augmented a = Augment(spec, 5, 0, 17);
  ASSERT_TRUE(a.status.ok());
  EXPECT_EQ(Augment(spec, 5, 0, 17).points, a.points);
  EXPECT_EQ(Augment(spec, 5, 0, 17).transform, a.transform);
  EXPECT_NE(Augment(spec, 5, 1, 17).points, a.points) << "another epoch";
  EXPECT_NE(Augment(spec, 5, 0, 18).points, a.points) << "another sample";
  EXPECT_NE(Augment(spec, 6, 0, 17).points, a.points) << "another seed";
}

TEST(PointAugment, RotationAndFlipsPreserveNormsAndScalingScalesThem) {
  PointAugmentSpec spec;
  spec.rotation_degrees = {-180, 180};
  spec.flip_x = 0.5;
  spec.scale = {1, 1};
  const std::vector<float> in = Cloud();
  for (uint64_t index = 0; index < 20; ++index) {
    const Augmented a = Augment(spec, 1, 0, index);
    ASSERT_EQ(a.points.size(), in.size());
    for (size_t i = 0; i < in.size(); i += 4) {
      EXPECT_NEAR(std::hypot(a.points[i], a.points[i + 1]), std::hypot(in[i], in[i + 1]), 1e-4);
      EXPECT_EQ(a.points[i + 2], in[i + 2]) << "z unchanged";
      EXPECT_EQ(a.points[i + 3], in[i + 3]) << "intensity unchanged";
    }
  }
  spec.scale = {2, 2};
  const Augmented a = Augment(spec, 1, 0, 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    EXPECT_NEAR(std::hypot(a.points[i], a.points[i + 1], a.points[i + 2]),
                2 * std::hypot(in[i], in[i + 1], in[i + 2]), 1e-4);
  }
}

TEST(PointAugment, TheTransformWrittenIsTheOneApplied) {
  PointAugmentSpec spec;
  spec.flip_x = 0.5;
  const std::vector<float> in = Cloud();
  for (uint64_t index = 0; index < 10; ++index) {
    const Augmented a = Augment(spec, 9, 2, index);
    const std::vector<float>& m = a.transform;
    for (size_t i = 0; i < in.size(); i += 4) {
      for (int r = 0; r < 3; ++r) {
        const float want = m[r * 3] * in[i] + m[r * 3 + 1] * in[i + 1] + m[r * 3 + 2] * in[i + 2];
        EXPECT_NEAR(a.points[i + r], want, 1e-5);
      }
    }
  }
}

TEST(PointAugment, FlipsAndAnglesFollowTheirParameters) {
  // No rotation, no scaling, always flip y: (x, y) -> (x, -y).
  PointAugmentSpec spec;
  spec.rotation_degrees = {0, 0};
  spec.scale = {1, 1};
  spec.flip_y = 1;
  const std::vector<float> in = Cloud();
  Augmented a = Augment(spec, 3, 0, 0);
  for (size_t i = 0; i < in.size(); i += 4) {
    EXPECT_EQ(a.points[i], in[i]);
    EXPECT_EQ(a.points[i + 1], -in[i + 1]);
  }
  // Rotation only, a fixed 90 degrees: (x, y) -> (-y, x).
  spec.flip_y = 0;
  spec.rotation_degrees = {90, 90};
  a = Augment(spec, 3, 0, 0);
  for (size_t i = 0; i < in.size(); i += 4) {
    EXPECT_NEAR(a.points[i], -in[i + 1], 1e-5);
    EXPECT_NEAR(a.points[i + 1], in[i], 1e-5);
  }
  // Random angles spread over the range: some of each sign over 100 samples.
  spec.rotation_degrees = {-30, 30};
  int positive = 0;
  for (uint64_t index = 0; index < 100; ++index) {
    const Augmented r = Augment(spec, 3, 0, index);
    const double angle = std::atan2(r.transform[3], r.transform[0]) * 180 / M_PI;
    EXPECT_LE(std::abs(angle), 30.0001);
    positive += angle > 0;
  }
  EXPECT_GT(positive, 25);
  EXPECT_LT(positive, 75);
}

TEST(PointAugment, ValidateNamesTheKey) {
  PointAugmentSpec spec;
  EXPECT_TRUE(PointAugmentOp::Validate(spec, "p").ok());
  spec.scale = {0, 1};
  EXPECT_NE(PointAugmentOp::Validate(spec, "p").message().find("p.scale"), std::string::npos);
  spec = {};
  spec.flip_y = 2;
  EXPECT_NE(PointAugmentOp::Validate(spec, "p").message().find("p.flip_y"), std::string::npos);
  spec = {};
  spec.rotation_degrees = {10, -10};
  EXPECT_NE(PointAugmentOp::Validate(spec, "p").message().find("p.rotation_degrees"),
            std::string::npos);
}

}  // namespace
}  // namespace headrace
