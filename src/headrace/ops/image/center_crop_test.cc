#include "headrace/ops/image/center_crop.h"

#include "gtest/gtest.h"
#include "headrace/ops/image/image_test_util.h"

namespace headrace {
namespace {

using testing::MakeImage;
using testing::Pixel;

// Encodes the position in the pixel: R = x, G = y (mod 256), B = 7.
Image Positions(int w, int h, int channels) {
  return MakeImage(w, h, channels, [](int x, int y, int c) -> uint8_t {
    return c == 0 ? x & 0xFF : c == 1 ? y & 0xFF : 7;
  });
}

TEST(CenterOffset, RoundsHalfToEvenLikeTorchvision) {
  EXPECT_EQ(CenterOffset(300, 224), 38);
  EXPECT_EQ(CenterOffset(224, 224), 0);
  EXPECT_EQ(CenterOffset(225, 224), 0);   // round(0.5) = 0
  EXPECT_EQ(CenterOffset(227, 224), 2);   // round(1.5) = 2
  EXPECT_EQ(CenterOffset(257, 224), 16);  // round(16.5) = 16
  EXPECT_EQ(CenterOffset(259, 224), 18);  // round(17.5) = 18
}

TEST(CenterCropOp, IsAViewWithTheCentrePixels) {
  for (int channels : {3, 4}) {
    const Image src = Positions(300, 260, channels);
    testing::TestContext t;
    t.SetImage(src.view());
    CenterCropSpec spec;
    spec.width = spec.height = 224;
    CenterCropOp op(spec, testing::TestContext::kImageSlot);
    EXPECT_EQ(op.name(), "image.center_crop");
    ASSERT_TRUE(op.Run(t.ctx).ok());
    const ImageView& v = t.image();
    EXPECT_EQ(v.width, 224);
    EXPECT_EQ(v.height, 224);
    EXPECT_EQ(v.stride, src.view().stride);  // a view into the source, not a copy
    EXPECT_GE(v.data, src.view().data);
    EXPECT_LT(v.data, src.view().data + src.view().stride * 260);
    EXPECT_EQ(t.ctx.next_scratch, 0);
    EXPECT_EQ(Pixel(v, 0, 0)[0], 38);
    EXPECT_EQ(Pixel(v, 0, 0)[1], 18);
    EXPECT_EQ(Pixel(v, 223, 223)[0], (38 + 223) & 0xFF);
    EXPECT_EQ(Pixel(v, 223, 223)[1], 18 + 223);
  }
}

TEST(CenterCropOp, PadsSmallerDimensionWithZeros) {
  const Image src = Positions(200, 300, 4);
  testing::TestContext t;
  t.SetImage(src.view());
  CenterCropSpec spec;
  spec.width = spec.height = 224;
  ASSERT_TRUE(CenterCropOp(spec, testing::TestContext::kImageSlot).Run(t.ctx).ok());
  const ImageView& v = t.image();
  ASSERT_EQ(v.width, 224);
  ASSERT_EQ(v.height, 224);
  // x: 12 columns of zeros, the 200 source columns, 12 of zeros; y: rows 38..261.
  for (int y : {0, 100, 223}) {
    EXPECT_EQ(Pixel(v, 11, y)[2], 0);
    EXPECT_EQ(Pixel(v, 12, y)[0], 0);
    EXPECT_EQ(Pixel(v, 12, y)[1], (38 + y) & 0xFF);
    EXPECT_EQ(Pixel(v, 12, y)[2], 7);
    EXPECT_EQ(Pixel(v, 211, y)[0], 199);
    EXPECT_EQ(Pixel(v, 212, y)[2], 0);
  }
}

TEST(CenterCropOp, PadsBothDimensions) {
  const Image src = Positions(3, 2, 3);
  Image dst = *Image::Allocate(6, 5, 3);
  ASSERT_TRUE(CenterCropInto(src.view(), dst.mutable_view()).ok());
  // x pad (6 - 3) // 2 = 1 before, 2 after; y pad (5 - 2) // 2 = 1 before, 2 after.
  EXPECT_EQ(Pixel(dst.view(), 0, 1)[2], 0);
  EXPECT_EQ(Pixel(dst.view(), 1, 0)[2], 0);
  EXPECT_EQ(Pixel(dst.view(), 1, 1)[2], 7);
  EXPECT_EQ(Pixel(dst.view(), 3, 2)[0], 2);
  EXPECT_EQ(Pixel(dst.view(), 3, 2)[1], 1);
  EXPECT_EQ(Pixel(dst.view(), 4, 2)[2], 0);
  EXPECT_EQ(Pixel(dst.view(), 3, 3)[2], 0);
}

TEST(CenterCropOp, RejectsEmptyCrop) {
  testing::TestContext t;
  const Image src = Positions(10, 10, 3);
  t.SetImage(src.view());
  EXPECT_EQ(CenterCropOp(CenterCropSpec{}, testing::TestContext::kImageSlot).Run(t.ctx).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace headrace
