#include "headrace/ops/audio/crop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace headrace {
namespace {

struct Cropped {
  Status status;
  std::vector<float> row;
  int64_t length = -1;
};

// Crops `frames` of a ramp (sample i = i) to `n` samples.
Cropped Crop(ClipStart start, int64_t frames, int64_t n, uint64_t seed = 1, int channels = 1) {
  std::vector<float> audio(static_cast<size_t>(frames * channels));
  for (size_t i = 0; i < audio.size(); ++i) audio[i] = static_cast<float>(i % frames);
  std::vector<Value> values = {AudioView{audio.data(), channels, frames, 100}};
  Cropped out;
  out.row.assign(static_cast<size_t>(n * channels), -1);
  uint8_t* rows[2] = {reinterpret_cast<uint8_t*>(out.row.data()),
                      reinterpret_cast<uint8_t*>(&out.length)};
  ScratchArena scratch;
  SampleContext ctx;
  ctx.sample_seed = seed;
  ctx.scratch = &scratch;
  ctx.values = values;
  ctx.rows = rows;
  AudioCropOp op({.seconds = n / 100.0, .start = start}, 0, 0, 0, 1, channels, n);
  out.status = op.Run(ctx);
  return out;
}

TEST(AudioCrop, StartCenterAndPadding) {
  Cropped c = Crop(ClipStart::kStart, 10, 4);
  ASSERT_TRUE(c.status.ok());
  EXPECT_EQ(c.row, (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(c.length, 4);
  c = Crop(ClipStart::kCenter, 10, 4);
  EXPECT_EQ(c.row, (std::vector<float>{3, 4, 5, 6}));
  c = Crop(ClipStart::kRandom, 3, 5);  // shorter: zero-padded, the length says so
  EXPECT_EQ(c.row, (std::vector<float>{0, 1, 2, 0, 0}));
  EXPECT_EQ(c.length, 3);
  c = Crop(ClipStart::kStart, 6, 3, 1, 2);  // both channels, planar
  EXPECT_EQ(c.row, (std::vector<float>{0, 1, 2, 0, 1, 2}));
}

TEST(AudioCrop, RandomWindowsAreSeededAndCoverTheAudio) {
  std::vector<float> starts;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const Cropped c = Crop(ClipStart::kRandom, 20, 5, seed);
    ASSERT_TRUE(c.status.ok());
    EXPECT_EQ(c.row[4] - c.row[0], 4) << "a contiguous window";
    EXPECT_EQ(Crop(ClipStart::kRandom, 20, 5, seed).row, c.row) << "seeded";
    starts.push_back(c.row[0]);
  }
  EXPECT_EQ(*std::min_element(starts.begin(), starts.end()), 0);
  EXPECT_EQ(*std::max_element(starts.begin(), starts.end()), 15);  // every start reachable
}

}  // namespace
}  // namespace headrace
