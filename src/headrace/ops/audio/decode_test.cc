#include "headrace/ops/audio/decode.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "headrace/core/rng.h"
#include "headrace/ops/audio/audio_test_util.h"
#include "headrace/ops/audio/crop.h"

namespace headrace {
namespace {

using ::testing::HasSubstr;
using testing::Tone;
using testing::ZeroCrossingHz;

struct Decoded {
  Status status;
  AudioView audio;
};

Decoded Decode(const AudioDecodeSpec& spec, const std::vector<uint8_t>& bytes, ScratchArena& s,
               int64_t decode_bytes = 0) {
  EXPECT_TRUE(AudioDecodeOp::Validate(spec, "audio.decode").ok());
  AudioDecodeOp op(spec, 0, {}, decode_bytes);
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

// Music-like sound that no codec compresses to nothing: a gliding tone per channel and
// noise (an LCG), so that MP3 frames borrow from the bit reservoir.
std::vector<uint8_t> Sound(const std::string& codec, const std::string& ext, int rate,
                           int channels, double seconds, int64_t bit_rate = 0) {
  av::AudioClip clip;
  clip.sample_rate = rate;
  clip.channels = channels;
  clip.seconds = seconds;
  clip.codec = codec;
  clip.bit_rate = bit_rate;
  clip.sample = [rate](int64_t i, int c) {
    const double t = static_cast<double>(i) / rate;
    uint64_t x = static_cast<uint64_t>(i) * 2654435761u + static_cast<uint64_t>(c) * 97;
    x ^= x >> 13;
    x *= 0x9E3779B97F4A7C15ull;
    const double noise = static_cast<double>(x >> 40) / static_cast<double>(1 << 24) - 0.5;
    return static_cast<float>(0.4 * std::sin(2 * M_PI * (220 + 90 * t) * (c + 1) * t) +
                              0.2 * noise);
  };
  auto bytes = av::EncodeAudio(clip, ext);
  EXPECT_TRUE(bytes.ok()) << codec << ": " << bytes.status().ToString();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

struct Window {
  Status status;
  std::vector<float> row;
  int64_t length = -1;
  AudioView audio;  // what audio.decode gave audio.crop
};

// audio.decode then audio.crop (ops 0 and 1 of a chain), the decode told the crop's
// window or not, as the planner tells it.
Window DecodeAndCrop(const AudioDecodeSpec& decode, const AudioCropSpec& crop, bool hint,
                     const std::vector<uint8_t>& bytes, uint64_t seed) {
  const int channels = decode.channels;
  const int64_t n = AudioWindowHint{crop.seconds}.frames(decode.sample_rate);
  AudioDecodeOp decode_op(decode, 0,
                          hint ? AudioWindowHint{crop.seconds, crop.start, 1} : AudioWindowHint{});
  AudioCropOp crop_op(crop, 1, 0, 0, 1, channels, n);
  Window out;
  out.row.assign(static_cast<size_t>(n * channels), -7);
  uint8_t* rows[2] = {reinterpret_cast<uint8_t*>(out.row.data()),
                      reinterpret_cast<uint8_t*>(&out.length)};
  std::vector<Value> values = {EncodedBytes{bytes.data(), bytes.size()}};
  ScratchArena scratch;
  SampleContext ctx;
  ctx.sample_seed = seed;
  ctx.scratch = &scratch;
  ctx.values = values;
  ctx.rows = rows;
  out.status = decode_op.Run(ctx);
  if (const auto* a = std::get_if<AudioView>(&values[0])) out.audio = *a;
  if (out.status.ok()) out.status = crop_op.Run(ctx);
  return out;
}

// Decoding only what a crop keeps gives the crop the very samples (bit for bit) it takes
// from a decode of the whole file: MP3 at a low, the default and a high bit rate (the
// bit reservoir reaches furthest back at low ones), MPEG-2 Layer III, FLAC, WAV, each
// resampled down, up or not at all, with windows at random, at the start, in the center,
// longer than the file, and a file cut by max_seconds. Opus is not decoded from the
// middle: it is decoded whole, to the same crop.
TEST(AudioDecode, AWindowDecodesToTheSameSamplesAsTheWholeFile) {
  struct File {
    const char* codec;
    const char* ext;
    int rate;
    int channels;
    int64_t bit_rate;
    bool windowed;  // decoded from the middle
  };
  const File files[] = {
      {"libmp3lame", "mp3", 44100, 2, 32000, true},  {"libmp3lame", "mp3", 44100, 2, 0, true},
      {"libmp3lame", "mp3", 48000, 1, 320000, true}, {"libmp3lame", "mp3", 22050, 1, 24000, true},
      {"flac", "flac", 44100, 2, 0, true},           {"pcm_s16le", "wav", 16000, 1, 0, true},
      {"pcm_s16le", "wav", 8000, 2, 0, true},        {"libopus", "opus", 48000, 1, 0, false},
  };
  for (const File& f : files) {
    const std::vector<uint8_t> bytes = Sound(f.codec, f.ext, f.rate, f.channels, 3.0, f.bit_rate);
    ASSERT_FALSE(bytes.empty());
    struct Case {
      int rate;
      int channels;
      double seconds;
      ClipStart start;
      double max_seconds;
    };
    for (const Case& c : {Case{16000, 1, 1.0, ClipStart::kRandom, 600},
                          Case{16000, 2, 0.37, ClipStart::kRandom, 600},
                          Case{f.rate, 1, 0.5, ClipStart::kCenter, 600},
                          Case{22050, 1, 1.3, ClipStart::kStart, 600},
                          Case{16000, 1, 5.0, ClipStart::kRandom, 600},
                          Case{16000, 1, 0.6, ClipStart::kRandom, 2.0}}) {
      const AudioDecodeSpec decode{.sample_rate = c.rate, .channels = c.channels,
                                   .max_seconds = c.max_seconds};
      const AudioCropSpec crop{.seconds = c.seconds, .start = c.start};
      int partial = 0;
      for (uint64_t seed = 1; seed <= 6; ++seed) {
        SCOPED_TRACE(::testing::Message()
                     << f.codec << " " << f.rate << " Hz " << f.bit_rate << " b/s -> " << c.rate
                     << " Hz, " << c.seconds << " s, seed " << seed);
        const Window whole = DecodeAndCrop(decode, crop, false, bytes, seed);
        const Window part = DecodeAndCrop(decode, crop, true, bytes, seed);
        ASSERT_TRUE(whole.status.ok()) << whole.status.ToString();
        ASSERT_TRUE(part.status.ok()) << part.status.ToString();
        ASSERT_TRUE(whole.audio.whole());
        EXPECT_EQ(part.audio.total_frames(), whole.audio.frames);
        EXPECT_EQ(part.length, whole.length);
        EXPECT_TRUE(part.row == whole.row) << "the crops differ";
        partial += !part.audio.whole();
      }
      // The short windows of a longer file were decoded alone (or the whole file, where
      // the codec does not allow it).
      if (c.seconds < 1.5 && c.start != ClipStart::kStart) {
        EXPECT_EQ(partial > 0, f.windowed) << f.codec << " " << c.seconds << " s";
      }
    }
  }
}

TEST(AudioDecode, MaxSecondsCutsALongFile) {
  ScratchArena scratch;
  const Decoded d = Decode({.max_seconds = 0.25}, Tone(200, 8000, 1, 2.0), scratch);
  ASSERT_TRUE(d.status.ok());
  EXPECT_EQ(d.audio.frames, 2000);
}

// The decode allowance (memory.decode_bytes_per_thread) bounds a file's decoded samples:
// channels x rate x seconds from its header, checked before decoding (a 64-channel file
// took 7.3 GiB for a crop of one second), and max_seconds cuts what it counts.
TEST(AudioDecode, TheDecodeAllowanceBoundsTheDecodedSamples) {
  const std::vector<uint8_t> wav = Tone(200, 48000, 8, 2.0);  // 8 x 96,000 floats: 3 MB
  ScratchArena scratch;
  const Decoded over = Decode({}, wav, scratch, 1 << 20);
  EXPECT_EQ(over.status.code(), StatusCode::kResourceExhausted) << over.status.ToString();
  EXPECT_THAT(over.status.message(), HasSubstr("8 channels at 48000 Hz"));
  EXPECT_THAT(over.status.message(), HasSubstr("memory.decode_bytes_per_thread"));
  const Decoded cut = Decode({.max_seconds = 0.5}, wav, scratch, 1 << 20);  // 0.77 MB
  ASSERT_TRUE(cut.status.ok()) << cut.status.ToString();
  EXPECT_EQ(cut.audio.frames, 24000);
  ScratchArena a, b;
  const Decoded within = Decode({}, wav, a, 4 << 20);
  const Decoded unbounded = Decode({}, wav, b);
  ASSERT_TRUE(within.status.ok() && unbounded.status.ok());
  ASSERT_EQ(within.audio.frames, unbounded.audio.frames);
  EXPECT_TRUE(std::equal(within.audio.data, within.audio.data + within.audio.frames * 8,
                         unbounded.audio.data));
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
