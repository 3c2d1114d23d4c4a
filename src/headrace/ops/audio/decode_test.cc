#include "headrace/ops/audio/decode.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <utility>

#include "headrace/core/rng.h"
#include "headrace/ops/audio/audio_test_util.h"

namespace headrace {
namespace {

using ::testing::HasSubstr;
using testing::Tone;
using testing::ZeroCrossingHz;

struct Decoded {
  Status status;
  AudioView audio;
};

Decoded Decode(const AudioDecodeSpec& spec, const std::vector<uint8_t>& bytes, ScratchArena& s) {
  EXPECT_TRUE(AudioDecodeOp::Validate(spec, "audio.decode").ok());
  AudioDecodeOp op(spec, 0);
  std::vector<Value> values = {EncodedBytes{bytes.data(), bytes.size()}};
  SampleContext ctx;
  ctx.scratch = &s;
  ctx.values = values;
  Decoded out;
  out.status = op.Run(ctx);
  if (const auto* a = std::get_if<AudioView>(&values[0])) out.audio = *a;
  return out;
}

TEST(AudioDecode, EveryContainerGivesTheTone) {
  struct Case {
    const char* codec;
    const char* ext;
  };
  for (const Case& c : {Case{"pcm_s16le", "wav"}, Case{"flac", "flac"},
                        Case{"libmp3lame", "mp3"}, Case{"libopus", "opus"}}) {
    const int rate = std::string(c.codec) == "libopus" ? 48000 : 16000;
    ScratchArena scratch;
    const Decoded d = Decode({}, Tone(440, rate, 1, 1.0, c.codec, c.ext), scratch);
    ASSERT_TRUE(d.status.ok()) << c.codec << ": " << d.status.ToString();
    EXPECT_EQ(d.audio.channels, 1) << c.codec;
    EXPECT_EQ(d.audio.sample_rate, rate) << c.codec;
    EXPECT_NEAR(static_cast<double>(d.audio.frames), rate, rate * 0.1) << c.codec;  // ~1 s
    EXPECT_NEAR(ZeroCrossingHz(d.audio.data, d.audio.frames, rate), 440, 15) << c.codec;
  }
}

TEST(AudioDecode, ResamplesAndMixesInOnePass) {
  ScratchArena scratch;
  // Stereo 44.1 kHz: 300 Hz left, 600 Hz right.
  const std::vector<uint8_t> wav = Tone(300, 44100, 2, 0.5);
  Decoded d = Decode({.sample_rate = 16000}, wav, scratch);
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_EQ(d.audio.channels, 2);
  EXPECT_NEAR(static_cast<double>(d.audio.frames), 8000, 40);
  EXPECT_NEAR(ZeroCrossingHz(d.audio.channel(0), d.audio.frames, 16000), 300, 10);
  EXPECT_NEAR(ZeroCrossingHz(d.audio.channel(1), d.audio.frames, 16000), 600, 15);
  // Mono: the mean of the two. (Each decode here starts at scratch slot 0: one arena each.)
  ScratchArena mono_scratch, both_scratch;
  d = Decode({.channels = 1}, wav, mono_scratch);
  ASSERT_TRUE(d.status.ok());
  ASSERT_EQ(d.audio.channels, 1);
  const Decoded both = Decode({}, wav, both_scratch);
  ASSERT_TRUE(both.status.ok());
  for (int64_t i = 0; i < 1000; i += 37) {
    EXPECT_NEAR(d.audio.data[i], (both.audio.channel(0)[i] + both.audio.channel(1)[i]) / 2, 1e-6);
  }
}

TEST(AudioDecode, MaxSecondsCutsALongFile) {
  ScratchArena scratch;
  const Decoded d = Decode({.max_seconds = 0.25}, Tone(200, 8000, 1, 2.0), scratch);
  ASSERT_TRUE(d.status.ok());
  EXPECT_EQ(d.audio.frames, 2000);
}

TEST(AudioDecode, BadAudioIsANamedError) {
  ScratchArena scratch;
  const Decoded garbage = Decode({}, std::vector<uint8_t>(4000, 0x33), scratch);
  EXPECT_EQ(garbage.status.code(), StatusCode::kCorruptData);
  // A WAV with zero samples.
  const Decoded empty = Decode({}, Tone(200, 8000, 1, 0.0), scratch);
  EXPECT_EQ(empty.status.code(), StatusCode::kCorruptData);
  EXPECT_THAT(empty.status.message(), HasSubstr("no samples"));
  // A video without sound has no audio stream.
  av::VideoClip clip;
  clip.frames = 3;
  clip.paint = [](int, uint8_t* rgb) { std::fill(rgb, rgb + 64 * 48 * 3, 90); };
  auto video = av::EncodeVideo(clip);
  ASSERT_TRUE(video.ok()) << video.status().ToString();
  const Decoded silent = Decode({}, *video, scratch);
  EXPECT_EQ(silent.status.code(), StatusCode::kCorruptData);
  EXPECT_THAT(silent.status.message(), HasSubstr("no audio stream"));
}

}  // namespace
}  // namespace headrace

namespace headrace {
namespace {

// Fuzz-style: damaged audio files of each format never crash the op (ASan/UBSan in the
// suite); each gives ok or a status.
TEST(AudioDecode, DamagedFilesGiveAStatusNeverACrash) {
  Rng rng(HashKeys(9, 9));
  int ok = 0, runs = 0;
  for (const auto& [codec, ext] : {std::pair{"pcm_s16le", "wav"}, std::pair{"flac", "flac"},
                                    std::pair{"libmp3lame", "mp3"}}) {
    const std::vector<uint8_t> good = Tone(330, 16000, 2, 0.5, codec, ext);
    ASSERT_FALSE(good.empty()) << codec;
    for (int round = 0; round < 40; ++round, ++runs) {
      std::vector<uint8_t> bytes = good;
      if (round % 2 == 0) {
        for (int k = 0; k < 1 + round % 5; ++k) bytes[rng.Next() % bytes.size()] ^= 0xA5;
      } else {
        bytes.resize(rng.Next() % bytes.size());
      }
      ScratchArena scratch;
      ok += Decode({.sample_rate = 8000, .channels = 1}, bytes, scratch).status.ok();
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_EQ(runs, 120);
}

}  // namespace
}  // namespace headrace
