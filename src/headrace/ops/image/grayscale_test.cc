#include "headrace/ops/image/grayscale.h"

#include "gtest/gtest.h"
#include "headrace/ops/image/adjust.h"
#include "headrace/ops/image/image_test_util.h"

namespace headrace {
namespace {

using testing::MakeImage;
using testing::Pixel;
using testing::PixelsOf;

TEST(GrayscaleOp, KnownColourGivesThe601ValueInEveryChannel) {
  // (200, 100, 50): 0.299 * 200 + 0.587 * 100 + 0.114 * 50 = 124.2
  for (int channels : {3, 4}) {
    const Image src = MakeImage(5, 3, channels, [](int, int, int c) {
      return c == 0 ? 200 : c == 1 ? 100 : c == 2 ? 50 : 7;
    });
    testing::TestContext t;
    t.SetImage(src.view());
    ASSERT_TRUE(GrayscaleOp(GrayscaleSpec{.p = 1.0}, 0, testing::TestContext::kImageSlot)
                    .Run(t.ctx)
                    .ok());
    ASSERT_EQ(t.image().channels, channels);
    for (int c = 0; c < 3; ++c) EXPECT_EQ(Pixel(t.image(), 4, 2)[c], 124);
    if (channels == 4) {
      EXPECT_EQ(Pixel(t.image(), 4, 2)[3], 7);
    }
  }
}

TEST(GrayscaleOp, OneOutputChannel) {
  const Image src = MakeImage(6, 2, 4, [](int x, int, int c) { return c == 1 ? 255 : x; });
  testing::TestContext t;
  t.SetImage(src.view());
  const GrayscaleSpec spec{.p = 1.0, .num_output_channels = 1};
  ASSERT_TRUE(GrayscaleOp(spec, 0, testing::TestContext::kImageSlot).Run(t.ctx).ok());
  ASSERT_EQ(t.image().channels, 1);
  for (int x = 0; x < 6; ++x) EXPECT_EQ(Pixel(t.image(), x, 1)[0], Gray601(x, 255, x));
}

TEST(GrayscaleOp, PZeroIsIdentityAndHalfConvertsPerSampleKey) {
  const Image src = MakeImage(4, 4, 3, [](int x, int y, int c) { return x * 40 + y + c * 30; });
  testing::TestContext never;
  never.SetImage(src.view());
  ASSERT_TRUE(GrayscaleOp(GrayscaleSpec{.p = 0.0}, 0, testing::TestContext::kImageSlot)
                  .Run(never.ctx)
                  .ok());
  EXPECT_EQ(never.image().data, src.view().data);

  auto converted = [&](uint64_t seed, uint64_t epoch, uint64_t index) {
    testing::TestContext t(HashKeys(seed, epoch, index));
    t.SetImage(src.view());
    EXPECT_TRUE(GrayscaleOp(GrayscaleSpec{.p = 0.5}, 3, testing::TestContext::kImageSlot)
                    .Run(t.ctx)
                    .ok());
    return t.image().data != src.view().data;
  };
  int count = 0, epoch_differs = 0;
  for (uint64_t index = 0; index < 200; ++index) {
    const bool c = converted(1, 0, index);
    EXPECT_EQ(converted(1, 0, index), c);
    count += c;
    epoch_differs += converted(1, 1, index) != c;
  }
  EXPECT_GT(count, 70);
  EXPECT_LT(count, 130);
  EXPECT_GT(epoch_differs, 60);
}

TEST(GrayscaleOp, ValidatesChannelsAndItsProbability) {
  const std::string key = "image.grayscale";
  EXPECT_TRUE(GrayscaleOp::Validate(GrayscaleSpec{}, key).ok());
  EXPECT_FALSE(GrayscaleOp::Validate(GrayscaleSpec{.p = 1.0, .num_output_channels = 2}, key).ok());
  // One channel only when every sample converts.
  const Status st = GrayscaleOp::Validate(GrayscaleSpec{.p = 0.5, .num_output_channels = 1}, key);
  EXPECT_NE(st.message().find("num_output_channels"), std::string::npos) << st.ToString();
  EXPECT_TRUE(GrayscaleOp::Validate(GrayscaleSpec{.p = 1.0, .num_output_channels = 1}, key).ok());
}

}  // namespace
}  // namespace headrace
