#include "headrace/ops/image/smart_resize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "headrace/ops/image/image_test_util.h"

namespace headrace {
namespace smart_resize_test {
namespace {

using testing::MakeImage;
using testing::PixelsOf;

SmartResizeRule Qwen2Rule() { return ResolveSmartResize(SmartResizeSpec{}); }
SmartResizeRule Qwen3Rule() {
  return ResolveSmartResize(SmartResizeSpec{.preset = VisionModel::kQwen3Vl});
}

struct SizeCase {
  int width, height;
  int want_width, want_height;  // factor 28, [3136, 1003520] (the class defaults)
  int want3_width, want3_height;  // qwen3_vl: factor 32, [65536, 16777216]
};

// Expected values from transformers' formula, worked through by hand for the first rows
// (e.g. 42: round(1.5) = 2 (half to even) -> 56; 70: round(2.5) = 2 -> 56, and 56 * 56 is
// not below min_pixels; 1x1: rounds to 0, so beta = sqrt(3136) = 56 and ceil(56 / 28) * 28
// = 56) and confirmed with transformers 5.23's smart_resize; tests/python/
// test_vlm_reference.py compares thousands more sizes with it.
constexpr SizeCase kSizes[] = {
    {1, 1, 56, 56, 256, 256},             // tiny: scaled up to min_pixels
    {10, 10, 56, 56, 256, 256},           // below min_pixels
    {28, 28, 56, 56, 256, 256},           // one factor: 784 < 3136
    {42, 42, 56, 56, 256, 256},           // round half to even (1.5 -> 2)
    {70, 70, 56, 56, 256, 256},           // round half to even (2.5 -> 2)
    {56, 56, 56, 56, 256, 256},           // exactly min_pixels
    {100, 37, 112, 28, 448, 160},         // odd, wide
    {37, 100, 28, 112, 160, 448},         // odd, tall
    {224, 224, 224, 224, 256, 256},       //
    {640, 480, 644, 476, 640, 480},       // rounds to the nearest multiple
    {1023, 767, 1036, 756, 1024, 768},    // odd
    {333, 1001, 336, 1008, 320, 992},     // odd
    {1, 199, 28, 812, 32, 3616},          // aspect 199: 1 pixel wide
    {2, 400, 28, 812, 32, 3648},          // aspect exactly 200: allowed
    {28, 5600, 28, 5600, 32, 5600},       // aspect 200 at a multiple
    {12000, 60, 12012, 56, 12000, 64},    // aspect 200, wide
    {4000, 3000, 1148, 840, 4000, 3008},  // above max_pixels (factor 28)
    {8192, 8192, 980, 980, 4096, 4096},   // huge
    {9000, 9000, 980, 980, 4096, 4096},   // huge
};

TEST(SmartResizeSize, MatchesTransformersOnATableOfSizes) {
  for (const SizeCase& c : kSizes) {
    Result<ImageSize> q2 = SmartResizeSize(c.width, c.height, Qwen2Rule());
    ASSERT_TRUE(q2.ok()) << c.width << "x" << c.height << ": " << q2.status().ToString();
    EXPECT_EQ(q2->width, c.want_width) << c.width << "x" << c.height;
    EXPECT_EQ(q2->height, c.want_height) << c.width << "x" << c.height;
    Result<ImageSize> q3 = SmartResizeSize(c.width, c.height, Qwen3Rule());
    ASSERT_TRUE(q3.ok()) << c.width << "x" << c.height << ": " << q3.status().ToString();
    EXPECT_EQ(q3->width, c.want3_width) << c.width << "x" << c.height;
    EXPECT_EQ(q3->height, c.want3_height) << c.width << "x" << c.height;
  }
}

TEST(SmartResizeSize, SidesAreMultiplesOfTheFactorAndPixelsInRange) {
  const SmartResizeRule rule = Qwen2Rule();
  for (int w = 30; w < 3000; w += 97) {
    for (int h = 30; h < 3000; h += 89) {
      const ImageSize s = *SmartResizeSize(w, h, rule);
      EXPECT_EQ(s.width % 28, 0);
      EXPECT_EQ(s.height % 28, 0);
      EXPECT_LE(int64_t{s.width} * s.height, rule.max_pixels) << w << "x" << h;
      EXPECT_GE(int64_t{s.width} * s.height, rule.min_pixels) << w << "x" << h;
    }
  }
}

TEST(SmartResizeSize, AnAspectRatioAboveTheLimitNamesTheSizeAndTheLimit) {
  Result<ImageSize> s = SmartResizeSize(201, 1, Qwen2Rule());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kPixelLimit);
  EXPECT_NE(s.status().message().find("201x1"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("aspect ratio 201"), std::string::npos);
  EXPECT_NE(s.status().message().find("max_aspect_ratio 200"), std::string::npos);
  EXPECT_FALSE(SmartResizeSize(2, 401, Qwen2Rule()).ok());  // 200.5
  EXPECT_TRUE(SmartResizeSize(2, 400, Qwen2Rule()).ok());   // 200 exactly
  SmartResizeRule strict = Qwen2Rule();
  strict.max_aspect_ratio = 2;
  EXPECT_FALSE(SmartResizeSize(300, 100, strict).ok());
}

TEST(SmartResizeSpec, APresetSetsTheGeometryAndExplicitKeysOverrideIt) {
  const SmartResizeRule q3 = Qwen3Rule();
  EXPECT_EQ(q3.patch_size, 16);
  EXPECT_EQ(q3.merge_size, 2);
  EXPECT_EQ(q3.min_pixels, 65536);
  EXPECT_EQ(q3.max_pixels, 16777216);
  const SmartResizeRule q25 =
      ResolveSmartResize(SmartResizeSpec{.preset = VisionModel::kQwen2_5Vl});
  EXPECT_EQ(q25.factor(), 28);
  EXPECT_EQ(q25.max_pixels, 12845056);
  const SmartResizeRule mixed = ResolveSmartResize(
      SmartResizeSpec{.preset = VisionModel::kQwen3Vl, .max_pixels = 1024 * 1024});
  EXPECT_EQ(mixed.patch_size, 16);
  EXPECT_EQ(mixed.min_pixels, 65536);
  EXPECT_EQ(mixed.max_pixels, 1024 * 1024);
  const SmartResizeRule plain = Qwen2Rule();  // no preset: the class defaults
  EXPECT_EQ(plain.patch_size, 14);
  EXPECT_EQ(plain.min_pixels, 56 * 56);
  EXPECT_EQ(plain.max_pixels, 28 * 28 * 1280);
}

TEST(SmartResizeSpec, ConfigErrorsNameTheKeyAndTheAllowedValues) {
  const std::string key = "ops[1].image.smart_resize";
  auto message = [&](const SmartResizeSpec& s) { return SmartResizeOp::Validate(s, key).message(); };
  EXPECT_TRUE(SmartResizeOp::Validate(SmartResizeSpec{}, key).ok());
  EXPECT_NE(message({.min_pixels = 5000, .max_pixels = 4000}).find(key + ".min_pixels"),
            std::string::npos);
  EXPECT_NE(message({.preset = VisionModel::kQwen3Vl, .max_pixels = 1000})
                .find("with preset qwen3_vl"),
            std::string::npos);
  EXPECT_NE(message({.patch_size = -1}).find(key + ".patch_size"), std::string::npos);
  EXPECT_NE(message({.merge_size = 100}).find(key + ".merge_size"), std::string::npos);
  EXPECT_NE(message({.max_aspect_ratio = 0.5}).find(key + ".max_aspect_ratio"),
            std::string::npos);
  const std::string bad_preset = message({.preset = static_cast<VisionModel>(9)});
  EXPECT_NE(bad_preset.find(key + ".preset"), std::string::npos);
  EXPECT_NE(bad_preset.find("none, qwen2_vl, qwen2_5_vl, qwen3_vl"), std::string::npos);
  const std::string bad_filter = message({.resample = static_cast<ResampleFilter>(7)});
  EXPECT_NE(bad_filter.find("bicubic, bilinear"), std::string::npos);
  // A directly built op with a bad spec fails every sample with the same message.
  testing::TestContext t;
  const Image src = MakeImage(10, 10, 4, [](int, int, int) { return 1; });
  t.SetImage(src.view());
  EXPECT_EQ(SmartResizeOp(SmartResizeSpec{.patch_size = -1}, 0).Run(t.ctx).code(),
            StatusCode::kInvalidArgument);
}

// --- PIL's resampling ------------------------------------------------------------------

// 7x5 RGB, channel c at (x, y) = (37x + 53y + 91c) mod 256.
Image Pattern7x5() {
  return MakeImage(7, 5, 3, [](int x, int y, int c) { return (x * 37 + y * 53 + c * 91) % 256; });
}

testing::Bytes Resized(ImageView src, int w, int h, ResampleFilter f) {
  Result<Image> out = PilResize(src, w, h, f);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? PixelsOf(out->view()) : testing::Bytes{};
}

TEST(PilResizeInto, BilinearDownscaleByTwoIsTheHandComputedAverage) {
  // 4 -> 2 pixels: scale 2, support 1 * 2. Output 0 centres at 1.0 and reads pixels 0..2
  // with weights filter(-0.25), filter(0.25), filter(0.75) = 0.75, 0.75, 0.25 (sum 1.75):
  // (0 * 3 + 70 * 3 + 140) / 7 = 50. Output 1 reads 1..3: (70 + 140 * 3 + 210 * 3) / 7 = 160.
  const uint8_t values[4] = {0, 70, 140, 210};
  const Image src = MakeImage(4, 1, 1, [&](int x, int, int) { return values[x]; });
  EXPECT_EQ(Resized(src.view(), 2, 1, ResampleFilter::kBilinear), (testing::Bytes{50, 160}));
}

// Golden bytes from Pillow 13.0 (`Image.fromarray(pattern).resize(size, filter)`), the
// reference the processor's PIL backend uses.
TEST(PilResizeInto, MatchesPillowBicubicBothPasses) {
  EXPECT_EQ(Resized(Pattern7x5().view(), 3, 4, ResampleFilter::kBicubic),
            (testing::Bytes{34,  131, 154, 120, 201, 46,  190, 72,  127, 99,  185, 82,
                            197, 130, 104, 126, 94,  205, 175, 143, 88,  139, 72,  177,
                            84,  173, 134, 197, 79,  165, 68,  155, 181, 138, 155, 60}));
}

TEST(PilResizeInto, MatchesPillowBilinearUpAndDown) {
  EXPECT_EQ(
      Resized(Pattern7x5().view(), 10, 3, ResampleFilter::kBilinear),
      (testing::Bytes{23,  114, 205, 43,  134, 165, 69,  160, 105, 95,  186, 28,  121, 212, 47,
                      147, 199, 73,  173, 147, 99,  199, 70,  125, 175, 60,  151, 135, 80,  171,
                      106, 197, 89,  126, 186, 78,  152, 151, 78,  178, 77,  104, 167, 96,  130,
                      173, 102, 156, 192, 91,  179, 118, 117, 165, 83,  143, 177, 72,  163, 197,
                      189, 134, 115, 209, 94,  135, 199, 70,  161, 122, 96,  187, 70,  122, 213,
                      57,  148, 188, 83,  174, 113, 109, 200, 62,  135, 160, 61,  155, 100, 81}));
}

TEST(PilResizeInto, MatchesPillowWhenOnlyOneAxisChanges) {
  // Width kept: PIL skips the horizontal pass (so no rounding between passes).
  EXPECT_EQ(Resized(Pattern7x5().view(), 7, 9, ResampleFilter::kBicubic),
            (testing::Bytes{
                              0,  87, 178,  33, 124, 236,  70, 161,   0, 107, 198,  33, 144, 255,  70, 181,  16, 107, 239,  53, 144,
                             13, 104, 204,  50, 141, 161,  87, 187,  13, 124, 224,  50, 161, 181,  87, 207,  33, 124, 164,  70, 161,
                             47, 138, 240,  84, 175,  29, 121, 223,  47, 158, 255,  84, 195,  49, 121, 243,  67, 158,  32, 104, 195,
                             77, 168, 148, 114, 219,  22, 151, 131,  77, 202, 168, 114, 239,  42, 151, 151,  97, 202,  25, 134, 239,
                            106, 197,  32, 143, 234,  69, 180,  15, 106, 217,  52, 143, 254,  89, 180,  35, 126, 217,  72, 163, 254,
                            135, 244,  47, 172, 118,  98, 227,  30, 135, 101,  67, 172, 138, 118, 227,  50, 155, 101, 101, 210, 138,
                            165, 237,  91, 202,  26, 128, 220,  74, 165,   9, 111, 202,  46, 148, 220,  94, 185,   9, 131, 203,  46,
                            199, 105, 125, 236,  62, 162,  88, 108, 199,  45, 145, 236,  82, 182,  88, 128, 219,  45, 165,  71,  82,
                            216,  30, 142, 253,  88, 179,  13, 125, 216,  71, 162, 253, 108, 199,  13, 145, 236,  71, 182,   0, 108}));
  // Height kept: only the horizontal pass.
  EXPECT_EQ(Resized(Pattern7x5().view(), 2, 5, ResampleFilter::kBicubic),
            (testing::Bytes{52,  151, 114, 170, 125, 88,  111, 190, 90,  164,
                            108, 143, 166, 129, 84,  140, 103, 202, 161, 105,
                            145, 79,  158, 119, 144, 105, 184, 118, 158, 102}));
}

// An independent reference: PIL's filter in double precision with the same rounding to 8
// bits between the passes, no fixed point. The fixed-point result may differ by one
// level where a value lies within 2^-22 of a rounding boundary.
std::vector<double> Weights(int in, int out, ResampleFilter f, int xx, int* first) {
  const double scale = static_cast<double>(in) / out;
  const double fs = std::max(scale, 1.0);
  const double support = (f == ResampleFilter::kBicubic ? 2.0 : 1.0) * fs;
  const double center = (xx + 0.5) * scale;
  const int lo = std::max(0, static_cast<int>(center - support + 0.5));
  const int hi = std::min(in, static_cast<int>(center + support + 0.5));
  std::vector<double> w;
  double sum = 0;
  for (int x = lo; x < hi; ++x) {
    double t = std::abs((x - center + 0.5) / fs);
    double v;
    if (f == ResampleFilter::kBilinear) {
      v = t < 1 ? 1 - t : 0;
    } else {
      v = t < 1 ? (1.5 * t - 2.5) * t * t + 1 : t < 2 ? ((-0.5 * t + 2.5) * t - 4) * t + 2 : 0;
    }
    w.push_back(v);
    sum += v;
  }
  for (double& v : w) v /= sum;
  *first = lo;
  return w;
}

uint8_t Round8(double v) { return static_cast<uint8_t>(std::clamp(std::floor(v + 0.5), 0.0, 255.0)); }

// One pass of the double-precision reference over a packed image: along x (horizontal)
// or y, to `out` samples, rounding to 8 bits.
std::vector<uint8_t> ReferencePass(const std::vector<uint8_t>& in, int w, int h, int out,
                                   bool horizontal, ResampleFilter f) {
  const int ow = horizontal ? out : w, oh = horizontal ? h : out;
  std::vector<uint8_t> res(static_cast<size_t>(ow) * oh * 3);
  for (int o = 0; o < out; ++o) {
    int first;
    const std::vector<double> k = Weights(horizontal ? w : h, out, f, o, &first);
    for (int j = 0; j < (horizontal ? h : w); ++j) {
      for (int c = 0; c < 3; ++c) {
        double s = 0;
        for (size_t i = 0; i < k.size(); ++i) {
          const int src = first + static_cast<int>(i);
          const size_t at = horizontal ? (static_cast<size_t>(j) * w + src) * 3 + c
                                       : (static_cast<size_t>(src) * w + j) * 3 + c;
          s += k[i] * in[at];
        }
        const size_t to = horizontal ? (static_cast<size_t>(j) * ow + o) * 3 + c
                                     : (static_cast<size_t>(o) * ow + j) * 3 + c;
        res[to] = Round8(s);
      }
    }
  }
  return res;
}

TEST(PilResizeInto, WithinOneLevelOfADoublePrecisionReference) {
  const Image src = MakeImage(97, 61, 3, [](int x, int y, int c) {
    return static_cast<uint8_t>((x * x * 3 + y * 17 + c * 60 + (x ^ y) * 5) % 256);
  });
  const testing::Bytes pixels = PixelsOf(src.view());
  // Both orders of Pillow 13: vertical first when the height loses more than twice as
  // many pixels as the width.
  for (auto [w, h] : {std::pair{28, 56}, std::pair{130, 40}, std::pair{50, 113},
                      std::pair{97, 30}, std::pair{90, 20}, std::pair{60, 20}}) {
    for (ResampleFilter f : {ResampleFilter::kBicubic, ResampleFilter::kBilinear}) {
      const bool horizontal_first = !(61 - h > 0 && 61 - h > 2 * (97 - w));
      std::vector<uint8_t> want =
          horizontal_first
              ? ReferencePass(ReferencePass(pixels, 97, 61, w, true, f), w, 61, h, false, f)
              : ReferencePass(ReferencePass(pixels, 97, 61, h, false, f), 97, h, w, true, f);
      if (w == 97) want = ReferencePass(pixels, 97, 61, h, false, f);  // no horizontal pass
      const testing::Bytes got = Resized(src.view(), w, h, f);
      ASSERT_EQ(got.size(), want.size());
      int worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      EXPECT_LE(worst, 1) << w << "x" << h << " filter " << static_cast<int>(f);
    }
  }
}

TEST(PilResizeInto, FlatColourStaysFlatAndChannelsAreIndependent) {
  const Image flat = MakeImage(300, 200, 4, [](int, int, int c) { return 40 + 60 * c; });
  const Image out = *PilResize(flat.view(), 56, 84, ResampleFilter::kBicubic);
  for (int y = 0; y < out.height(); ++y) {
    for (int x = 0; x < out.width(); ++x) {
      for (int c = 0; c < 4; ++c) ASSERT_EQ(testing::Pixel(out.view(), x, y)[c], 40 + 60 * c);
    }
  }
  // RGBX (4 channels) gives the RGB image's bytes in its first three channels.
  const Image rgb = Pattern7x5();
  const Image rgbx = MakeImage(7, 5, 4, [](int x, int y, int c) {
    return c < 3 ? (x * 37 + y * 53 + c * 91) % 256 : 255;
  });
  const Image a = *PilResize(rgb.view(), 11, 3, ResampleFilter::kBicubic);
  const Image b = *PilResize(rgbx.view(), 11, 3, ResampleFilter::kBicubic);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 11; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(testing::Pixel(a.view(), x, y)[c], testing::Pixel(b.view(), x, y)[c]);
      }
    }
  }
}

// Four channels take the AVX2 horizontal pass where the CPU has it (Horizontal4Avx2),
// three the scalar one: over noise, sizes up and down (odd and even tap counts, one tap
// left over, borders) and both filters, the first three channels of the RGBX result are
// the RGB result's bytes.
TEST(PilResizeInto, FourChannelsAreResampledAsThreeOverManySizes) {
  uint32_t state = 12345;
  const auto noise = [&state](int, int, int) {
    state = state * 1664525u + 1013904223u;
    return static_cast<int>(state >> 24);
  };
  const Image rgbx = MakeImage(173, 61, 4, noise);
  const Image rgb = MakeImage(173, 61, 3, [&](int x, int y, int c) {
    return testing::Pixel(rgbx.view(), x, y)[c];
  });
  for (const ResampleFilter f : {ResampleFilter::kBicubic, ResampleFilter::kBilinear}) {
    for (const int w : {1, 2, 3, 17, 56, 86, 87, 172, 174, 351, 700}) {
      const Image a = *PilResize(rgb.view(), w, 29, f);
      const Image b = *PilResize(rgbx.view(), w, 29, f);
      for (int y = 0; y < a.height(); ++y) {
        for (int x = 0; x < a.width(); ++x) {
          for (int c = 0; c < 3; ++c) {
            ASSERT_EQ(testing::Pixel(a.view(), x, y)[c], testing::Pixel(b.view(), x, y)[c])
                << "width " << w << " at " << x << "," << y << " channel " << c;
          }
        }
      }
    }
  }
}

TEST(PilResizeInto, ReadsStridedViewsAndRejectsMismatchedChannels) {
  const Image big = MakeImage(20, 12, 3, [](int x, int y, int c) { return x * 11 + y * 7 + c; });
  const Image small = MakeImage(9, 6, 3, [](int x, int y, int c) {
    return (x + 5) * 11 + (y + 3) * 7 + c;
  });
  EXPECT_EQ(Resized(big.view().Crop(5, 3, 9, 6), 28, 28, ResampleFilter::kBicubic),
            Resized(small.view(), 28, 28, ResampleFilter::kBicubic));
  Image dst = *Image::Allocate(4, 4, 4);
  EXPECT_EQ(PilResizeInto(small.view(), dst.mutable_view(), ResampleFilter::kBicubic, nullptr)
                .code(),
            StatusCode::kInvalidArgument);
}

// --- the operator ----------------------------------------------------------------------

TEST(SmartResizeOp, WritesTheRuleSizeIntoScratch) {
  const Image src = MakeImage(640, 480, 4, [](int x, int y, int) { return (x + y) & 0xFF; });
  testing::TestContext t;
  t.SetImage(src.view());
  SmartResizeOp op(SmartResizeSpec{}, testing::TestContext::kImageSlot);
  EXPECT_EQ(op.name(), "image.smart_resize");
  ASSERT_TRUE(op.Run(t.ctx).ok());
  EXPECT_EQ(t.image().width, 644);
  EXPECT_EQ(t.image().height, 476);
  EXPECT_EQ(t.image().channels, 4);
  EXPECT_EQ(PixelsOf(t.image()), PixelsOf(PilResize(src.view(), 644, 476,
                                                     ResampleFilter::kBicubic)->view()));
}

TEST(SmartResizeOp, LeavesAnImageThatFitsUntouched) {
  const Image src = MakeImage(224, 112, 3, [](int, int, int) { return 9; });
  testing::TestContext t;
  t.SetImage(src.view());
  ASSERT_TRUE(SmartResizeOp(SmartResizeSpec{}, 0).Run(t.ctx).ok());
  EXPECT_EQ(t.image().data, src.view().data);
  EXPECT_EQ(t.ctx.next_scratch, 0);
}

TEST(SmartResizeOp, AnExtremeAspectRatioIsAPerSampleError) {
  const Image src = MakeImage(1000, 4, 4, [](int, int, int) { return 9; });
  testing::TestContext t;
  t.SetImage(src.view());
  const Status s = SmartResizeOp(SmartResizeSpec{}, 0).Run(t.ctx);
  EXPECT_EQ(s.code(), StatusCode::kPixelLimit);
  EXPECT_NE(s.message().find("1000x4"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace smart_resize_test
}  // namespace headrace
