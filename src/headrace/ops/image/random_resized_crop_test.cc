#include "headrace/ops/image/random_resized_crop.h"

#include <cmath>

#include "gtest/gtest.h"
#include "headrace/ops/image/image_test_util.h"
#include "headrace/ops/image/resize.h"

namespace headrace {
namespace {

using testing::MakeImage;
using testing::PixelsOf;

Image Pattern(int w, int h) {
  return MakeImage(w, h, 4, [](int x, int y, int c) { return (x * 7 + y * 13 + c * 50) & 0xFF; });
}

RandomResizedCropSpec Spec(int w, int h) {
  RandomResizedCropSpec spec;
  spec.width = w;
  spec.height = h;
  return spec;
}

testing::Bytes RunOp(const Image& src, uint64_t seed, const RandomResizedCropSpec& spec,
                     int position = 1) {
  testing::TestContext t(seed);
  t.SetImage(src.view());
  Status status = RandomResizedCropOp(spec, position, testing::TestContext::kImageSlot).Run(t.ctx);
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(t.image().width, spec.width);
  EXPECT_EQ(t.image().height, spec.height);
  return PixelsOf(t.image());
}

TEST(RandomResizedCropOp, SameSeedGivesSameOutput) {
  const Image src = Pattern(320, 240);
  for (uint64_t seed : {1u, 2u, 99u}) {
    EXPECT_EQ(RunOp(src, seed, Spec(64, 48)), RunOp(src, seed, Spec(64, 48)));
  }
}

TEST(RandomResizedCropOp, OutputVariesAcrossSampleSeeds) {
  const Image src = Pattern(320, 240);
  const testing::Bytes first = RunOp(src, 0, Spec(64, 48));
  int different = 0;
  for (uint64_t seed = 1; seed < 10; ++seed) different += RunOp(src, seed, Spec(64, 48)) != first;
  EXPECT_GE(different, 8);
}

TEST(RandomResizedCropOp, OutputSizeIsAlwaysExact) {
  for (auto [w, h] : {std::pair{1, 1}, std::pair{3, 500}, std::pair{500, 3}, std::pair{57, 91}}) {
    const Image src = Pattern(w, h);
    for (uint64_t seed = 0; seed < 20; ++seed) RunOp(src, seed, Spec(32, 24));
  }
}

TEST(RandomResizedCropOp, MatchesWindowFromItsOwnRandomStreamThenResize) {
  const Image src = Pattern(300, 200);
  const uint64_t seed = 1234;
  Rng rng(HashKeys(seed, 5));
  const CropWindow w = RandomResizedCropWindow(300, 200, Spec(50, 40), rng);
  Result<Image> expected =
      Resize(src.view().Crop(w.x, w.y, w.width, w.height), 50, 40, /*antialias=*/true);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(RunOp(src, seed, Spec(50, 40), 5), PixelsOf(expected->view()));
  EXPECT_NE(RunOp(src, seed, Spec(50, 40), 6), PixelsOf(expected->view()));
}

TEST(RandomResizedCropWindow, StaysInsideImageWithinScaleAndRatio) {
  const RandomResizedCropSpec spec = Spec(10, 10);
  int tried = 0;
  for (uint64_t seed = 0; seed < 500; ++seed) {
    Rng rng(seed);
    const CropWindow w = RandomResizedCropWindow(640, 480, spec, rng);
    ASSERT_GE(w.x, 0);
    ASSERT_GE(w.y, 0);
    ASSERT_GE(w.width, 1);
    ASSERT_GE(w.height, 1);
    ASSERT_LE(w.x + w.width, 640);
    ASSERT_LE(w.y + w.height, 480);
    const double area = static_cast<double>(w.width) * w.height / (640.0 * 480.0);
    const double ratio = static_cast<double>(w.width) / w.height;
    // Rounding w and h to integers moves area and ratio slightly past the bounds.
    EXPECT_GE(area, 0.08 * 0.97);
    EXPECT_LE(area, 1.0);
    EXPECT_GE(ratio, 0.75 * 0.97);
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.03);
    ++tried;
  }
  EXPECT_EQ(tried, 500);
}

TEST(RandomResizedCropWindow, FallsBackToCentreCropClampedToRatio) {
  // A 400x100 image cannot hold any window of full area and aspect 1: all ten tries
  // fail, and the fallback clamps the 4:1 image to ratio 1, centred.
  RandomResizedCropSpec spec = Spec(10, 10);
  spec.scale = {1.0, 1.0};
  spec.ratio = {1.0, 1.0};
  Rng rng(3);
  const CropWindow w = RandomResizedCropWindow(400, 100, spec, rng);
  EXPECT_EQ(w.width, 100);
  EXPECT_EQ(w.height, 100);
  EXPECT_EQ(w.x, 150);
  EXPECT_EQ(w.y, 0);
}

TEST(RandomResizedCropOp, RejectsBadSpec) {
  EXPECT_EQ(RandomResizedCropOp::Validate(Spec(0, 10), "image.random_resized_crop").code(),
            StatusCode::kInvalidArgument);
  RandomResizedCropSpec spec = Spec(10, 10);
  spec.scale = {0.5, 0.2};
  EXPECT_EQ(RandomResizedCropOp::Validate(spec, "image.random_resized_crop").code(),
            StatusCode::kInvalidArgument);
  spec = Spec(10, 10);
  spec.ratio = {0.0, 1.0};
  EXPECT_EQ(RandomResizedCropOp::Validate(spec, "image.random_resized_crop").code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(RandomResizedCropOp::Validate(Spec(10, 10), "image.random_resized_crop").ok());
}

}  // namespace
}  // namespace headrace
