#include "headrace/ops/pointcloud/sample.h"

#include <gtest/gtest.h>

#include <vector>

namespace headrace {
namespace {

struct Sampled {
  Status status;
  std::vector<float> row;
  int64_t length = -1;
};

// Samples `n` of `count` points whose intensity is their index.
Sampled Sample(int count, int n, PointSelection select, uint64_t seed = 1) {
  std::vector<float> cloud;
  for (int i = 0; i < count; ++i) cloud.insert(cloud.end(), {1.0f * i, 2, 3, float(i)});
  std::vector<Value> values = {PointsView{cloud.data(), count, 4}};
  Sampled out;
  out.row.assign(static_cast<size_t>(n) * 4, -1);
  uint8_t* rows[2] = {reinterpret_cast<uint8_t*>(out.row.data()),
                      reinterpret_cast<uint8_t*>(&out.length)};
  ScratchArena scratch;
  SampleContext ctx;
  ctx.sample_seed = seed;
  ctx.scratch = &scratch;
  ctx.values = values;
  ctx.rows = rows;
  PointSampleSpec spec;
  spec.points = n;
  spec.select = select;
  out.status = PointSampleOp(spec, 0, 0, 0, 1).Run(ctx);
  return out;
}

std::vector<float> Ids(const Sampled& s) {
  std::vector<float> ids;
  for (size_t i = 3; i < s.row.size(); i += 4) ids.push_back(s.row[i]);
  return ids;
}

TEST(PointSample, ASmallerCloudIsPaddedAndFirstTakesAPrefix) {
  Sampled s = Sample(3, 5, PointSelection::kRandom);
  ASSERT_TRUE(s.status.ok());
  EXPECT_EQ(s.length, 3);
  EXPECT_EQ(Ids(s), (std::vector<float>{0, 1, 2, 0, 0}));
  EXPECT_EQ(s.row[4 * 3], 0) << "padding is zero";
  s = Sample(10, 4, PointSelection::kFirst);
  EXPECT_EQ(s.length, 4);
  EXPECT_EQ(Ids(s), (std::vector<float>{0, 1, 2, 3}));
}

TEST(PointSample, RandomSubsetsAreOrderedDistinctSeededAndCoverTheCloud) {
  std::vector<int> hits(50, 0);
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const Sampled s = Sample(50, 10, PointSelection::kRandom, seed);
    ASSERT_EQ(s.length, 10);
    const std::vector<float> ids = Ids(s);
    for (size_t k = 1; k < ids.size(); ++k) ASSERT_LT(ids[k - 1], ids[k]) << "ordered, distinct";
    for (float id : ids) ++hits[static_cast<size_t>(id)];
    EXPECT_EQ(Ids(Sample(50, 10, PointSelection::kRandom, seed)), ids) << "seeded";
  }
  // Each point is kept with probability 1/5: 80 of 400 draws expected.
  for (int h : hits) {
    EXPECT_GT(h, 45);
    EXPECT_LT(h, 120);
  }
}

}  // namespace
}  // namespace headrace
