#include "headrace/ops/image/flip.h"

#include "gtest/gtest.h"
#include "headrace/ops/image/image_test_util.h"

namespace headrace {
namespace {

using testing::MakeImage;
using testing::Pixel;

TEST(FlipOp, AlwaysFlipsWithPOneAndMirrorsPixels) {
  for (int channels : {3, 4}) {
    const Image src =
        MakeImage(37, 5, channels, [](int x, int y, int c) { return x * 3 + y + c * 100; });
    testing::TestContext t;
    t.SetImage(src.view());
    FlipOp op(FlipSpec{.p = 1.0}, 2, testing::TestContext::kImageSlot);
    EXPECT_EQ(op.name(), "image.flip");
    ASSERT_TRUE(op.Run(t.ctx).ok());
    ASSERT_EQ(t.image().width, 37);
    ASSERT_EQ(t.image().channels, channels);
    EXPECT_NE(t.image().data, src.view().data);
    for (int y = 0; y < 5; ++y) {
      for (int x = 0; x < 37; ++x) {
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(Pixel(t.image(), x, y)[c], Pixel(src.view(), 36 - x, y)[c]);
        }
      }
    }
  }
}

TEST(FlipOp, NeverFlipsWithPZeroAndCopiesNothing) {
  const Image src = MakeImage(8, 8, 4, [](int x, int, int) { return x; });
  testing::TestContext t;
  t.SetImage(src.view());
  ASSERT_TRUE(FlipOp(FlipSpec{.p = 0.0}, 0, testing::TestContext::kImageSlot).Run(t.ctx).ok());
  EXPECT_EQ(t.image().data, src.view().data);
  EXPECT_EQ(t.ctx.next_scratch, 0);
}

// Whether the op flipped the sample with this seed.
bool Flipped(uint64_t seed, int position, double p) {
  const Image src = MakeImage(4, 1, 3, [](int x, int, int) { return x; });
  testing::TestContext t(seed);
  t.SetImage(src.view());
  EXPECT_TRUE(FlipOp(FlipSpec{.p = p}, position, testing::TestContext::kImageSlot).Run(t.ctx).ok());
  return Pixel(t.image(), 0, 0)[0] == 3;
}

TEST(FlipOp, DecisionIsDeterministicPerSampleAndOpPosition) {
  int flips = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const bool flipped = Flipped(seed, 3, 0.5);
    EXPECT_EQ(flipped, Flipped(seed, 3, 0.5));
    EXPECT_EQ(flipped, Rng(HashKeys(seed, 3)).Bernoulli(0.5));  // only OpRng(3) is used
    flips += flipped;
  }
  EXPECT_GT(flips, 140);
  EXPECT_LT(flips, 260);
  int differ = 0;
  for (uint64_t seed = 0; seed < 50; ++seed)
    differ += Flipped(seed, 3, 0.5) != Flipped(seed, 4, 0.5);
  EXPECT_GT(differ, 5);
}

TEST(FlipOp, RejectsProbabilityOutsideUnitInterval) {
  EXPECT_EQ(FlipOp::Validate(FlipSpec{.p = 1.5}, "image.flip").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(FlipOp::Validate(FlipSpec{.p = -0.1}, "image.flip").code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(FlipOp::Validate(FlipSpec{.p = 0.5}, "image.flip").ok());
}

}  // namespace
}  // namespace headrace
