#include "headrace/ops/audio/resample.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "headrace/ops/audio/audio_test_util.h"

namespace headrace {
namespace {

TEST(AudioResample, KeepsTheToneAndScalesTheLength) {
  constexpr int kRate = 22050;
  std::vector<float> tone(kRate);  // 1 s of 1 kHz
  for (int i = 0; i < kRate; ++i) tone[i] = static_cast<float>(0.5 * std::sin(2 * M_PI * 1000.0 * i / kRate));
  std::vector<Value> values = {AudioView{tone.data(), 1, kRate, kRate}};
  ScratchArena scratch;
  SampleContext ctx;
  ctx.scratch = &scratch;
  ctx.values = values;
  AudioResampleOp op({.sample_rate = 8000}, 0);
  ASSERT_TRUE(op.Run(ctx).ok());
  const auto& out = std::get<AudioView>(values[0]);
  EXPECT_EQ(out.sample_rate, 8000);
  EXPECT_NEAR(static_cast<double>(out.frames), 8000, 20);
  EXPECT_NEAR(testing::ZeroCrossingHz(out.data, out.frames, 8000), 1000, 10);
  // Already at the rate: left as it is.
  AudioResampleOp same({.sample_rate = 8000}, 0);
  const float* before = out.data;
  ASSERT_TRUE(same.Run(ctx).ok());
  EXPECT_EQ(std::get<AudioView>(values[0]).data, before);
}

}  // namespace
}  // namespace headrace
