#include "headrace/ops/image/rand_augment.h"

#include <cmath>
#include <set>

#include "gtest/gtest.h"
#include "headrace/ops/image/adjust.h"
#include "headrace/ops/image/image_test_util.h"

namespace headrace {
namespace {

using testing::MakeImage;
using testing::Pixel;
using testing::PixelsOf;

Image Colorful(int w = 24, int h = 20, int channels = 3) {
  return MakeImage(w, h, channels,
                   [](int x, int y, int c) { return (x * 13 + y * 29 + c * 77 + x * y) & 0xFF; });
}

Image Apply(ImageView src, RandAugmentStep step,
            WarpInterpolation interpolation = WarpInterpolation::kNearest, uint8_t fill = 0) {
  Image out = *Image::Allocate(src.width, src.height, src.channels);
  const Status st = ApplyRandAugmentStep(src, out.mutable_view(), step, interpolation, fill);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

TEST(RandAugment, SolarizeInvertsAtAndAboveTheThreshold) {
  const Image src = MakeImage(256, 1, 3, [](int x, int, int) { return x; });
  const Image out = Apply(src.view(), {RandAugmentKind::kSolarize, 128.0f});
  for (int v = 0; v < 256; ++v) ASSERT_EQ(Pixel(out.view(), v, 0)[1], v >= 128 ? 255 - v : v);
}

TEST(RandAugment, PosterizeKeepsTheHighBits) {
  const Image src = MakeImage(256, 1, 4, [](int x, int, int c) { return c == 3 ? 9 : x; });
  const Image out = Apply(src.view(), {RandAugmentKind::kPosterize, 3.0f});
  for (int v = 0; v < 256; ++v) ASSERT_EQ(Pixel(out.view(), v, 0)[0], v & 0xE0);
  EXPECT_EQ(Pixel(out.view(), 77, 0)[3], 9);  // X copied
}

TEST(RandAugment, AutoContrastStretchesEachChannel) {
  // Channel 0 spans [50, 150]; channel 1 is flat (left as is); channel 2 spans [0, 255].
  const Image src = MakeImage(101, 1, 3, [](int x, int, int c) {
    return c == 0 ? 50 + x : c == 1 ? 90 : (x * 255) / 100;
  });
  const Image out = Apply(src.view(), {RandAugmentKind::kAutoContrast, 0});
  EXPECT_EQ(Pixel(out.view(), 0, 0)[0], 0);
  EXPECT_EQ(Pixel(out.view(), 100, 0)[0], 255);
  EXPECT_EQ(Pixel(out.view(), 50, 0)[0], 127);  // 50 * 2.55, truncated
  EXPECT_EQ(Pixel(out.view(), 30, 0)[1], 90);
  for (int x = 0; x <= 100; ++x) ASSERT_EQ(Pixel(out.view(), x, 0)[2], Pixel(src.view(), x, 0)[2]);
}

TEST(RandAugment, EqualizeSpreadsTwoLevelsAndKeepsAFlatHistogram) {
  const Image two = MakeImage(30, 34, 3, [](int x, int, int) { return x < 15 ? 10 : 20; });
  const Image out = Apply(two.view(), {RandAugmentKind::kEqualize, 0});
  EXPECT_EQ(Pixel(out.view(), 0, 0)[0], 0);
  EXPECT_EQ(Pixel(out.view(), 29, 0)[0], 255);
  // Every value once: already equal, unchanged.
  const Image flat = MakeImage(16, 16, 3, [](int x, int y, int) { return y * 16 + x; });
  EXPECT_EQ(PixelsOf(Apply(flat.view(), {RandAugmentKind::kEqualize, 0}).view()),
            PixelsOf(flat.view()));
}

TEST(RandAugment, SharpnessOneIsIdentityAndZeroIsTheSmoothedInterior) {
  const Image src = Colorful();
  EXPECT_EQ(PixelsOf(Apply(src.view(), {RandAugmentKind::kSharpness, 0.0f}).view()),
            PixelsOf(src.view()));  // magnitude 0: factor 1
  const Image smooth = Apply(src.view(), {RandAugmentKind::kSharpness, -1.0f});  // factor 0
  for (int y = 0; y < 20; ++y) {
    for (int x = 0; x < 24; ++x) {
      for (int c = 0; c < 3; ++c) {
        int expected = Pixel(src.view(), x, y)[c];
        if (x > 0 && y > 0 && x < 23 && y < 19) {
          int sum = 0;
          for (int dy = -1; dy <= 1; ++dy) {
            for (int dx = -1; dx <= 1; ++dx) {
              sum += Pixel(src.view(), x + dx, y + dy)[c] * (dx == 0 && dy == 0 ? 5 : 1);
            }
          }
          expected = static_cast<int>(std::nearbyint(sum / 13.0));
        }
        ASSERT_EQ(Pixel(smooth.view(), x, y)[c], expected) << x << "," << y;
      }
    }
  }
}

TEST(RandAugment, TranslateMovesWholePixelsAndFills) {
  const Image src = Colorful();
  const Image right = Apply(src.view(), {RandAugmentKind::kTranslateX, 3.0f},
                            WarpInterpolation::kNearest, 200);
  const Image up = Apply(src.view(), {RandAugmentKind::kTranslateY, -2.0f});
  for (int y = 0; y < 20; ++y) {
    for (int x = 0; x < 24; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(Pixel(right.view(), x, y)[c], x < 3 ? 200 : Pixel(src.view(), x - 3, y)[c]);
        ASSERT_EQ(Pixel(up.view(), x, y)[c], y >= 18 ? 0 : Pixel(src.view(), x, y + 2)[c]);
      }
    }
  }
  // Bilinear at whole pixels is the same warp.
  EXPECT_EQ(PixelsOf(Apply(src.view(), {RandAugmentKind::kTranslateX, 3.0f},
                           WarpInterpolation::kBilinear, 200)
                         .view()),
            PixelsOf(right.view()));
}

TEST(RandAugment, RotateIsCounterClockwiseAboutTheCentre) {
  const Image src = Colorful(16, 16, 4);
  const Image out = Apply(src.view(), {RandAugmentKind::kRotate, 90.0f});
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 16; ++x) {
      for (int c = 0; c < 4; ++c) {
        ASSERT_EQ(Pixel(out.view(), x, y)[c], Pixel(src.view(), 15 - y, x)[c]) << x << "," << y;
      }
    }
  }
}

TEST(RandAugment, ShearXIsAboutTheTopLeftCorner) {
  // torchvision's ShearX (center [0, 0]): dst(x, y) = src(x + m (y + 1/2), y).
  const Image src = Colorful(40, 10);
  const Image out = Apply(src.view(), {RandAugmentKind::kShearX, 2.0f});
  for (int y = 0; y < 10; ++y) {
    for (int x = 0; x < 40; ++x) {
      const int sx = x + 2 * y + 1;
      ASSERT_EQ(Pixel(out.view(), x, y)[0], sx < 40 ? Pixel(src.view(), sx, y)[0] : 0)
          << x << "," << y;
    }
  }
}

TEST(RandAugment, BilinearWarpIsCloseToNearestForSmallAngles) {
  const Image src = MakeImage(32, 32, 3, [](int x, int y, int) { return 4 * x + 2 * y; });
  const Image bilinear =
      Apply(src.view(), {RandAugmentKind::kRotate, 5.0f}, WarpInterpolation::kBilinear);
  // A linear ramp stays a ramp: the centre keeps its value.
  EXPECT_NEAR(Pixel(bilinear.view(), 16, 16)[0], Pixel(src.view(), 16, 16)[0], 3);
}

TEST(RandAugment, DrawFollowsTorchvisionsMagnitudes) {
  const RandAugmentSpec spec{.num_ops = 2, .magnitude = 9};
  std::set<int> kinds;
  std::set<float> rotations, translations;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    Rng rng(seed);
    RandAugmentStep steps[4];
    ASSERT_EQ(DrawRandAugment(spec, 224, 100, rng, steps), 2);
    for (int i = 0; i < 2; ++i) {
      const auto [kind, m] = steps[i];
      kinds.insert(static_cast<int>(kind));
      switch (kind) {
        case RandAugmentKind::kPosterize: EXPECT_EQ(m, 7.0f); break;     // 8 - round(1.2)
        case RandAugmentKind::kSolarize: EXPECT_FLOAT_EQ(m, 178.5f); break;  // 255 * 0.7
        case RandAugmentKind::kRotate: rotations.insert(m); break;
        case RandAugmentKind::kTranslateX: translations.insert(m); break;
        case RandAugmentKind::kBrightness: EXPECT_NEAR(std::abs(m), 0.27f, 1e-6); break;
        case RandAugmentKind::kShearY: EXPECT_NEAR(std::abs(m), 0.09f, 1e-6); break;
        default: break;
      }
    }
  }
  EXPECT_EQ(kinds.size(), static_cast<size_t>(kRandAugmentKinds));
  EXPECT_EQ(rotations, (std::set<float>{-9.0f, 9.0f}));
  EXPECT_EQ(translations, (std::set<float>{-30.0f, 30.0f}));  // int(150/331 * 224 * 0.3)
}

testing::Bytes Augment(const RandAugmentSpec& spec, ImageView src, uint64_t seed, uint64_t epoch,
                       uint64_t index) {
  testing::TestContext t(HashKeys(seed, epoch, index));
  t.SetImage(src);
  const Status st = RandAugmentOp(spec, 2, testing::TestContext::kImageSlot).Run(t.ctx);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return PixelsOf(t.image());
}

TEST(RandAugmentOp, SameSampleKeyGivesIdenticalBytesAndAnotherEpochDiffers) {
  const Image src = Colorful(48, 40, 4);
  for (auto interpolation : {WarpInterpolation::kNearest, WarpInterpolation::kBilinear}) {
    const RandAugmentSpec spec{.num_ops = 3, .magnitude = 12, .interpolation = interpolation};
    int differ = 0;
    for (uint64_t index = 0; index < 30; ++index) {
      const auto first = Augment(spec, src.view(), 9, 2, index);
      EXPECT_EQ(Augment(spec, src.view(), 9, 2, index), first);
      differ += Augment(spec, src.view(), 9, 5, index) != first;
    }
    EXPECT_GE(differ, 27);
  }
}

TEST(RandAugmentOp, NoOpsLeavesTheImage) {
  const Image src = Colorful();
  testing::TestContext t;
  t.SetImage(src.view());
  ASSERT_TRUE(RandAugmentOp(RandAugmentSpec{.num_ops = 0}, 0, testing::TestContext::kImageSlot)
                  .Run(t.ctx)
                  .ok());
  EXPECT_EQ(t.image().data, src.view().data);
  EXPECT_EQ(t.ctx.next_scratch, 0);
}

TEST(RandAugmentOp, ChainsStepsLikeApplyingThemOneByOne) {
  const Image src = Colorful(30, 22, 4);
  const RandAugmentSpec spec{.num_ops = 4, .magnitude = 20};
  for (uint64_t seed = 0; seed < 40; ++seed) {
    testing::TestContext t(seed);
    t.SetImage(src.view());
    ASSERT_TRUE(RandAugmentOp(spec, 1, testing::TestContext::kImageSlot).Run(t.ctx).ok());
    Rng rng = t.ctx.OpRng(1);
    RandAugmentStep steps[4];
    DrawRandAugment(spec, 30, 22, rng, steps);
    Image cur = Colorful(30, 22, 4);
    for (const auto& step : steps) cur = Apply(cur.view(), step);
    ASSERT_EQ(PixelsOf(t.image()), PixelsOf(cur.view())) << seed;
  }
}

TEST(RandAugmentOp, ValidatesItsParameters) {
  const std::string key = "image.rand_augment";
  EXPECT_TRUE(RandAugmentOp::Validate(RandAugmentSpec{}, key).ok());
  EXPECT_NE(RandAugmentOp::Validate(RandAugmentSpec{.magnitude = 31}, key).message().find(
                "magnitude"),
            std::string::npos);
  EXPECT_FALSE(RandAugmentOp::Validate(RandAugmentSpec{.num_ops = 17}, key).ok());
  EXPECT_FALSE(RandAugmentOp::Validate(RandAugmentSpec{.fill = 256}, key).ok());
  EXPECT_FALSE(RandAugmentOp::Validate(
                   RandAugmentSpec{.interpolation = static_cast<WarpInterpolation>(7)}, key)
                   .ok());
}

}  // namespace
}  // namespace headrace
