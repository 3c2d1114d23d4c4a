#include "headrace/ops/video/decode.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>


#include "headrace/core/rng.h"
#include "headrace/ops/av/av_encode.h"
#include "headrace/ops/av/av_input.h"

extern "C" {
#include <libavutil/frame.h>
}
#include "headrace/ops/video/test_clips.h"

namespace headrace {
namespace {

using ::testing::HasSubstr;

// 30 frames at 10 fps (3 s), a keyframe every 5: frame i is one flat color whose red is
// 8 i, so a decoded frame says which frame it was.
const std::vector<uint8_t>& Clip() {
  static const std::vector<uint8_t> clip =
      testing::FlatColourClip(30, [](int frame) { return 255 - 8 * frame; });
  return clip;
}

struct Decoded {
  Status status;
  std::vector<uint8_t> row;
  int64_t frames_decoded = -1;  // SampleContext's, as the op set them
  int64_t frames_taken = 0;
};

Decoded DecodeWith(const VideoDecodeSpec& spec, const std::vector<uint8_t>& bytes, uint64_t seed = 1,
                   int64_t decode_bytes = 0) {
  EXPECT_TRUE(VideoDecodeOp::Validate(spec, "video.decode").ok());
  VideoDecodeOp op(spec, 0, 0, 0, decode_bytes);
  Decoded out;
  out.row.assign(static_cast<size_t>(spec.frames) * 3 * spec.width * spec.height, 0xEE);
  std::vector<Value> values = {EncodedBytes{bytes.data(), bytes.size()}};
  uint8_t* rows[1] = {out.row.data()};
  ScratchArena scratch;
  SampleContext ctx;
  ctx.sample_seed = seed;
  ctx.scratch = &scratch;
  ctx.values = values;
  ctx.rows = rows;
  out.status = op.Run(ctx);
  out.frames_decoded = ctx.frames_decoded;
  out.frames_taken = ctx.frames_taken;
  return out;
}

// Which source frame each output frame is, from its red (tchw: the R plane first).
std::vector<int> FramesOf(const Decoded& d, const VideoDecodeSpec& spec) {
  std::vector<int> frames;
  const size_t plane = static_cast<size_t>(spec.width) * spec.height;
  for (int t = 0; t < spec.frames; ++t) {
    const uint8_t* f = d.row.data() + static_cast<size_t>(t) * 3 * plane;
    const int red = spec.layout == VideoLayout::kTCHW ? f[plane / 2] : f[3 * (plane / 2)];
    frames.push_back((red + 4) / 8);
  }
  return frames;
}

TEST(VideoDecode, TakesTheFrameShownAtEvenlySpreadTimes) {
  VideoDecodeSpec spec{.frames = 3, .width = 32, .height = 24};
  const Decoded d = DecodeWith(spec, Clip());
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_EQ(FramesOf(d, spec), (std::vector<int>{5, 15, 25}));  // at 0.5 s, 1.5 s, 2.5 s
  // Flat colors survive H.264 and scaling within a few levels, in R, G, B plane order.
  const size_t plane = 32 * 24;
  EXPECT_NEAR(d.row[plane / 2], 40, 6);
  EXPECT_NEAR(d.row[plane + plane / 2], 215, 6);
  EXPECT_NEAR(d.row[2 * plane + plane / 2], 100, 6);
}

// 4 s at 25 fps with libx264's default B-frames (B-pyramid: some are references), a
// keyframe a second. Frame i: a flat stripe of red 2 i on the left, a moving texture (so
// that the encoder uses B-frames) on the rest.
const std::vector<uint8_t>& BFrameClip() {
  static const std::vector<uint8_t> clip = [] {
    av::VideoClip c;
    c.width = 64;
    c.height = 48;
    c.frames = 100;
    c.fps = 25;
    c.gop = 25;
    c.b_frames = -1;
    c.paint = [](int frame, uint8_t* rgb) {
      for (int y = 0; y < 48; ++y) {
        for (int x = 0; x < 64; ++x) {
          uint8_t* p = rgb + 3 * (y * 64 + x);
          const bool flat = x < 16;
          p[0] = static_cast<uint8_t>(flat ? 2 * frame : x * 4);
          p[1] = static_cast<uint8_t>(flat ? 128 : (x + 2 * frame) * 9 ^ y * 5);
          p[2] = static_cast<uint8_t>(flat ? 128 : (y + frame) * 7);
        }
      }
    };
    auto bytes = av::EncodeVideo(c);
    EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
    return bytes.ok() ? *bytes : std::vector<uint8_t>();
  }();
  return clip;
}

// Spread frames restart at keyframes and skip the B-frames on the way that nothing
// shows: each frame taken is still, byte for byte, the one every frame decoded in order
// (fps 25 from the start: no seek, nothing skipped) has at its time.
TEST(VideoDecode, SkippingAheadTakesTheSameFramesAsDecodingEveryFrame) {
  for (int threads : {1, 2}) {
    const VideoDecodeSpec every{.frames = 100, .width = 32, .height = 24, .fps = 25,
                                .clip_start = ClipStart::kStart, .threads = threads};
    const Decoded all = DecodeWith(every, BFrameClip());
    ASSERT_TRUE(all.status.ok()) << all.status.ToString();
    const size_t frame_bytes = 3 * 32 * 24;
    for (int frames : {3, 7, 10, 16}) {
      const VideoDecodeSpec spread{.frames = frames, .width = 32, .height = 24,
                                   .threads = threads};
      const Decoded d = DecodeWith(spread, BFrameClip());
      ASSERT_TRUE(d.status.ok()) << d.status.ToString();
      for (int i = 0; i < frames; ++i) {
        const auto shown = static_cast<size_t>((i + 0.5) / frames * 100);  // frame at that time
        EXPECT_TRUE(std::equal(d.row.begin() + i * frame_bytes,
                               d.row.begin() + (i + 1) * frame_bytes,
                               all.row.begin() + shown * frame_bytes))
            << "threads " << threads << ", " << frames << " frames: frame " << i << " is not "
            << shown;
        const uint8_t* stripe = d.row.data() + i * frame_bytes + 12 * 32 + 3;  // red plane
        EXPECT_NEAR(stripe[0], 2 * shown, 2) << "frame " << i << " is not " << shown;
      }
    }
  }
}

// Every frame of a clip decoded in order from the start (no seek, nothing skipped),
// converted as the op converts them: the reference for the op's exactness.
struct PlainDecode {
  double duration = 0;
  std::vector<double> times;  // each frame's time, less the op's microsecond of slack
  std::vector<bool> key;      // whether it is a keyframe
  std::vector<std::vector<uint8_t>> frames;

  // The frame shown at `t`: the last starting at or before it (the first before any).
  size_t ShownAt(double t) const {
    size_t i = 0;
    while (i + 1 < times.size() && !(t < times[i + 1])) ++i;
    return i;
  }
  // The keyframe nearest `t` (the earlier on a tie).
  size_t NearestKeyframe(double t) const {
    size_t best = times.size();
    for (size_t i = 0; i < times.size(); ++i) {
      if (key[i] && (best == times.size() ||
                     std::abs(times[i] - t) < std::abs(times[best] - t) - 1e-9)) {
        best = i;
      }
    }
    return best;
  }
};

PlainDecode DecodeEveryFrame(const std::vector<uint8_t>& bytes, const VideoDecodeSpec& spec) {
  PlainDecode out;
  auto in = av::Input::Open(bytes.data(), bytes.size(), av::Input::Media::kVideo, 1);
  EXPECT_TRUE(in.ok()) << in.status().ToString();
  if (!in.ok()) return out;
  out.duration = (*in)->duration();
  av::FramePtr frame = av::NewFrame();
  for (;;) {
    auto got = (*in)->NextFrame(frame.get());
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    if (!got.ok() || !*got) break;
    out.times.push_back((*in)->FrameTime(frame.get()) - 1e-6);
    out.key.push_back(frame->key_frame != 0);
    out.frames.emplace_back(size_t{3} * spec.width * spec.height);
    EXPECT_TRUE(
        ConvertVideoFrame(frame.get(), spec.width, spec.height, spec.layout, out.frames.back().data())
            .ok());
  }
  return out;
}

// The times the op takes for `seed` (its random clip start: OpRng of position 0).
std::vector<double> TimesFor(const VideoDecodeSpec& spec, const PlainDecode& plain, uint64_t seed) {
  SampleContext ctx;
  ctx.sample_seed = seed;
  return FrameTimes(spec, plain.duration, ctx.OpRng(0).Uniform());
}

bool FrameIs(const Decoded& d, size_t i, const std::vector<uint8_t>& frame) {
  return std::equal(frame.begin(), frame.end(), d.row.begin() + i * frame.size());
}

using testing::MovingClip;

// The exact decode (seeks to keyframes, B-frames skipped) over clips with and without
// B-frames, MP4 and MKV, 1 and 2 decoder threads, and many sets of times: every frame
// taken is byte for byte the one the plain decode shows at its time.
TEST(VideoDecode, ExactFramesAreThoseOfAPlainDecodeOverManyClipsAndTimes) {
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> clips = {
      {"b-pyramid mp4", BFrameClip()},
      {"2 b-frames, gop 30", MovingClip(120, 30, 30, 2)},
      {"no b-frames, gop 30", MovingClip(120, 30, 30, 0)},
      {"b-pyramid mkv", MovingClip(100, 25, 25, -1, "mkv")},
  };
  int checked = 0;
  for (const auto& [name, clip] : clips) {
    const PlainDecode plain = DecodeEveryFrame(clip, VideoDecodeSpec{.width = 24, .height = 16});
    ASSERT_GT(plain.frames.size(), 90u) << name;
    for (int threads : {1, 2}) {
      for (int frames : {1, 4, 8, 13}) {
        for (double clip_seconds : {0.0, 1.0, 2.5}) {
          for (uint64_t seed : {1u, 2u, 3u}) {
            const VideoDecodeSpec spec{.frames = frames, .width = 24, .height = 16,
                                       .clip_seconds = clip_seconds, .threads = threads};
            const Decoded d = DecodeWith(spec, clip, seed);
            ASSERT_TRUE(d.status.ok()) << name << ": " << d.status.ToString();
            const std::vector<double> times = TimesFor(spec, plain, seed);
            for (int i = 0; i < frames; ++i) {
              const size_t shown = plain.ShownAt(times[i]);
              ASSERT_TRUE(FrameIs(d, i, plain.frames[shown]))
                  << name << ", threads " << threads << ", " << frames << " frames, clip "
                  << clip_seconds << ", seed " << seed << ": frame " << i << " at "
                  << times[i] << " s is not frame " << shown;
              ++checked;
            }
            EXPECT_EQ(d.frames_taken, frames);
            EXPECT_GE(d.frames_decoded, 1);
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

// seek: keyframe takes, for each time, the keyframe that shows nearest it (the plain
// decode's frame, byte for byte), decoding one frame per keyframe taken.
TEST(VideoDecode, KeyframeModeTakesTheNearestKeyframeDecodingOneFrameEach) {
  for (const std::vector<uint8_t>& clip : {BFrameClip(), MovingClip(120, 30, 30, 0)}) {
    const PlainDecode plain = DecodeEveryFrame(clip, VideoDecodeSpec{.width = 24, .height = 16});
    for (int frames : {1, 3, 8, 16}) {
      for (uint64_t seed : {1u, 2u}) {
        const VideoDecodeSpec spec{.frames = frames, .width = 24, .height = 16,
                                   .clip_seconds = frames > 8 ? 2.0 : 0.0,
                                   .seek = VideoSeek::kKeyframe};
        const Decoded d = DecodeWith(spec, clip, seed);
        ASSERT_TRUE(d.status.ok()) << d.status.ToString();
        const std::vector<double> times = TimesFor(spec, plain, seed);
        std::vector<size_t> keys;
        for (int i = 0; i < frames; ++i) {
          const size_t key = plain.NearestKeyframe(times[i]);
          EXPECT_TRUE(FrameIs(d, i, plain.frames[key]))
              << frames << " frames: frame " << i << " at " << times[i] << " s is not keyframe "
              << key;
          if (keys.empty() || keys.back() != key) keys.push_back(key);
        }
        EXPECT_EQ(d.frames_decoded, static_cast<int64_t>(keys.size())) << frames << " frames";
        EXPECT_EQ(d.frames_taken, frames);
      }
    }
  }
}

// skip_loop_filter: the references decode as before, so a clip without B-frames gives
// the same bytes; with B-frames, the non-reference frames taken differ, a little.
TEST(VideoDecode, SkipLoopFilterChangesOnlyNonReferenceFramesALittle) {
  const VideoDecodeSpec exact{.frames = 8, .width = 24, .height = 16};
  VideoDecodeSpec skip = exact;
  skip.skip_loop_filter = true;
  const std::vector<uint8_t> p_only = MovingClip(120, 30, 30, 0);
  EXPECT_EQ(DecodeWith(skip, p_only).row, DecodeWith(exact, p_only).row);
  const Decoded a = DecodeWith(exact, BFrameClip()), b = DecodeWith(skip, BFrameClip());
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  double diff = 0;
  for (size_t i = 0; i < a.row.size(); ++i) diff += std::abs(a.row[i] - b.row[i]);
  EXPECT_LT(diff / a.row.size(), 4.0);
}

// An MP4 whose sync-sample table (stss, the keyframe index) is replaced by `entries`
// (1-based frame numbers; the table keeps its size, so there must be as many).
std::vector<uint8_t> WithSyncSamples(std::vector<uint8_t> mp4, const std::vector<uint32_t>& entries) {
  const std::string_view tag = "stss";
  auto at = std::search(mp4.begin(), mp4.end(), tag.begin(), tag.end());
  EXPECT_NE(at, mp4.end()) << "no stss box";
  if (at == mp4.end()) return mp4;
  const size_t body = static_cast<size_t>(at - mp4.begin()) + 4 + 4;  // after version/flags
  const auto be32 = [&](size_t i) {
    return uint32_t{mp4[i]} << 24 | uint32_t{mp4[i + 1]} << 16 | uint32_t{mp4[i + 2]} << 8 |
           mp4[i + 3];
  };
  EXPECT_EQ(be32(body), entries.size()) << "the clip's stss holds another count";
  for (size_t k = 0; k < entries.size(); ++k) {
    for (int b = 0; b < 4; ++b) {
      mp4[body + 4 + 4 * k + b] = static_cast<uint8_t>(entries[k] >> (24 - 8 * b));
    }
  }
  return mp4;
}

// A keyframe index that lies: frames listed as keyframes that are not (B- and P-frames),
// entries out of order, an entry past the end. The exact decode still takes the plain
// decode's frames (the lie is caught where it restarts, and the sample decoded from the
// start); seek: keyframe takes real keyframes only, or, caught, the exact frames.
TEST(VideoDecode, AKeyframeIndexThatLiesFallsBackToTheExactFrames) {
  // BFrameClip: keyframes at frames 1, 26, 51, 76 (1-based).
  const std::vector<std::pair<std::string, std::vector<uint32_t>>> lies = {
      {"not keyframes", {1, 33, 58, 83}},
      {"not keyframes after the first", {1, 30, 31, 90}},
      {"out of order", {1, 51, 26, 76}},
      {"past the end", {1, 26, 51, 400}},
  };
  const VideoDecodeSpec size{.width = 24, .height = 16};
  const PlainDecode plain = DecodeEveryFrame(BFrameClip(), size);
  for (const auto& [name, entries] : lies) {
    const std::vector<uint8_t> clip = WithSyncSamples(BFrameClip(), entries);
    for (VideoSeek seek : {VideoSeek::kExact, VideoSeek::kKeyframe}) {
      for (int threads : {1, 2}) {
        for (int frames : {3, 8}) {
          const VideoDecodeSpec spec{.frames = frames, .width = 24, .height = 16,
                                     .threads = threads, .seek = seek};
          const Decoded d = DecodeWith(spec, clip);
          ASSERT_TRUE(d.status.ok()) << name << ": " << d.status.ToString();
          const std::vector<double> times = TimesFor(spec, plain, 1);
          for (int i = 0; i < frames; ++i) {
            const bool exact = FrameIs(d, i, plain.frames[plain.ShownAt(times[i])]);
            bool a_keyframe = false;
            for (size_t k = 0; k < plain.frames.size(); ++k) {
              a_keyframe |= plain.key[k] && FrameIs(d, i, plain.frames[k]);
            }
            if (seek == VideoSeek::kExact) {
              EXPECT_TRUE(exact) << name << ", threads " << threads << ": frame " << i;
            } else {
              EXPECT_TRUE(exact || a_keyframe)
                  << name << ", threads " << threads << ": frame " << i << " at " << times[i]
                  << " s is neither the frame shown nor a keyframe";
            }
          }
        }
      }
    }
  }
}

TEST(VideoDecode, AClipInTheCenterSeeksToIt) {
  VideoDecodeSpec spec{.frames = 2, .width = 16, .height = 16, .clip_seconds = 1.0,
                       .clip_start = ClipStart::kCenter};
  const Decoded d = DecodeWith(spec, Clip());
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_EQ(FramesOf(d, spec), (std::vector<int>{12, 17}));  // 1.25 s and 1.75 s
}

TEST(VideoDecode, FpsSpacesFramesAndTheLastFrameStaysPastTheEnd) {
  VideoDecodeSpec spec{.frames = 4, .width = 16, .height = 16, .fps = 5, .clip_seconds = 1,
                       .clip_start = ClipStart::kStart};
  Decoded d = DecodeWith(spec, Clip());
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_EQ(FramesOf(d, spec), (std::vector<int>{0, 2, 4, 6}));
  spec = VideoDecodeSpec{.frames = 5, .width = 16, .height = 16, .fps = 1};
  d = DecodeWith(spec, Clip());
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_EQ(FramesOf(d, spec), (std::vector<int>{0, 10, 20, 29, 29}));
}

TEST(VideoDecode, RandomClipsAreSeededPerSample) {
  VideoDecodeSpec spec{.frames = 2, .width = 16, .height = 16, .clip_seconds = 0.5};
  std::vector<std::vector<int>> seen;
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u, 1u}) {
    const Decoded d = DecodeWith(spec, Clip(), seed);
    ASSERT_TRUE(d.status.ok()) << d.status.ToString();
    seen.push_back(FramesOf(d, spec));
    EXPECT_LE(seen.back()[1] - seen.back()[0], 3);  // within one half-second clip
  }
  EXPECT_EQ(seen.front(), seen.back());  // the same seed, the same clip
  EXPECT_NE(std::count(seen.begin(), seen.end(), seen.front()), 5) << "seeds pick other clips";
}

// The same pixels channels last, within the rounding of swscale's two output paths
// (planar GBR and packed RGB).
TEST(VideoDecode, ThwcHoldsTheSamePixelsChannelsLast) {
  VideoDecodeSpec chw{.frames = 2, .width = 8, .height = 6};
  VideoDecodeSpec hwc = chw;
  hwc.layout = VideoLayout::kTHWC;
  const Decoded a = DecodeWith(chw, Clip()), b = DecodeWith(hwc, Clip());
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  const size_t plane = 8 * 6;
  for (size_t t = 0; t < 2; ++t) {
    for (size_t p = 0; p < plane; ++p) {
      for (size_t c = 0; c < 3; ++c) {
        ASSERT_NEAR(a.row[t * 3 * plane + c * plane + p], b.row[t * 3 * plane + 3 * p + c], 3);
      }
    }
  }
}

TEST(VideoDecode, BadVideosAreNamedErrors) {
  const std::vector<uint8_t>& clip = Clip();
  const VideoDecodeSpec spec{.frames = 2, .width = 8, .height = 8};
  const Decoded truncated = DecodeWith(spec, std::vector<uint8_t>(clip.begin(), clip.begin() + clip.size() / 2));
  EXPECT_EQ(truncated.status.code(), StatusCode::kCorruptData);
  const Decoded garbage = DecodeWith(spec, std::vector<uint8_t>(5000, 0x42));
  EXPECT_EQ(garbage.status.code(), StatusCode::kCorruptData);
  EXPECT_THAT(garbage.status.message(), HasSubstr("not a media container"));
  const Decoded empty = DecodeWith(spec, std::vector<uint8_t>());
  EXPECT_EQ(empty.status.code(), StatusCode::kCorruptData);
}

// The decode allowance (memory.decode_bytes_per_thread): a video whose declared size
// needs more than it for the fewest frames a decoder holds fails before any frame is
// decoded; one whose decoder then holds more frames than it allows fails when it asks
// for them; within it, the frames are those of an unbounded decode.
TEST(VideoDecode, TheDecodeAllowanceBoundsTheFramesTheDecoderHolds) {
  av::VideoClip c;
  c.width = 320;
  c.height = 240;
  c.frames = 12;
  c.gop = 12;
  c.b_frames = -1;  // libx264's default: references and B-frames held
  c.paint = [](int frame, uint8_t* rgb) {
    for (int i = 0; i < 320 * 240 * 3; ++i) rgb[i] = static_cast<uint8_t>(i * 7 + frame * 31);
  };
  auto clip = av::EncodeVideo(c);
  ASSERT_TRUE(clip.ok()) << clip.status().ToString();
  const VideoDecodeSpec spec{.frames = 4, .width = 32, .height = 24};
  const int64_t frame = 320 * 240 * 3 / 2;
  const Decoded header = DecodeWith(spec, *clip, 1, 2 * frame);
  EXPECT_EQ(header.status.code(), StatusCode::kResourceExhausted) << header.status.ToString();
  EXPECT_THAT(header.status.message(), HasSubstr("the video is 320x240"));
  EXPECT_THAT(header.status.message(), HasSubstr("memory.decode_bytes_per_thread"));
  // Enough for the header's three frames, not for what the decoder holds as it decodes.
  const Decoded held = DecodeWith(spec, *clip, 1, 3 * frame + 1);
  EXPECT_EQ(held.status.code(), StatusCode::kResourceExhausted) << held.status.ToString();
  EXPECT_THAT(held.status.message(), HasSubstr("the decoder's frames (320x240)"));
  // A raw H.264 stream declares no size: the probe that reads it from the SPS decodes
  // under the allowance's pixel limit, and the size it finds is checked as a
  // container's (it decoded at full size before: 2.3-3.8 GB for a 16000x16000 SPS).
  auto raw = av::EncodeVideo(c, "h264");
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  const Decoded probed = DecodeWith(spec, *raw, 1, 2 * frame);
  EXPECT_EQ(probed.status.code(), StatusCode::kResourceExhausted) << probed.status.ToString();
  EXPECT_THAT(probed.status.message(), HasSubstr("the video is 320x240"));
  const Decoded unbounded = DecodeWith(spec, *clip);
  const Decoded bounded = DecodeWith(spec, *clip, 1, 64 * frame);
  ASSERT_TRUE(unbounded.status.ok()) << unbounded.status.ToString();
  ASSERT_TRUE(bounded.status.ok()) << bounded.status.ToString();
  EXPECT_EQ(bounded.row, unbounded.row);
}

TEST(VideoDecode, ValidateNamesTheKey) {
  VideoDecodeSpec spec;
  spec.frames = 0;
  EXPECT_THAT(VideoDecodeOp::Validate(spec, "ops[0].video.decode").message(),
              HasSubstr("ops[0].video.decode.frames: must be in [1, 4096]"));
  spec = VideoDecodeSpec{};
  spec.clip_seconds = -1;
  EXPECT_THAT(VideoDecodeOp::Validate(spec, "v").message(), HasSubstr("v.clip_seconds"));
  spec = VideoDecodeSpec{};
  spec.seek = static_cast<VideoSeek>(7);
  EXPECT_THAT(VideoDecodeOp::Validate(spec, "v").message(),
              HasSubstr("v.seek: invalid value 7 (allowed: exact, keyframe)"));
}

TEST(FrameTimes, UnknownDurationTakesTheFirstFrames) {
  const VideoDecodeSpec spec{.frames = 3, .fps = 2};
  EXPECT_EQ(FrameTimes(spec, 0, 0.5), (std::vector<double>{0, 0.5, 1.0}));
  const VideoDecodeSpec random{.frames = 1, .clip_seconds = 2};
  EXPECT_DOUBLE_EQ(FrameTimes(random, 10, 0.25)[0], 2.0 + 1.0);  // begin 8 * 0.25, mid 1 s
}

}  // namespace
}  // namespace headrace

namespace headrace {
namespace {

// Fuzz-style: damaged clips (bytes flipped, cut, zeroed, seeded) never crash the op; each
// gives ok or a status (the suite runs under ASan/UBSan too). Damage in the middle of a
// clip is mostly concealed by the decoder: some must still decode.
TEST(VideoDecode, DamagedClipsGiveAStatusNeverACrash) {
  const std::vector<uint8_t>& clip = Clip();
  Rng rng(HashKeys(7, 7));
  const VideoDecodeSpec spec{.frames = 3, .width = 16, .height = 12, .clip_seconds = 1.0};
  int ok = 0;
  for (int round = 0; round < 120; ++round) {
    std::vector<uint8_t> bytes = clip;
    switch (round % 3) {
      case 0:  // flip a few bytes
        for (int k = 0; k < 1 + round % 7; ++k) bytes[rng.Next() % bytes.size()] ^= 0xFF;
        break;
      case 1:  // cut the end off
        bytes.resize(rng.Next() % bytes.size());
        break;
      case 2: {  // zero a run
        const size_t at = rng.Next() % bytes.size();
        std::fill(bytes.begin() + at, bytes.begin() + std::min(bytes.size(), at + 64), 0);
        break;
      }
    }
    ok += DecodeWith(spec, bytes, round).status.ok();
  }
  EXPECT_GT(ok, 0);
}

}  // namespace
}  // namespace headrace
