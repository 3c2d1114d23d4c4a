#include "headrace/ops/image/gaussian_blur.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "headrace/ops/image/image_test_util.h"

namespace headrace {
namespace {

using testing::MakeImage;
using testing::Pixel;
using testing::PixelsOf;

std::vector<float> Kernel(int size, double sigma) {
  std::vector<float> k(static_cast<size_t>(size));
  GaussianKernel1d(sigma, k);
  return k;
}

TEST(GaussianBlur, KernelIsTorchvisionsNormalisedAndSymmetric) {
  const auto k = Kernel(5, 1.0);
  // torchvision: exp(-x^2 / 2) at -2..2, normalised.
  const double raw[5] = {std::exp(-2.0), std::exp(-0.5), 1.0, std::exp(-0.5), std::exp(-2.0)};
  const double sum = std::accumulate(raw, raw + 5, 0.0);
  for (int j = 0; j < 5; ++j) EXPECT_NEAR(k[j], raw[j] / sum, 1e-7);
  EXPECT_EQ(k[0], k[4]);
  EXPECT_EQ(k[1], k[3]);
}

TEST(GaussianBlur, ReflectMirrorsWithoutRepeatingTheEdge) {
  EXPECT_EQ(ReflectIndex(-1, 5), 1);
  EXPECT_EQ(ReflectIndex(-2, 5), 2);
  EXPECT_EQ(ReflectIndex(5, 5), 3);
  EXPECT_EQ(ReflectIndex(6, 5), 2);
  EXPECT_EQ(ReflectIndex(2, 5), 2);
  EXPECT_EQ(ReflectIndex(-7, 3), 1);  // periodic beyond one reflection
  EXPECT_EQ(ReflectIndex(4, 1), 0);
}

TEST(GaussianBlur, ConstantImageStaysConstant) {
  for (int channels : {1, 3, 4}) {
    const Image src = MakeImage(20, 9, channels, [](int, int, int c) { return 37 + c * 60; });
    Image out = *Image::Allocate(20, 9, channels);
    ASSERT_TRUE(GaussianBlurInto(src.view(), out.mutable_view(), Kernel(7, 1.7)).ok());
    EXPECT_EQ(PixelsOf(out.view()), PixelsOf(src.view())) << channels;
  }
}

TEST(GaussianBlur, ImpulseKeepsItsMassAndIsSymmetric) {
  const int n = 21, c = 10;
  const Image src = MakeImage(n, n, 3, [](int x, int y, int) { return x == c && y == c ? 255 : 0; });
  Image out = *Image::Allocate(n, n, 3);
  const auto k = Kernel(9, 1.5);
  ASSERT_TRUE(GaussianBlurInto(src.view(), out.mutable_view(), k).ok());
  int mass = 0;
  for (int y = 0; y < n; ++y) {
    for (int x = 0; x < n; ++x) {
      const uint8_t v = Pixel(out.view(), x, y)[0];
      mass += v;
      // Mirror symmetric on both axes and the diagonal.
      ASSERT_EQ(v, Pixel(out.view(), 2 * c - x, y)[0]) << x << "," << y;
      ASSERT_EQ(v, Pixel(out.view(), x, 2 * c - y)[0]) << x << "," << y;
      ASSERT_EQ(v, Pixel(out.view(), y, x)[0]) << x << "," << y;
      // Every channel the same.
      ASSERT_EQ(v, Pixel(out.view(), x, y)[2]);
    }
  }
  // 81 rounded taps: within half a level each of 255.
  EXPECT_NEAR(mass, 255, 81 / 2);
  // The centre is 255 * k[4]^2, rounded.
  EXPECT_EQ(Pixel(out.view(), c, c)[0], static_cast<int>(std::nearbyint(255.0f * k[4] * k[4])));
  EXPECT_GT(Pixel(out.view(), c, c)[0], Pixel(out.view(), c + 1, c)[0]);
}

TEST(GaussianBlur, MatchesADirect2dReference) {
  const Image src = MakeImage(13, 11, 3, [](int x, int y, int ch) { return (x * 31 + y * 17 * ch) & 0xFF; });
  Image out = *Image::Allocate(13, 11, 3);
  const auto k = Kernel(5, 0.9);
  ASSERT_TRUE(GaussianBlurInto(src.view(), out.mutable_view(), k).ok());
  for (int y = 0; y < 11; ++y) {
    for (int x = 0; x < 13; ++x) {
      for (int ch = 0; ch < 3; ++ch) {
        double v = 0;
        for (int j = 0; j < 5; ++j) {
          for (int i = 0; i < 5; ++i) {
            v += static_cast<double>(k[j]) * k[i] *
                 Pixel(src.view(), ReflectIndex(x + i - 2, 13), ReflectIndex(y + j - 2, 11))[ch];
          }
        }
        ASSERT_NEAR(Pixel(out.view(), x, y)[ch], v, 0.5 + 1e-3) << x << "," << y;
      }
    }
  }
}

// The bytes are the scalar definition's on every CPU: per tap, sum += k[j] * x in float,
// vertical then horizontal, rounded half to even (the AVX2 passes must agree exactly).
TEST(GaussianBlur, EqualsTheScalarDefinitionBitForBit) {
  for (int channels : {1, 3, 4}) {
    const int w = 45, h = 9;  // 45 * channels: SIMD blocks and a scalar tail
    const Image src = MakeImage(w, h, channels, [](int x, int y, int c) {
      return (x * 37 + y * 91 + c * 53 + x * x * y) & 0xFF;
    });
    Image out = *Image::Allocate(w, h, channels);
    const auto k = Kernel(7, 1.3);
    ASSERT_TRUE(GaussianBlurInto(src.view(), out.mutable_view(), k).ok());
    const int n = w * channels;
    std::vector<float> vertical(static_cast<size_t>(n));
    for (int y = 0; y < h; ++y) {
      for (int i = 0; i < n; ++i) {
        float sum = 0.0f;
        for (int j = 0; j < 7; ++j) {
          sum += k[j] * static_cast<float>(src.view().row(ReflectIndex(y - 3 + j, h))[i]);
        }
        vertical[i] = sum;
      }
      for (int x = 0; x < w; ++x) {
        for (int c = 0; c < channels; ++c) {
          float sum = 0.0f;
          for (int j = 0; j < 7; ++j) {
            sum += k[j] * vertical[ReflectIndex(x - 3 + j, w) * channels + c];
          }
          const int expected = static_cast<int>(std::nearbyint(std::clamp(sum, 0.0f, 255.0f)));
          ASSERT_EQ(Pixel(out.view(), x, y)[c], expected) << channels << ": " << x << "," << y;
        }
      }
    }
  }
}

TEST(GaussianBlur, ImagesSmallerThanTheKernelAreFine) {
  const Image src = MakeImage(1, 2, 4, [](int, int y, int) { return y * 100; });
  Image out = *Image::Allocate(1, 2, 4);
  ASSERT_TRUE(GaussianBlurInto(src.view(), out.mutable_view(), Kernel(9, 2.0)).ok());
  EXPECT_GT(Pixel(out.view(), 0, 0)[0], 0);
  EXPECT_LT(Pixel(out.view(), 0, 1)[0], 100);
}

// The op's output for the sample (seed, epoch, index).
testing::Bytes Blur(const GaussianBlurSpec& spec, ImageView src, uint64_t seed, uint64_t epoch,
                    uint64_t index) {
  testing::TestContext t(HashKeys(seed, epoch, index));
  t.SetImage(src);
  EXPECT_TRUE(GaussianBlurOp(spec, 1, testing::TestContext::kImageSlot).Run(t.ctx).ok());
  return PixelsOf(t.image());
}

TEST(GaussianBlurOp, SigmaIsDrawnPerSampleKey) {
  const Image src = MakeImage(16, 16, 3, [](int x, int y, int) { return (x ^ y) * 16; });
  const GaussianBlurSpec spec{.kernel_size = 7, .sigma = {0.5, 3.0}, .p = 1.0};
  int differ = 0;
  for (uint64_t index = 0; index < 10; ++index) {
    const auto first = Blur(spec, src.view(), 4, 0, index);
    EXPECT_NE(first, PixelsOf(src.view()));  // p = 1 always blurs
    EXPECT_EQ(Blur(spec, src.view(), 4, 0, index), first);
    differ += Blur(spec, src.view(), 4, 1, index) != first;
  }
  EXPECT_GE(differ, 9);
}

TEST(GaussianBlurOp, PZeroIsIdentity) {
  const Image src = MakeImage(8, 8, 4, [](int x, int, int) { return x * 30; });
  testing::TestContext t;
  t.SetImage(src.view());
  const GaussianBlurSpec spec{.kernel_size = 3, .p = 0.0};
  ASSERT_TRUE(GaussianBlurOp(spec, 0, testing::TestContext::kImageSlot).Run(t.ctx).ok());
  EXPECT_EQ(t.image().data, src.view().data);
}

TEST(GaussianBlurOp, ValidatesKernelAndSigma) {
  const std::string key = "image.gaussian_blur";
  EXPECT_TRUE(GaussianBlurOp::Validate(GaussianBlurOp::ExampleSpec(), key).ok());
  EXPECT_NE(GaussianBlurOp::Validate(GaussianBlurSpec{.kernel_size = 4}, key).message().find(
                "kernel_size"),
            std::string::npos);
  EXPECT_FALSE(GaussianBlurOp::Validate(GaussianBlurSpec{}, key).ok());  // required
  EXPECT_FALSE(
      GaussianBlurOp::Validate(GaussianBlurSpec{.kernel_size = 3, .sigma = {0, 1}}, key).ok());
  EXPECT_FALSE(
      GaussianBlurOp::Validate(GaussianBlurSpec{.kernel_size = 3, .sigma = {2, 1}}, key).ok());
}

}  // namespace
}  // namespace headrace
