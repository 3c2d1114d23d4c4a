#include "headrace/ops/image/color_jitter.h"

#include <set>

#include "gtest/gtest.h"
#include "headrace/ops/image/adjust.h"
#include "headrace/ops/image/image_test_util.h"

namespace headrace {
namespace {

using testing::MakeImage;
using testing::PixelsOf;

const ColorJitterSpec kJitter{.brightness = 0.4, .contrast = 0.4, .saturation = 0.4,
                                  .hue = 0.1, .p = 1.0};

Image Colorful() {
  return MakeImage(31, 19, 4, [](int x, int y, int c) { return (x * 9 + y * 5 + c * 70) & 0xFF; });
}

// The op's output for the sample (seed, epoch, index), as the executor keys it.
testing::Bytes Jitter(const ColorJitterSpec& spec, ImageView src, uint64_t seed, uint64_t epoch,
                      uint64_t index, int position = 1) {
  testing::TestContext t(HashKeys(seed, epoch, index));
  t.SetImage(src);
  const Status st = ColorJitterOp(spec, position, testing::TestContext::kImageSlot).Run(t.ctx);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(t.image().channels, src.channels);
  return PixelsOf(t.image());
}

TEST(ColorJitterOp, SameSampleKeyGivesIdenticalBytesAndAnotherEpochDiffers) {
  const Image src = Colorful();
  int differ = 0;
  for (uint64_t index = 0; index < 20; ++index) {
    const auto first = Jitter(kJitter, src.view(), 7, 3, index);
    EXPECT_EQ(Jitter(kJitter, src.view(), 7, 3, index), first);  // a resumed epoch
    differ += Jitter(kJitter, src.view(), 7, 4, index) != first;  // the next epoch
  }
  EXPECT_GE(differ, 19);
}

TEST(ColorJitterOp, PZeroLeavesTheImageAndPOneAlwaysJitters) {
  const Image src = Colorful();
  ColorJitterSpec never = kJitter;
  never.p = 0;
  testing::TestContext t;
  t.SetImage(src.view());
  ASSERT_TRUE(ColorJitterOp(never, 0, testing::TestContext::kImageSlot).Run(t.ctx).ok());
  EXPECT_EQ(t.image().data, src.view().data);
  EXPECT_EQ(t.ctx.next_scratch, 0);
  int changed = 0;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Rng rng(seed);
    EXPECT_EQ(DrawColorJitter(kJitter, rng).count, 4);
    changed += Jitter(kJitter, src.view(), seed, 0, 0) != PixelsOf(src.view());
  }
  EXPECT_GE(changed, 48);
}

TEST(ColorJitterOp, FactorsFollowTorchvisionRangesAndTheOrderIsRandom) {
  std::set<int> first_kinds;
  const ColorJitterSpec spec{.brightness = 1.5, .contrast = 0.2, .saturation = 0, .hue = 0.5};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Rng rng(seed);
    const ColorJitterParams params = DrawColorJitter(spec, rng);
    ASSERT_EQ(params.count, 3);  // saturation 0 is left out
    first_kinds.insert(static_cast<int>(params.steps[0].kind));
    for (int i = 0; i < params.count; ++i) {
      const auto [kind, f] = params.steps[i];
      switch (kind) {
        case ColorJitterParams::Kind::kBrightness:
          EXPECT_GE(f, 0.0f);  // max(0, 1 - 1.5)
          EXPECT_LE(f, 2.5f);
          break;
        case ColorJitterParams::Kind::kContrast:
          EXPECT_GE(f, 0.8f);
          EXPECT_LE(f, 1.2f);
          break;
        case ColorJitterParams::Kind::kHue:
          EXPECT_GE(f, -0.5f);
          EXPECT_LE(f, 0.5f);
          break;
        case ColorJitterParams::Kind::kSaturation: ADD_FAILURE() << "saturation is off"; break;
      }
    }
  }
  EXPECT_EQ(first_kinds.size(), 3u);
}

TEST(ColorJitterOp, OnlyBrightnessMatchesTheKernel) {
  const Image src = Colorful();
  const ColorJitterSpec spec{.brightness = 0.5};
  testing::TestContext t(11);
  t.SetImage(src.view());
  ASSERT_TRUE(ColorJitterOp(spec, 2, testing::TestContext::kImageSlot).Run(t.ctx).ok());
  Rng rng = t.ctx.OpRng(2);
  const ColorJitterParams params = DrawColorJitter(spec, rng);
  ASSERT_EQ(params.count, 1);
  Image expected = *Image::Allocate(31, 19, 4);
  ASSERT_TRUE(AdjustBrightnessInto(src.view(), expected.mutable_view(), params.steps[0].factor).ok());
  EXPECT_EQ(PixelsOf(t.image()), PixelsOf(expected.view()));
}

TEST(ColorJitterOp, ValidatesItsParameters) {
  const std::string key = "image.color_jitter";
  EXPECT_TRUE(ColorJitterOp::Validate(kJitter, key).ok());
  auto bad = kJitter;
  bad.hue = 0.6;
  EXPECT_EQ(ColorJitterOp::Validate(bad, key).code(), StatusCode::kInvalidArgument);
  bad = kJitter;
  bad.brightness = -1;
  EXPECT_NE(ColorJitterOp::Validate(bad, key).message().find("brightness"), std::string::npos);
  bad = kJitter;
  bad.p = 2;
  EXPECT_FALSE(ColorJitterOp::Validate(bad, key).ok());
}

}  // namespace
}  // namespace headrace
