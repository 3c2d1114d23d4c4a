#include "headrace/ops/audio/resample.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "headrace/ops/audio/audio_test_util.h"

extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/samplefmt.h>
}

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

// Resamples `in` (mono s16 at `rate`) to 8 kHz planar float with a new Resampler.
std::vector<float> ResampleTo8k(const std::vector<int16_t>& in, int rate, bool* reused) {
  AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
  Result<Resampler> r = Resampler::Make(mono, AV_SAMPLE_FMT_S16, rate, 8000);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  *reused = r->reused();
  PlanarSamples out;
  out.Reset(1);
  const uint8_t* planes[1] = {reinterpret_cast<const uint8_t*>(in.data())};
  EXPECT_TRUE(r->Convert(planes, static_cast<int>(in.size()), out).ok());
  EXPECT_TRUE(r->Flush(out).ok());
  return std::vector<float>(out.channel(0), out.channel(0) + out.frames());
}

TEST(AudioResample, AThreadsIdleContextConvertsByteForByteAsAFreshOne) {
  std::vector<int16_t> a(44100), b(48000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int16_t>((i * 7919) % 20000) - 10000;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int16_t>((i * 4099) % 30000) - 15000;
  // Off this thread's idle contexts (another test's may be there): a fresh one each.
  std::vector<float> fresh_a;
  std::vector<float> fresh_b;
  std::thread([&] {
    bool reused = true;
    fresh_a = ResampleTo8k(a, 44100, &reused);
    EXPECT_FALSE(reused);
  }).join();
  std::thread([&] {
    bool reused = true;
    fresh_b = ResampleTo8k(b, 48000, &reused);
    EXPECT_FALSE(reused);
  }).join();
  ASSERT_EQ(fresh_a.size(), 8000u);
  // Here: 44.1 kHz, then 48 kHz, then 44.1 kHz again (its idle context, reset), then 48.
  std::thread([&] {
    bool reused = false;
    EXPECT_EQ(ResampleTo8k(a, 44100, &reused), fresh_a);
    EXPECT_FALSE(reused);
    EXPECT_EQ(ResampleTo8k(b, 48000, &reused), fresh_b);
    EXPECT_FALSE(reused);
    EXPECT_EQ(ResampleTo8k(a, 44100, &reused), fresh_a);
    EXPECT_TRUE(reused);
    EXPECT_EQ(ResampleTo8k(b, 48000, &reused), fresh_b);
    EXPECT_TRUE(reused);
  }).join();
}

}  // namespace
}  // namespace headrace
