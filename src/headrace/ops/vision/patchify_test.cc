#include "headrace/ops/vision/patchify.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "headrace/ops/image/image.h"
#include "headrace/ops/image/normalize.h"
#include "headrace/ops/vision/preset.h"

namespace headrace {
namespace patchify_test {
namespace {

Image Make(int w, int h, int channels, uint8_t (*fn)(int x, int y, int c)) {
  Image image = *Image::Allocate(w, h, channels);
  MutableImageView v = image.mutable_view();
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) v.row(y)[x * channels + c] = fn(x, y, c);
    }
  }
  return image;
}

// mean 0, std 1: a value is pixel / 255, so the test reads the pixel back.
PatchifyParams Identity(int p, int m, int t) {
  return PatchifyParams{.patch_size = p, .temporal_patch_size = t, .merge_size = m,
                        .mean = {0, 0, 0}, .std = {1, 1, 1}};
}

std::vector<int> Pixels(const PatchifyKernel& k, std::span<const ImageView> frames,
                        PatchGrid* grid) {
  const Result<PatchGrid> g = k.Grid(frames[0].width, frames[0].height,
                                     static_cast<int>(frames.size()));
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  std::vector<float> out(k.Bytes(*g) / sizeof(float));
  Result<PatchGrid> written =
      k.Into(frames, {reinterpret_cast<uint8_t*>(out.data()), out.size() * sizeof(float)});
  EXPECT_TRUE(written.ok()) << written.status().ToString();
  *grid = *written;
  std::vector<int> pixels;
  for (float f : out) pixels.push_back(static_cast<int>(std::lround(f * 255.0f)));
  return pixels;
}

TEST(PatchifyKernel, RowsAreMergeWindowsOfPatchesAndColumnsChannelFramePixel) {
  // 8x4, P = 2, M = 2, T = 2: a 2x4 patch grid, two 2x2 merge windows side by side.
  // Channel c at (x, y) = 64c + 8y + x.
  const Image image = Make(8, 4, 4, [](int x, int y, int c) {
    return static_cast<uint8_t>(c < 3 ? 64 * c + 8 * y + x : 255);
  });
  const PatchifyKernel k = *PatchifyKernel::Make(Identity(2, 2, 2));
  EXPECT_EQ(k.patch_dim(), 3 * 2 * 2 * 2);
  const ImageView frames[] = {image.view()};
  PatchGrid grid;
  const std::vector<int> px = Pixels(k, frames, &grid);
  EXPECT_EQ(grid, (PatchGrid{1, 2, 4}));
  EXPECT_EQ(grid.tokens(2), 2);
  ASSERT_EQ(px.size(), 8u * 24);
  auto row = [&](int r) { return std::vector<int>(px.begin() + r * 24, px.begin() + r * 24 + 24); };
  // Row 0: window 0, patch (0, 0): pixels (0,0) (1,0) (0,1) (1,1) per channel, each
  // channel's 2x2 twice (the still image repeated to T = 2).
  EXPECT_EQ(row(0), (std::vector<int>{0,   1,   8,   9,   0,   1,   8,   9,
                                      64,  65,  72,  73,  64,  65,  72,  73,
                                      128, 129, 136, 137, 128, 129, 136, 137}));
  // Row 1: window 0, patch (row 0, column 1) = x 2..3.
  EXPECT_EQ(row(1)[0], 2);
  // Row 2: window 0, patch (row 1, column 0) = y 2..3: the window's patches come before
  // the next window, although x 4 is to the left of nothing in row 0.
  EXPECT_EQ(row(2)[0], 16);
  EXPECT_EQ(row(3)[0], 18);
  // Row 4: window 1 (x 4..7), its first patch.
  EXPECT_EQ(row(4), (std::vector<int>{4,   5,   12,  13,  4,   5,   12,  13,
                                      68,  69,  76,  77,  68,  69,  76,  77,
                                      132, 133, 140, 141, 132, 133, 140, 141}));
  EXPECT_EQ(row(7)[0], 8 * 2 + 6);
}

TEST(PatchifyKernel, VideoFramesGroupByTemporalPatchSizeAndRepeatTheLast) {
  // Three grey frames (one channel, replicated to RGB): frame f at (x, y) = 100f + 4y + x.
  std::vector<Image> images;
  for (int f = 0; f < 3; ++f) {
    images.push_back(*Image::Allocate(4, 4, 1));
    MutableImageView v = images.back().mutable_view();
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 4; ++x) v.row(y)[x] = static_cast<uint8_t>(100 * f + 4 * y + x);
    }
  }
  const ImageView frames[] = {images[0].view(), images[1].view(), images[2].view()};
  const PatchifyKernel k = *PatchifyKernel::Make(Identity(2, 2, 2));
  PatchGrid grid;
  const std::vector<int> px = Pixels(k, frames, &grid);
  EXPECT_EQ(grid, (PatchGrid{2, 2, 2}));  // 3 frames -> 2 groups of 2
  ASSERT_EQ(px.size(), 8u * 24);
  // Group 0, first patch, channel 0: frame 0's 2x2 then frame 1's.
  EXPECT_EQ(std::vector<int>(px.begin(), px.begin() + 8),
            (std::vector<int>{0, 1, 4, 5, 100, 101, 104, 105}));
  // Channel 1 repeats them (grey).
  EXPECT_EQ(std::vector<int>(px.begin() + 8, px.begin() + 16),
            (std::vector<int>{0, 1, 4, 5, 100, 101, 104, 105}));
  // Group 1 (rows 4..7): frame 2, then frame 2 again (padding repeats the last frame).
  EXPECT_EQ(std::vector<int>(px.begin() + 4 * 24, px.begin() + 4 * 24 + 8),
            (std::vector<int>{200, 201, 204, 205, 200, 201, 204, 205}));
}

TEST(PatchifyKernel, NormalisesAsTransformersAndRoundsToBf16) {
  PatchifyParams params;  // CLIP mean/std, P 14, M 2, T 2
  const Image image = Make(28, 28, 3, [](int x, int y, int c) {
    return static_cast<uint8_t>((x * 9 + y * 5 + c * 80) % 256);
  });
  const ImageView frames[] = {image.view()};
  const PatchifyKernel f32 = *PatchifyKernel::Make(params);
  params.dtype = DType::kBF16;
  const PatchifyKernel bf16 = *PatchifyKernel::Make(params);
  const PatchGrid grid = *f32.Grid(28, 28, 1);
  EXPECT_EQ(f32.Bytes(grid), 4u * 3 * 2 * 14 * 14 * 4);
  EXPECT_EQ(bf16.Bytes(grid), f32.Bytes(grid) / 2);
  std::vector<float> a(f32.Bytes(grid) / 4);
  std::vector<uint16_t> b(bf16.Bytes(grid) / 2);
  ASSERT_TRUE(f32.Into(frames, {reinterpret_cast<uint8_t*>(a.data()), a.size() * 4}).ok());
  ASSERT_TRUE(bf16.Into(frames, {reinterpret_cast<uint8_t*>(b.data()), b.size() * 2}).ok());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(b[i], FloatToBFloat16(a[i])) << i;
  // pixel 255 of channel 0: (1 - 0.48145466) / 0.26862954 in float32.
  EXPECT_EQ(f32.Value(0, 255), (1.0f - 0.48145466f) / 0.26862954f);
  EXPECT_EQ(f32.Value(2, 0), (0.0f - 0.40821073f) / 0.27577711f);
}

TEST(PatchifyKernel, RejectsSidesThatAreNotMultiplesAndAWrongOutputSize) {
  const PatchifyKernel k = *PatchifyKernel::Make(PatchifyParams{});
  const Result<PatchGrid> g = k.Grid(56, 30, 1);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("56x30"), std::string::npos);
  EXPECT_NE(g.status().message().find("28"), std::string::npos);
  const Image image = *Image::Allocate(28, 28, 3);
  const ImageView frames[] = {image.view()};
  std::vector<uint8_t> small(100);
  EXPECT_EQ(k.Into(frames, small).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(PatchifyKernel::Make(PatchifyParams{.patch_size = 0}).ok());
  EXPECT_FALSE(PatchifyKernel::Make(PatchifyParams{.std = {1, 0, 1}}).ok());
  EXPECT_FALSE(PatchifyKernel::Make(PatchifyParams{.dtype = DType::kI32}).ok());
}

TEST(VisionPreset, HoldsTheModelsShippedValues) {
  const VisionPreset* q2 = FindVisionPreset(VisionModel::kQwen2Vl);
  const VisionPreset* q25 = FindVisionPreset(VisionModel::kQwen2_5Vl);
  const VisionPreset* q3 = FindVisionPreset(VisionModel::kQwen3Vl);
  ASSERT_TRUE(q2 && q25 && q3);
  EXPECT_EQ(FindVisionPreset(VisionModel::kNone), nullptr);
  EXPECT_EQ(q2->factor(), 28);
  EXPECT_EQ(q25->factor(), 28);
  EXPECT_EQ(q3->factor(), 32);
  EXPECT_EQ(q2->image_max_pixels, 12845056);
  EXPECT_EQ(q3->image_min_pixels, 65536);
  EXPECT_EQ(q3->video_max_pixels, 25165824);
  EXPECT_EQ(q3->image_mean[0], 0.5f);
  EXPECT_EQ(q2->image_std[2], 0.27577711f);
  EXPECT_EQ(q3->tokens.image_pad, "<|image_pad|>");
  EXPECT_EQ(q3->tokens.image_pad_id, 151655);
  EXPECT_EQ(EnumName(VisionModel::kQwen2_5Vl), "qwen2_5_vl");
}

}  // namespace
}  // namespace patchify_test
}  // namespace headrace
