#include "headrace/ops/image/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"
#include "headrace/ops/image/image_test_util.h"

namespace headrace {
namespace {

using testing::MakeImage;
using testing::Pixel;

Image Checkerboard(int w, int h, int channels) {
  return MakeImage(w, h, channels, [](int x, int y, int) { return ((x + y) & 1) ? 255 : 0; });
}

TEST(ResizeOutputSize, ShorterSideKeepsAspectRounded) {
  ResizeSpec spec;
  spec.shorter_side = 256;
  EXPECT_EQ(ResizeOutputSize(spec, 640, 480).width, 341);  // 341.33
  EXPECT_EQ(ResizeOutputSize(spec, 640, 480).height, 256);
  EXPECT_EQ(ResizeOutputSize(spec, 480, 640).width, 256);
  EXPECT_EQ(ResizeOutputSize(spec, 480, 640).height, 341);
  EXPECT_EQ(ResizeOutputSize(spec, 500, 300).width, 427);  // 426.67 rounds up
  EXPECT_EQ(ResizeOutputSize(spec, 300, 300).width, 256);
  EXPECT_EQ(ResizeOutputSize(spec, 100000, 10).height, 256);
}

TEST(ResizeOutputSize, ExactSizeIgnoresInput) {
  ResizeSpec spec;
  spec.width = 100;
  spec.height = 50;
  EXPECT_EQ(ResizeOutputSize(spec, 640, 480).width, 100);
  EXPECT_EQ(ResizeOutputSize(spec, 640, 480).height, 50);
}

TEST(ResizeSpecValidation, NeedsExactlyOneMode) {
  ResizeSpec none;
  EXPECT_EQ(ResizeOp::Validate(none, "image.resize").code(), StatusCode::kInvalidArgument);
  ResizeSpec both;
  both.shorter_side = 10;
  both.width = both.height = 5;
  EXPECT_EQ(ResizeOp::Validate(both, "image.resize").code(), StatusCode::kInvalidArgument);
  ResizeSpec width_only;
  width_only.width = 5;
  EXPECT_EQ(ResizeOp::Validate(width_only, "image.resize").code(), StatusCode::kInvalidArgument);
  ResizeSpec shorter;
  shorter.shorter_side = 10;
  EXPECT_TRUE(ResizeOp::Validate(shorter, "image.resize").ok());
  testing::TestContext t;
  EXPECT_EQ(ResizeOp(none, testing::TestContext::kImageSlot).Run(t.ctx).code(),
            StatusCode::kInvalidArgument);
}

TEST(ResizeInto, AntialiasedDownscaleOfFineCheckerboardIsGrey) {
  for (int channels : {3, 4}) {
    const Image board = Checkerboard(301, 203, channels);
    Result<Image> out = Resize(board.view(), 160, 108, /*antialias=*/true);  // ~1.88x
    ASSERT_TRUE(out.ok());
    double sum = 0;
    for (int y = 0; y < 108; ++y) {
      for (int x = 0; x < 160; ++x) {
        const uint8_t v = Pixel(out->view(), x, y)[1];
        EXPECT_NEAR(v, 127.5, 35) << x << "," << y;
        sum += v;
      }
    }
    EXPECT_NEAR(sum / (160 * 108), 127.5, 2);
    Result<Image> quarter = Resize(board.view(), 75, 50, true);  // ~4x
    ASSERT_TRUE(quarter.ok());
    for (int y = 0; y < 50; ++y) {
      for (int x = 0; x < 75; ++x) EXPECT_NEAR(Pixel(quarter->view(), x, y)[0], 127.5, 12);
    }
  }
}

TEST(ResizeInto, WithoutAntialiasCheckerboardAliases) {
  // The counterpart of the test above: plain bilinear sampling keeps far-from-grey
  // values, so the grey result really comes from the area filter.
  const Image board = Checkerboard(301, 203, 4);
  Result<Image> out = Resize(board.view(), 160, 108, /*antialias=*/false);
  ASSERT_TRUE(out.ok());
  int far = 0;
  for (int y = 0; y < 108; ++y) {
    for (int x = 0; x < 160; ++x) far += std::abs(Pixel(out->view(), x, y)[0] - 127) > 60;
  }
  EXPECT_GT(far, 1000);
}

TEST(ResizeInto, UpscaleIsBilinearWithPixelCentres) {
  const Image src = MakeImage(2, 1, 3, [](int x, int, int) { return x == 0 ? 0 : 255; });
  Result<Image> out = Resize(src.view(), 4, 1, true);
  ASSERT_TRUE(out.ok());
  // Centres map to source x = -0.25, 0.25, 0.75, 1.25 (clamped at the edges).
  EXPECT_EQ(Pixel(out->view(), 0, 0)[0], 0);
  EXPECT_NEAR(Pixel(out->view(), 1, 0)[0], 64, 1);
  EXPECT_NEAR(Pixel(out->view(), 2, 0)[0], 191, 1);
  EXPECT_EQ(Pixel(out->view(), 3, 0)[0], 255);
}

TEST(ResizeInto, FlatColourStaysExactlyFlat) {
  const Image flat = MakeImage(97, 61, 4, [](int, int, int c) { return 17 + 80 * c; });
  for (auto [w, h] : {std::pair{13, 7}, std::pair{200, 150}, std::pair{97, 30}, std::pair{50, 61},
                      std::pair{3, 2}}) {
    Result<Image> out = Resize(flat.view(), w, h, true);
    ASSERT_TRUE(out.ok());
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        for (int c = 0; c < 3; ++c) ASSERT_EQ(Pixel(out->view(), x, y)[c], 17 + 80 * c);
      }
    }
  }
}

TEST(ResizeInto, AreaAverageOfExactBlocks) {
  // 2x2 blocks of values 0, 40, 80, ... downscaled 2x give each block's value.
  const Image src =
      MakeImage(8, 4, 3, [](int x, int y, int) { return (x / 2 + 4 * (y / 2)) * 20; });
  Result<Image> out = Resize(src.view(), 4, 2, true);
  ASSERT_TRUE(out.ok());
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 4; ++x) EXPECT_EQ(Pixel(out->view(), x, y)[0], (x + 4 * y) * 20);
  }
}

TEST(ResizeInto, LongReductionsAreTheSameWhenTheirFiltersAreBuiltAgain) {
  // 2^21 -> 256 (8192 source pixels an output): past 64 taps an axis keeps no tables (an
  // 89,478,485-row PNG's took 1.25 GB and stayed with the thread), and each resize gives
  // the same pixels, each block's exact average (a flat 40 came out 64 when the row
  // pass rounded tap by tap).
  const auto halves = [](int i) { return i < (1 << 20) ? 40 : 200; };
  const Image tall = MakeImage(1, 1 << 21, 3, [&](int, int y, int) { return halves(y); });
  const Image wide = MakeImage(1 << 21, 1, 3, [&](int x, int, int) { return halves(x); });
  const Image flat = MakeImage(97, 61, 3, [](int, int, int c) { return 17 + 80 * c; });
  for (int round = 0; round < 2; ++round) {
    Result<Image> down = Resize(tall.view(), 1, 256, true);
    ASSERT_TRUE(down.ok());
    for (int i = 0; i < 256; ++i) ASSERT_EQ(Pixel(down->view(), 0, i)[0], halves(i * 8192)) << i;
    Result<Image> across = Resize(wide.view(), 256, 1, true);
    ASSERT_TRUE(across.ok());
    for (int i = 0; i < 256; ++i) ASSERT_EQ(Pixel(across->view(), i, 0)[1], halves(i * 8192)) << i;
    Result<Image> ordinary = Resize(flat.view(), 13, 7, true);
    ASSERT_TRUE(ordinary.ok());
    EXPECT_EQ(Pixel(ordinary->view(), 6, 3)[2], 177);
  }
}

// Per-axis weights in double, straight from the definitions: area coverage when
// downscaling, bilinear with half-pixel centres (clamped) otherwise.
std::vector<std::vector<double>> ReferenceWeights(int src_n, int dst_n) {
  std::vector<std::vector<double>> w(dst_n, std::vector<double>(src_n, 0.0));
  const double s = static_cast<double>(src_n) / dst_n;
  for (int i = 0; i < dst_n; ++i) {
    if (dst_n < src_n) {
      for (int j = 0; j < src_n; ++j) {
        const double overlap = std::min((i + 1) * s, j + 1.0) - std::max(i * s, 1.0 * j);
        if (overlap > 0) w[i][j] = overlap / s;
      }
    } else {
      const double c = (i + 0.5) * s - 0.5;
      const int j = static_cast<int>(std::floor(c));
      const double f = c - j;
      w[i][std::clamp(j, 0, src_n - 1)] += 1 - f;
      w[i][std::clamp(j + 1, 0, src_n - 1)] += f;
    }
  }
  return w;
}

TEST(ResizeInto, MatchesFloatingPointReferenceWithinOneLevel) {
  for (int channels : {3, 4}) {
    const Image src = MakeImage(37, 23, channels, [](int x, int y, int c) {
      return static_cast<uint8_t>((x * 97 + y * 61 + c * 89 + x * y * 7) % 256);
    });
    for (auto [w, h] : {std::pair{16, 11}, std::pair{51, 40}, std::pair{21, 45}, std::pair{5, 3},
                        std::pair{37, 23}}) {
      Result<Image> out = Resize(src.view(), w, h, true);
      ASSERT_TRUE(out.ok());
      const auto wx = ReferenceWeights(37, w);
      const auto wy = ReferenceWeights(23, h);
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          for (int c = 0; c < 3; ++c) {
            double v = 0;
            for (int sy = 0; sy < 23; ++sy) {
              for (int sx = 0; sx < 37; ++sx)
                v += wy[y][sy] * wx[x][sx] * Pixel(src.view(), sx, sy)[c];
            }
            ASSERT_NEAR(Pixel(out->view(), x, y)[c], v, 1.0)
                << w << "x" << h << " at " << x << "," << y << " channel " << c;
          }
        }
      }
    }
  }
}

// Reductions past 64 taps an axis (ratios the Q14/Q15 tables cannot weigh: one tap's
// rounding times thousands of taps, weights below half a unit) against the same double
// reference, at ratios that are not whole numbers, each axis long alone and both, on
// both kernels' paths.
TEST(ResizeInto, LongReductionsMatchFloatingPointReferenceWithinOneLevel) {
  struct Case {
    int src_w, src_h, dst_w, dst_h;
  };
  for (const Case& k : {Case{1, 100003, 1, 37}, Case{100003, 1, 37, 1}, Case{520, 390, 5, 3},
                        Case{3000, 12, 24, 9}, Case{3, 5000, 9, 10}, Case{13000, 2, 3, 1}}) {
    for (int channels : {3, 4}) {
      const Image src = MakeImage(k.src_w, k.src_h, channels, [](int x, int y, int c) {
        return static_cast<uint8_t>((x * 97 + y * 61 + c * 89 + (x / 7) * (y / 5) * 7) % 256);
      });
      const auto wx = ReferenceWeights(k.src_w, k.dst_w);
      const auto wy = ReferenceWeights(k.src_h, k.dst_h);
      for (bool simd : {true, false}) {
        Result<Image> out = Image::Allocate(k.dst_w, k.dst_h, channels);
        ASSERT_TRUE(out.ok());
        const auto resize = simd ? ResizeInto : internal::ResizeIntoPortable;
        ASSERT_TRUE(resize(src.view(), out->mutable_view(), true).ok());
        for (int y = 0; y < k.dst_h; ++y) {
          for (int x = 0; x < k.dst_w; ++x) {
            for (int c = 0; c < 3; ++c) {
              double v = 0;
              for (int sy = 0; sy < k.src_h; ++sy) {
                if (wy[y][sy] == 0) continue;
                for (int sx = 0; sx < k.src_w; ++sx)
                  v += wy[y][sy] * wx[x][sx] * Pixel(src.view(), sx, sy)[c];
              }
              ASSERT_NEAR(Pixel(out->view(), x, y)[c], v, 1.0)
                  << k.src_w << "x" << k.src_h << "x" << channels << " -> " << k.dst_w << "x"
                  << k.dst_h << " at " << x << "," << y << " channel " << c
                  << (simd ? "" : " (portable)");
            }
          }
        }
      }
    }
  }
}

TEST(ResizeInto, SimdAndPortableKernelsGiveIdenticalPixels) {
  for (int channels : {3, 4}) {
    const Image src = MakeImage(203, 157, channels, [](int x, int y, int c) {
      return static_cast<uint8_t>((x * 31 + y * 17 + c * 101 + (x ^ y) * 3) % 256);
    });
    for (auto [w, h] : {std::pair{97, 61}, std::pair{12, 9}, std::pair{401, 300},
                        std::pair{150, 310}, std::pair{3, 2}}) {
      Image simd = *Image::Allocate(w, h, channels);
      Image portable = *Image::Allocate(w, h, channels);
      ASSERT_TRUE(ResizeInto(src.view(), simd.mutable_view(), true).ok());
      ASSERT_TRUE(internal::ResizeIntoPortable(src.view(), portable.mutable_view(), true).ok());
      ASSERT_EQ(testing::PixelsOf(simd.view()), testing::PixelsOf(portable.view()))
          << w << "x" << h << "x" << channels;
    }
  }
}

TEST(ResizeInto, ThreeAndFourChannelsAgree) {
  auto fn = [](int x, int y, int c) {
    return static_cast<uint8_t>((x * 3 + y * 5 + c * 60) & 0xFF);
  };
  const Image rgb = MakeImage(120, 90, 3, fn);
  const Image rgbx = MakeImage(120, 90, 4, fn);
  for (auto [w, h] : {std::pair{50, 40}, std::pair{300, 100}}) {
    Image a = *Resize(rgb.view(), w, h, true);
    Image b = *Resize(rgbx.view(), w, h, true);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        for (int c = 0; c < 3; ++c) ASSERT_EQ(Pixel(a.view(), x, y)[c], Pixel(b.view(), x, y)[c]);
      }
    }
  }
}

TEST(ResizeInto, ReadsStridedViews) {
  const Image big =
      MakeImage(200, 100, 4, [](int x, int y, int c) { return (x * 7 + y * 3 + c) & 0xFF; });
  const ImageView window = big.view().Crop(30, 20, 90, 60);
  const Image copy =
      MakeImage(90, 60, 4, [&](int x, int y, int c) { return Pixel(window, x, y)[c]; });
  EXPECT_EQ(testing::PixelsOf(Resize(window, 45, 33, true)->view()),
            testing::PixelsOf(Resize(copy.view(), 45, 33, true)->view()));
}

TEST(ResizeInto, RejectsMismatchedChannels) {
  const Image src = MakeImage(10, 10, 3, [](int, int, int) { return 0; });
  Image dst = *Image::Allocate(5, 5, 4);
  EXPECT_EQ(ResizeInto(src.view(), dst.mutable_view(), true).code(), StatusCode::kInvalidArgument);
}

TEST(ResizeOp, ResizesIntoScratchToShorterSide) {
  const Image src = MakeImage(640, 480, 4, [](int x, int, int) { return x & 0xFF; });
  testing::TestContext t;
  t.SetImage(src.view());
  ResizeSpec spec;
  spec.shorter_side = 256;
  ResizeOp op(spec, testing::TestContext::kImageSlot);
  EXPECT_EQ(op.name(), "image.resize");
  ASSERT_TRUE(op.Run(t.ctx).ok());
  EXPECT_EQ(t.image().width, 341);
  EXPECT_EQ(t.image().height, 256);
  EXPECT_EQ(t.image().channels, 4);
  EXPECT_NE(t.image().data, src.view().data);
}

TEST(ResizeOp, LeavesImageOfRequestedSizeUntouched) {
  const Image src = MakeImage(300, 256, 3, [](int, int, int) { return 5; });
  testing::TestContext t;
  t.SetImage(src.view());
  ResizeSpec spec;
  spec.shorter_side = 256;
  ASSERT_TRUE(ResizeOp(spec, testing::TestContext::kImageSlot).Run(t.ctx).ok());
  EXPECT_EQ(t.image().data, src.view().data);
  EXPECT_EQ(t.ctx.next_scratch, 0);
}

}  // namespace
}  // namespace headrace
