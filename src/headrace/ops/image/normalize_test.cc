#include "headrace/ops/image/normalize.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "headrace/ops/image/image_test_util.h"

namespace headrace {
namespace {

using testing::MakeImage;
using testing::Pixel;

// Independent references: the compiler's _Float16 conversion (round to nearest even),
// and bf16 by picking the nearer of the two neighbouring bf16 values in double.
uint16_t RefHalf(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

uint16_t RefBFloat16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t down = u & 0xffff0000u;
  const uint32_t up = down + 0x10000u;
  const double d_down = std::fabs(static_cast<double>(std::bit_cast<float>(down)) - f);
  const double d_up = std::fabs(static_cast<double>(std::bit_cast<float>(up)) - f);
  if (d_down < d_up) return static_cast<uint16_t>(down >> 16);
  if (d_up < d_down) return static_cast<uint16_t>(up >> 16);
  return static_cast<uint16_t>(((down >> 16) & 1) ? up >> 16 : down >> 16);
}

float RefValue(const NormalizeSpec& spec, int c, uint8_t v) {
  return (static_cast<float>(v) / 255.0f - spec.mean[c]) / spec.std[c];
}

TEST(FloatToHalf, MatchesCompilerConversionOnManyValues) {
  std::mt19937 rng(5);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -2.5f,
                               65504.0f,
                               65519.9f,
                               65520.0f,
                               1e9f,
                               5.96e-8f,
                               2.98e-8f,
                               2.99e-8f,
                               6.1e-5f,
                               6.0e-5f,
                               1.0f + 1.0f / 2048,
                               1.0f + 3.0f / 2048,
                               INFINITY,
                               -INFINITY};
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (!std::isnan(f)) values.push_back(f);
  }
  for (int i = 0; i < 20000; ++i)
    values.push_back(std::uniform_real_distribution<float>(-3, 3)(rng));
  for (float f : values) ASSERT_EQ(FloatToHalf(f), RefHalf(f)) << f;
  EXPECT_EQ(FloatToHalf(NAN) & 0x7c00, 0x7c00);
  EXPECT_NE(FloatToHalf(NAN) & 0x03ff, 0);
}

TEST(FloatToBFloat16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 1.0f / 256), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(FloatToBFloat16(1.0f + 3.0f / 256), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(FloatToBFloat16(1.0f + 1.0f / 256 + 1e-6f), 0x3f81);
  std::mt19937 rng(9);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f) || std::isinf(f) || std::fabs(f) > 3e38f) continue;
    ASSERT_EQ(FloatToBFloat16(f), RefBFloat16(f)) << f;
  }
}

struct Case {
  DType dtype;
  Layout layout;
  int channels;
};

class NormalizeIntoTest : public ::testing::TestWithParam<Case> {};

TEST_P(NormalizeIntoTest, MatchesScalarReference) {
  const Case c = GetParam();
  const int w = 23, h = 7;
  std::mt19937 rng(c.channels * 10 + static_cast<int>(c.dtype));
  const Image image = MakeImage(w, h, c.channels, [&](int, int, int) { return rng() & 0xFF; });
  NormalizeSpec spec;
  spec.dtype = c.dtype;
  spec.layout = c.layout;
  std::vector<uint8_t> out(NormalizedBytes(spec, w, h) + 8, 0xAB);
  ASSERT_TRUE(NormalizeInto(image.view(), spec, out.data()).ok());
  EXPECT_EQ(out[NormalizedBytes(spec, w, h)], 0xAB) << "wrote past the row";
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int ch = 0; ch < 3; ++ch) {
        const float ref = RefValue(spec, ch, Pixel(image.view(), x, y)[ch]);
        const size_t index = c.layout == Layout::kCHW ? (static_cast<size_t>(ch) * h + y) * w + x
                                                      : (static_cast<size_t>(y) * w + x) * 3 + ch;
        if (c.dtype == DType::kF32) {
          float got;
          std::memcpy(&got, &out[index * 4], 4);
          ASSERT_NEAR(got, ref, 2e-6f) << x << "," << y << "," << ch;
        } else {
          uint16_t got;
          std::memcpy(&got, &out[index * 2], 2);
          ASSERT_EQ(got, c.dtype == DType::kF16 ? RefHalf(ref) : RefBFloat16(ref))
              << x << "," << y << "," << ch;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllDtypesLayoutsAndChannels, NormalizeIntoTest,
    ::testing::Values(Case{DType::kF32, Layout::kCHW, 3}, Case{DType::kF32, Layout::kCHW, 4},
                      Case{DType::kF32, Layout::kHWC, 3}, Case{DType::kF32, Layout::kHWC, 4},
                      Case{DType::kF16, Layout::kCHW, 4}, Case{DType::kF16, Layout::kHWC, 3},
                      Case{DType::kBF16, Layout::kCHW, 3}, Case{DType::kBF16, Layout::kHWC, 4}));

TEST(NormalizeInto, ReadsCroppedViews) {
  const Image image =
      MakeImage(40, 30, 4, [](int x, int y, int c) { return (x + y * 3 + c) & 0xFF; });
  const ImageView window = image.view().Crop(5, 7, 10, 4);
  NormalizeSpec spec;
  std::vector<float> out(3 * 10 * 4);
  ASSERT_TRUE(NormalizeInto(window, spec, reinterpret_cast<uint8_t*>(out.data())).ok());
  EXPECT_NEAR(out[0], RefValue(spec, 0, 5 + 21), 2e-6f);
  EXPECT_NEAR(out[2 * 40 + 3 * 10 + 9], RefValue(spec, 2, 14 + 30 + 2), 2e-6f);
}

TEST(NormalizeInto, RejectsUnsupportedDtypeAndZeroStd) {
  const Image image = MakeImage(2, 2, 3, [](int, int, int) { return 0; });
  std::vector<float> out(12);
  NormalizeSpec spec;
  spec.dtype = DType::kI64;
  EXPECT_EQ(NormalizeInto(image.view(), spec, reinterpret_cast<uint8_t*>(out.data())).code(),
            StatusCode::kInvalidArgument);
  spec = NormalizeSpec{};
  spec.std[1] = 0;
  EXPECT_EQ(NormalizeInto(image.view(), spec, reinterpret_cast<uint8_t*>(out.data())).code(),
            StatusCode::kInvalidArgument);
}

TEST(NormalizeOp, WritesIntoTheBatchSlot) {
  const Image image = MakeImage(6, 4, 4, [](int x, int, int) { return x * 40; });
  std::vector<float> other(3 * 6 * 4, -1.0f), row(3 * 6 * 4, -1.0f);
  testing::TestContext t;
  t.SetRows({reinterpret_cast<uint8_t*>(other.data()), reinterpret_cast<uint8_t*>(row.data())});
  t.SetImage(image.view());
  NormalizeSpec spec;
  NormalizeOp op(spec, /*field_index=*/1, 6, 4, testing::TestContext::kImageSlot);
  EXPECT_EQ(op.name(), "image.normalize");
  ASSERT_TRUE(op.Run(t.ctx).ok());
  EXPECT_NEAR(row[5], RefValue(spec, 0, 200), 2e-6f);
  EXPECT_NEAR(row[2 * 24 + 23], RefValue(spec, 2, 200), 2e-6f);
  EXPECT_EQ(other[0], -1.0f);
}

TEST(NormalizeOp, WrongImageSizeIsInternalError) {
  const Image image = MakeImage(6, 5, 4, [](int, int, int) { return 0; });
  std::vector<float> row(3 * 6 * 4);
  testing::TestContext t;
  t.SetRows({reinterpret_cast<uint8_t*>(row.data())});
  t.SetImage(image.view());
  const Status status =
      NormalizeOp(NormalizeSpec{}, 0, 6, 4, testing::TestContext::kImageSlot).Run(t.ctx);
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_NE(status.message().find("6x5"), std::string::npos) << status.message();
}

TEST(NormalizeOp, MissingSlotIsInternalError) {
  const Image image = MakeImage(6, 4, 4, [](int, int, int) { return 0; });
  testing::TestContext t;
  t.SetImage(image.view());
  EXPECT_EQ(
      NormalizeOp(NormalizeSpec{}, 0, 6, 4, testing::TestContext::kImageSlot).Run(t.ctx).code(),
      StatusCode::kInternal);
}

}  // namespace
}  // namespace headrace
