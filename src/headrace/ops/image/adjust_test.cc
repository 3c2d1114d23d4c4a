#include "headrace/ops/image/adjust.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "headrace/ops/image/image_test_util.h"

namespace headrace {
namespace {

using testing::MakeImage;
using testing::Pixel;
using testing::PixelsOf;

Image Colorful(int channels) {
  return MakeImage(23, 17, channels,
                   [](int x, int y, int c) { return (x * 11 + y * 7 + c * 85 + x * y) & 0xFF; });
}

Image Output(ImageView like) { return *Image::Allocate(like.width, like.height, like.channels); }

TEST(Adjust, Gray601MatchesPilForPrimariesAndRoundsToNearest) {
  EXPECT_EQ(Gray601(255, 0, 0), 76);    // 0.299 * 255 = 76.24
  EXPECT_EQ(Gray601(0, 255, 0), 150);   // 0.587 * 255 = 149.69
  EXPECT_EQ(Gray601(0, 0, 255), 29);    // 0.114 * 255 = 29.07
  EXPECT_EQ(Gray601(255, 255, 255), 255);
  EXPECT_EQ(Gray601(0, 0, 0), 0);
  EXPECT_EQ(Gray601(10, 200, 30), 124);  // 2.99 + 117.4 + 3.42 = 123.81
}

TEST(Adjust, BrightnessOneIsIdentityAndScalesWithTruncation) {
  for (int channels : {1, 3, 4}) {
    const Image src = Colorful(channels);
    Image out = Output(src.view());
    ASSERT_TRUE(AdjustBrightnessInto(src.view(), out.mutable_view(), 1.0f).ok());
    EXPECT_EQ(PixelsOf(out.view()), PixelsOf(src.view())) << channels;
    ASSERT_TRUE(AdjustBrightnessInto(src.view(), out.mutable_view(), 0.5f).ok());
    for (int x = 0; x < 23; ++x) {
      const uint8_t* s = Pixel(src.view(), x, 3);
      const uint8_t* d = Pixel(out.view(), x, 3);
      for (int c = 0; c < std::min(channels, 3); ++c) ASSERT_EQ(d[c], s[c] / 2);
      if (channels == 4) {
        ASSERT_EQ(d[3], s[3]);  // X copied
      }
    }
  }
  // Bright factors saturate at 255.
  const Image white = MakeImage(2, 2, 3, [](int, int, int) { return 200; });
  Image out = Output(white.view());
  ASSERT_TRUE(AdjustBrightnessInto(white.view(), out.mutable_view(), 1.9f).ok());
  EXPECT_EQ(Pixel(out.view(), 1, 1)[0], 255);
}

TEST(Adjust, ContrastZeroGivesTheMeanGrey) {
  const Image src = Colorful(4);
  double sum = 0;
  for (int y = 0; y < 17; ++y) {
    for (int x = 0; x < 23; ++x) {
      const uint8_t* p = Pixel(src.view(), x, y);
      sum += Gray601(p[0], p[1], p[2]);
    }
  }
  const double mean = sum / (23 * 17);
  EXPECT_NEAR(MeanGray(src.view()), mean, 1e-9);
  Image out = Output(src.view());
  ASSERT_TRUE(AdjustContrastInto(src.view(), out.mutable_view(), 0.0f).ok());
  for (int y = 0; y < 17; ++y) {
    for (int x = 0; x < 23; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(Pixel(out.view(), x, y)[c], static_cast<int>(mean)) << x << "," << y;
      }
    }
  }
  ASSERT_TRUE(AdjustContrastInto(src.view(), out.mutable_view(), 1.0f).ok());
  EXPECT_EQ(PixelsOf(out.view()), PixelsOf(src.view()));
}

TEST(Adjust, SaturationZeroEqualsGrayscaleAndOneIsIdentity) {
  for (int channels : {3, 4}) {
    const Image src = Colorful(channels);
    Image desat = Output(src.view());
    Image gray = Output(src.view());
    ASSERT_TRUE(AdjustSaturationInto(src.view(), desat.mutable_view(), 0.0f).ok());
    ASSERT_TRUE(GrayscaleInto(src.view(), gray.mutable_view()).ok());
    EXPECT_EQ(PixelsOf(desat.view()), PixelsOf(gray.view()));
    ASSERT_TRUE(AdjustSaturationInto(src.view(), desat.mutable_view(), 1.0f).ok());
    EXPECT_EQ(PixelsOf(desat.view()), PixelsOf(src.view()));
  }
}

TEST(Adjust, HueShiftOfHalfMapsRedToCyanAndGreyStaysGrey) {
  const Image src = MakeImage(3, 1, 3, [](int x, int, int c) -> uint8_t {
    if (x == 0) return c == 0 ? 255 : 0;  // pure red
    if (x == 1) return 128;               // grey
    return c == 1 ? 255 : 0;              // pure green
  });
  Image out = Output(src.view());
  ASSERT_TRUE(AdjustHueInto(src.view(), out.mutable_view(), 0.5f).ok());
  const uint8_t* red = Pixel(out.view(), 0, 0);
  EXPECT_EQ(red[0], 0);
  EXPECT_EQ(red[1], 255);
  EXPECT_EQ(red[2], 255);
  const uint8_t* grey = Pixel(out.view(), 1, 0);
  EXPECT_EQ(grey[0], 128);
  EXPECT_EQ(grey[1], 128);
  EXPECT_EQ(grey[2], 128);
  const uint8_t* magenta = Pixel(out.view(), 2, 0);  // green + half a turn
  EXPECT_EQ(magenta[0], 255);
  EXPECT_EQ(magenta[1], 0);
  EXPECT_EQ(magenta[2], 255);
  // A third of a turn: red -> green; -1/3: red -> blue.
  ASSERT_TRUE(AdjustHueInto(src.view(), out.mutable_view(), 1.0f / 3).ok());
  EXPECT_EQ(Pixel(out.view(), 0, 0)[1], 255);
  EXPECT_EQ(Pixel(out.view(), 0, 0)[0], 0);
  ASSERT_TRUE(AdjustHueInto(src.view(), out.mutable_view(), -1.0f / 3).ok());
  EXPECT_EQ(Pixel(out.view(), 0, 0)[2], 255);
  EXPECT_EQ(Pixel(out.view(), 0, 0)[0], 0);
}

TEST(Adjust, HueZeroKeepsEveryColour) {
  const Image src = Colorful(3);
  Image out = Output(src.view());
  ASSERT_TRUE(AdjustHueInto(src.view(), out.mutable_view(), 0.0f).ok());
  EXPECT_EQ(PixelsOf(out.view()), PixelsOf(src.view()));
  EXPECT_FALSE(AdjustHueInto(src.view(), out.mutable_view(), 0.6f).ok());
}

TEST(Adjust, KernelsRunInPlace) {
  const Image src = Colorful(3);
  Image expected = Output(src.view());
  ASSERT_TRUE(AdjustSaturationInto(src.view(), expected.mutable_view(), 0.3f).ok());
  Image in_place = Colorful(3);
  ASSERT_TRUE(AdjustSaturationInto(in_place.view(), in_place.mutable_view(), 0.3f).ok());
  EXPECT_EQ(PixelsOf(in_place.view()), PixelsOf(expected.view()));
}

TEST(Adjust, GrayscaleToOneChannel) {
  const Image src = MakeImage(4, 2, 4, [](int x, int, int c) { return c == 0 ? x * 60 : 10; });
  Image out = *Image::Allocate(4, 2, 1);
  ASSERT_TRUE(GrayscaleInto(src.view(), out.mutable_view()).ok());
  for (int x = 0; x < 4; ++x) EXPECT_EQ(Pixel(out.view(), x, 1)[0], Gray601(x * 60, 10, 10));
}

TEST(Adjust, MismatchedShapesAreErrors) {
  const Image src = Colorful(3);
  Image other = *Image::Allocate(5, 5, 3);
  EXPECT_EQ(AdjustBrightnessInto(src.view(), other.mutable_view(), 1.0f).code(),
            StatusCode::kInvalidArgument);
  std::vector<uint8_t> bytes(23 * 17 * 2);
  const MutableImageView two{bytes.data(), 23, 17, 2, 46};
  EXPECT_FALSE(AdjustContrastInto(two, two, 1.0f).ok());
}

}  // namespace
}  // namespace headrace
