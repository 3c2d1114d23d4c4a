#include "headrace/ops/video/patchify.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "headrace/core/ragged_rows.h"
#include "headrace/ops/av/av_input.h"
#include "headrace/ops/video/test_clips.h"

extern "C" {
#include <libavcodec/packet.h>
#include <libavutil/frame.h>
#include <libavutil/imgutils.h>
}

namespace headrace {
namespace video_patchify_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

FrameSampling Qwen2(double fps) {
  return FrameSampling{.model = VisionModel::kQwen2Vl, .fps = fps};
}
FrameSampling Qwen3(double fps) {
  return FrameSampling{.model = VisionModel::kQwen3Vl, .fps = fps};
}

TEST(SampleFrameIndices, Qwen2SamplesByFpsInAMultipleOfTheTemporalPatch) {
  // 30 frames at 10 fps, 2 wanted a second: 6 frames, 5 apart.
  EXPECT_THAT(*SampleFrameIndices(Qwen2(2), 30, 10), ElementsAre(0, 5, 10, 15, 20, 25));
  // 5 frames: min_frames 4 (a multiple of 2), arange(0, 5, 1.25).int().
  EXPECT_THAT(*SampleFrameIndices(Qwen2(2), 5, 10), ElementsAre(0, 1, 2, 3));
  // 7 frames at 1 fps asked 2 a second: 14 capped at floor(7 / 2) * 2 = 6.
  EXPECT_THAT(*SampleFrameIndices(Qwen2(2), 7, 1), ElementsAre(0, 1, 2, 3, 4, 5));
  FrameSampling fixed = Qwen2(2);
  fixed.num_frames = 3;  // rounded to 4
  EXPECT_THAT(*SampleFrameIndices(fixed, 8, 10), ElementsAre(0, 2, 4, 6));
}

TEST(SampleFrameIndices, Qwen2RefusesAClipShorterThanATemporalPatch) {
  const auto r = SampleFrameIndices(Qwen2(2), 1, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("fewer than temporal_patch_size 2"));
}

TEST(SampleFrameIndices, Qwen3SpreadsFramesWithLinspaceRoundedHalfToEven) {
  // int(30 / 10 * 2) = 6: linspace(0, 29, 6) = 0, 5.8, 11.6, 17.4, 23.2, 29.
  EXPECT_THAT(*SampleFrameIndices(Qwen3(2), 30, 10), ElementsAre(0, 6, 12, 17, 23, 29));
  // 4 frames: min_frames 4 -> all of them.
  EXPECT_THAT(*SampleFrameIndices(Qwen3(2), 4, 10), ElementsAre(0, 1, 2, 3));
  FrameSampling three = Qwen3(2);
  three.num_frames = 3;  // linspace(0, 3, 3) = 0, 1.5, 3: 1.5 rounds to 2
  EXPECT_THAT(*SampleFrameIndices(three, 4, 10), ElementsAre(0, 2, 3));
}

TEST(GroupTimestamps, AveragesEachGroupsFirstAndLastFrameTime) {
  const std::vector<int64_t> six = {0, 6, 12, 17, 23, 29};
  const std::vector<double> t = GroupTimestamps(six, 10, 2);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_DOUBLE_EQ(t[0], 0.3);
  EXPECT_DOUBLE_EQ(t[1], 1.45);
  EXPECT_DOUBLE_EQ(t[2], 2.6);
  // An odd count: the last group repeats its frame.
  const std::vector<int64_t> three = {0, 5, 10};
  EXPECT_THAT(GroupTimestamps(three, 10, 2), ElementsAre(0.25, 1.0));
}

std::pair<int, int> WH(const Result<ImageSize>& s) {
  return s.ok() ? std::pair<int, int>{s->width, s->height} : std::pair<int, int>{-1, -1};
}

TEST(SmartResizeVideoSize, MatchesQwen3VlsRuleOverFramesTimesPixels) {
  SmartResizeRule rule{.patch_size = 16, .merge_size = 2, .min_pixels = 4096,
                       .max_pixels = 25165824};
  // Values from transformers' qwen3_vl smart_resize.
  EXPECT_EQ(WH(SmartResizeVideoSize(16, 2, 1280, 720, rule)), (std::pair<int, int>{1280, 704}));
  rule.max_pixels = 32 * 32 * 100;
  EXPECT_EQ(WH(SmartResizeVideoSize(5, 2, 1280, 720, rule)), (std::pair<int, int>{160, 96}));
  rule.max_pixels = 25165824;
  EXPECT_EQ(WH(SmartResizeVideoSize(4, 2, 600, 20, rule)), (std::pair<int, int>{960, 32}));
  rule.min_pixels = 200000;
  EXPECT_EQ(WH(SmartResizeVideoSize(3, 2, 90, 100, rule)), (std::pair<int, int>{256, 288}));
  EXPECT_FALSE(SmartResizeVideoSize(1, 2, 90, 100, rule).ok());
}

TEST(ResolveVideoPatchify, EachPresetGivesItsGeometryVideoRangeAndSamplingRule) {
  VideoPatchifyRules r = ResolveVideoPatchify(VideoPatchifySpec{.preset = VisionModel::kQwen3Vl});
  EXPECT_EQ(r.patch.patch_size, 16);
  EXPECT_EQ(r.size.min_pixels, 4096);
  EXPECT_EQ(r.size.max_pixels, 25165824);
  EXPECT_TRUE(r.volume_bound);
  EXPECT_EQ(r.sampling.model, VisionModel::kQwen3Vl);
  EXPECT_FLOAT_EQ(r.patch.mean[0], 0.5f);
  r = ResolveVideoPatchify(
      VideoPatchifySpec{.preset = VisionModel::kQwen2_5Vl, .max_pixels = 1000});
  EXPECT_EQ(r.patch.patch_size, 14);
  EXPECT_EQ(r.size.min_pixels, 3136);
  EXPECT_EQ(r.size.max_pixels, 1000);  // an explicit key overrides the preset
  EXPECT_FALSE(r.volume_bound);
  EXPECT_EQ(r.sampling.model, VisionModel::kQwen2Vl);  // Qwen2.5-VL samples as Qwen2-VL
  r = ResolveVideoPatchify(VideoPatchifySpec{});  // Qwen2VLVideoProcessor's class defaults
  EXPECT_EQ(r.size.min_pixels, 128 * 28 * 28);
  EXPECT_EQ(r.size.max_pixels, 768 * 28 * 28);
}

// 30 frames at 10 fps (3 s), frame i a flat colour whose red is 8 i.
const std::vector<uint8_t>& Clip() {
  static const std::vector<uint8_t> clip =
      testing::FlatColourClip(30, [](int) { return 128; });
  return clip;
}

// Rows as Declare adds them: 0 pixel_values_videos, 1 its lengths, 2 video_grid_thw,
// 3 video_timestamps, 4 its lengths.
struct Fixture {
  std::vector<FieldSpec> fields;
  RaggedRows ragged;
  int64_t grid[3] = {-1, -1, -1};
  std::vector<uint8_t*> rows;
  std::vector<Value> values = std::vector<Value>(1);
  ScratchArena scratch;
  SampleContext ctx;

  explicit Fixture(int64_t patch_dim)
      : fields{FieldSpec{"pixel_values_videos", DType::kF32, {patch_dim}, FieldLayout::kRagged},
               FieldSpec{"pixel_values_videos_lengths", DType::kI32, {}, FieldLayout::kLengths},
               FieldSpec{"video_grid_thw", DType::kI64, {3}},
               FieldSpec{"video_timestamps", DType::kF32, {}, FieldLayout::kRagged},
               FieldSpec{"video_timestamps_lengths", DType::kI32, {}, FieldLayout::kLengths}},
        ragged(fields, std::shared_ptr<Allocator>(DefaultAllocator(), [](Allocator*) {})) {
    rows = {nullptr, nullptr, reinterpret_cast<uint8_t*>(grid), nullptr, nullptr};
    ctx.scratch = &scratch;
    ctx.values = values;
    ctx.rows = rows.data();
    ctx.ragged = &ragged;
  }
  template <typename T>
  std::vector<T> Values(int field) const {
    const auto bytes = ragged.bytes(field);
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
};

VideoPatchifySpec Identity(VisionModel preset) {
  return VideoPatchifySpec{.preset = preset, .patch_size = 8, .merge_size = 2,
                           .mean = std::array<float, 3>{0, 0, 0},
                           .std = std::array<float, 3>{1, 1, 1}, .min_pixels = 16 * 16,
                           .max_pixels = 64 * 48 * 8};
}

std::unique_ptr<VideoPatchifyOp> MakeOp(const VideoPatchifySpec& spec) {
  EXPECT_TRUE(VideoPatchifyOp::Validate(spec, "video.patchify").ok());
  VideoPatchifyRules rules = ResolveVideoPatchify(spec);
  PatchifyKernel kernel = *PatchifyKernel::Make(rules.patch);
  return std::make_unique<VideoPatchifyOp>(std::move(rules), std::move(kernel), spec.resample,
                                           1, 0, 0, 2, 3, 0);
}

TEST(VideoPatchifyOp, WritesTheSampledFramesGroupedByTwoWithTheirGridAndTimestamps) {
  const auto op = MakeOp(Identity(VisionModel::kNone));  // Qwen2-VL's sampling
  Fixture f(3 * 2 * 8 * 8);
  f.values[0] = EncodedBytes{Clip().data(), Clip().size()};
  const Status s = op->Run(f.ctx);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // Frames 0, 5, ..., 25 at 64x48 (multiples of 16 already): 3 groups of 6x8 patches.
  EXPECT_EQ(std::vector<int64_t>(f.grid, f.grid + 3), (std::vector<int64_t>{3, 6, 8}));
  ASSERT_EQ(f.ragged.rows(0), 3 * 6 * 8);
  ASSERT_EQ(f.ragged.lengths(0).size(), 1u);
  const std::vector<float> px = f.Values<float>(0);
  // Row r of group g: its red channel holds frame 10 g then 10 g + 5 (k = 0, 1).
  for (int g = 0; g < 3; ++g) {
    const float* row = px.data() + static_cast<size_t>(g) * 48 * (3 * 2 * 64) + 17 * (3 * 2 * 64);
    EXPECT_NEAR(row[0] * 255, 8 * (10 * g), 3) << g;
    EXPECT_NEAR(row[64] * 255, 8 * (10 * g + 5), 3) << g;
    EXPECT_NEAR(row[2 * 64] * 255, 128, 3) << g;  // green, k = 0
  }
  // (0 + 0.5) / 2 = 0.25 prints as 0.2 (half to even on the exact binary value), then
  // 1.25 -> 1.2 and 2.25 -> 2.2, as Qwen3VLProcessor's f"{t:.1f}".
  EXPECT_THAT(f.Values<float>(3), ElementsAre(0.2f, 1.2f, 2.2f));
  ASSERT_EQ(f.ragged.lengths(3).size(), 1u);
}

TEST(VideoPatchifyOp, Qwen3SamplingAndTheVolumeBoundGiveItsGrid) {
  VideoPatchifySpec spec = Identity(VisionModel::kQwen3Vl);
  spec.max_pixels = 6 * 32 * 32;  // frames * h * w: 6 frames of 32x32 at most
  const auto op = MakeOp(spec);
  Fixture f(3 * 2 * 8 * 8);
  f.values[0] = EncodedBytes{Clip().data(), Clip().size()};
  const Status s = op->Run(f.ctx);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // 6 frames (0, 6, 12, 17, 23, 29); 64x48 divided by sqrt(6 * 64 * 48 / 6144) = 1.73
  // and floored to multiples of 16: 32x16.
  EXPECT_EQ(std::vector<int64_t>(f.grid, f.grid + 3), (std::vector<int64_t>{3, 2, 4}));
  const std::vector<float> px = f.Values<float>(0);
  EXPECT_NEAR(px[64] * 255, 8 * 6, 3);  // group 0, frame k = 1 is frame 6
  EXPECT_THAT(f.Values<float>(3), ElementsAre(0.3f, 1.4f, 2.6f));  // 1.45 is 1.4499999...
}

// A frame's planes packed: what two walks compare byte for byte.
std::vector<uint8_t> Pixels(const AVFrame& frame) {
  const auto format = static_cast<AVPixelFormat>(frame.format);
  std::vector<uint8_t> out(static_cast<size_t>(
      av_image_get_buffer_size(format, frame.width, frame.height, 1)));
  av_image_copy_to_buffer(out.data(), static_cast<int>(out.size()), frame.data, frame.linesize,
                          format, frame.width, frame.height, 1);
  return out;
}

struct Walked {
  Status status;
  FramesAtIndices result;
  std::vector<std::vector<uint8_t>> frames;  // per position of the indices
};

Walked Walk(const std::vector<uint8_t>& clip, const std::vector<int64_t>& indices,
            FrameWalk walk, int threads) {
  Walked w;
  w.frames.resize(indices.size());
  const auto open = [&] {
    return av::Input::Open(clip.data(), clip.size(), av::Input::Media::kVideo, threads);
  };
  auto in = open();
  if (!in.ok()) {
    w.status = in.status();
    return w;
  }
  auto r = DecodeAtIndices(std::move(*in), open, indices, walk,
                           [&](size_t first, size_t last, const AVFrame& frame) {
                             for (size_t k = first; k < last; ++k) w.frames[k] = Pixels(frame);
                             return Status::Ok();
                           });
  w.status = r.status();
  if (r.ok()) w.result = *r;
  return w;
}

// The walk video.patchify takes (the packets' order tells each frame's index; the
// unreferenced frames not taken are left undecoded; it stops after the last one) gives,
// byte for byte, the frames a decode of every frame counts to: clips with B-pyramid,
// 2 B-frames, none, and MKV, 1 and 2 decoder threads, index sets as the presets sample
// (spread, every k-th, repeats, the first and last frames, past the end).
TEST(DecodeAtIndices, TheNeededWalkTakesTheFramesOfADecodeOfEveryFrame) {
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> clips = {
      {"b-pyramid mp4", testing::MovingClip(100, 25, 25, -1)},
      {"2 b-frames, gop 30", testing::MovingClip(120, 30, 30, 2)},
      {"no b-frames, gop 30", testing::MovingClip(120, 30, 30, 0)},
      {"b-pyramid mkv", testing::MovingClip(100, 25, 25, -1, "mkv")},
  };
  const std::vector<std::vector<int64_t>> index_sets = {
      {0, 12, 25, 37, 50, 62, 75, 87},   // Qwen2's arange at 2 fps of 25
      {0, 14, 28, 43, 57, 71, 85, 99},   // Qwen3's linspace
      {0, 0, 1, 1, 2, 3, 3, 4},          // more frames than the clip: repeats
      {5},
      {99},
      {3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13},
      {40, 41, 97, 98, 99, 130, 140},     // past the end of a 100-frame clip
  };
  int compared = 0;
  for (const auto& [name, clip] : clips) {
    for (int threads : {1, 2}) {
      for (const std::vector<int64_t>& indices : index_sets) {
        const Walked every = Walk(clip, indices, FrameWalk::kEveryFrame, threads);
        const Walked needed = Walk(clip, indices, FrameWalk::kNeeded, threads);
        ASSERT_TRUE(every.status.ok()) << name << ": " << every.status.ToString();
        ASSERT_TRUE(needed.status.ok()) << name << ": " << needed.status.ToString();
        EXPECT_FALSE(needed.result.fell_back) << name;
        ASSERT_EQ(needed.result.filled, every.result.filled) << name << ", " << threads;
        for (size_t k = 0; k < every.result.filled; ++k) {
          ASSERT_FALSE(every.frames[k].empty());
          ASSERT_EQ(needed.frames[k], every.frames[k])
              << name << ", threads " << threads << ": position " << k << ", frame "
              << indices[k];
          ++compared;
        }
        // Never more pictures than the decode of every frame, and fewer where some are
        // B-frames nothing references or frames follow the last one taken.
        EXPECT_LE(needed.result.decoded, every.result.decoded) << name;
        if (name != "no b-frames, gop 30" && indices.back() < 90) {
          EXPECT_LT(needed.result.decoded, every.result.decoded) << name;
        }
      }
    }
  }
  EXPECT_GT(compared, 300);
}

// Frames further apart than the keyframes: decoding restarts at the last keyframe that
// shows by each (read on, the packets between dropped undecoded), and the frames are
// still those of a decode of every frame.
TEST(DecodeAtIndices, FramesFurtherApartThanTheKeyframesRestartAtTheKeyframeBeforeEach) {
  for (const char* container : {"mp4", "mkv"}) {
    const std::vector<uint8_t> clip = testing::MovingClip(300, 25, 25, -1, container);
    const std::vector<int64_t> indices = {0, 100, 160, 230, 299};  // keyframes at 0, 25, ...
    const Walked every = Walk(clip, indices, FrameWalk::kEveryFrame, 1);
    const Walked needed = Walk(clip, indices, FrameWalk::kNeeded, 1);
    ASSERT_TRUE(every.status.ok()) << every.status.ToString();
    ASSERT_TRUE(needed.status.ok()) << needed.status.ToString();
    EXPECT_FALSE(needed.result.fell_back) << container;
    ASSERT_EQ(needed.result.filled, indices.size()) << container;
    ASSERT_EQ(every.result.filled, indices.size()) << container;
    for (size_t k = 0; k < indices.size(); ++k) {
      EXPECT_EQ(needed.frames[k], every.frames[k]) << container << ": frame " << indices[k];
    }
    // From 0, 100, 150, 225 and 275: at most 1 + 1 + 11 + 6 + 25 references and the frames
    // taken, against the 300 of the clip.
    EXPECT_GE(every.result.decoded, 299) << container;
    EXPECT_LE(needed.result.decoded, 60) << container;
  }
}

// A clip whose frames do not come out as its packets say falls back to decoding every
// frame, and gives its frames: here a packet the decoder refuses (its first NAL's length
// overwritten: past the packet's end) — the first reference picture after the keyframe
// at 1 s, which frame 37 needs: a decode of every frame does not count it, so every
// later frame's index is one less than its packet's rank. (A damaged packet that no
// frame taken needs is read and dropped like any other: frames are indexed by packets.)
TEST(DecodeAtIndices, AStreamThatDoesNotDecodeAsItsPacketsSayFallsBackToEveryFrame) {
  std::vector<uint8_t> clip = testing::MovingClip(100, 25, 25, -1);
  {
    auto in = av::Input::Open(clip.data(), clip.size(), av::Input::Media::kVideo, 1);
    ASSERT_TRUE(in.ok()) << in.status().ToString();
    av::PacketPtr packet = av::NewPacket();
    int keyframes = 0;
    for (;;) {
      ASSERT_TRUE(*(*in)->ReadPacket(packet.get()));
      if (packet->flags & AV_PKT_FLAG_KEY) {
        ++keyframes;
      } else if (keyframes == 2 && packet->size > 4 && (packet->data[4] & 0x60) != 0) {
        break;  // AVCC: a 4-byte length, then the NAL header; nal_ref_idc != 0
      }
    }
    ASSERT_GT(packet->pos, 0);  // the MP4 sample's offset in the file
    for (int64_t b = packet->pos; b < packet->pos + 4; ++b) clip[static_cast<size_t>(b)] = 0xFF;
  }
  const std::vector<int64_t> indices = {0, 12, 25, 37, 50, 62, 75, 87};
  const Walked every = Walk(clip, indices, FrameWalk::kEveryFrame, 1);
  const Walked needed = Walk(clip, indices, FrameWalk::kNeeded, 1);
  ASSERT_TRUE(every.status.ok()) << every.status.ToString();
  ASSERT_TRUE(needed.status.ok()) << needed.status.ToString();
  EXPECT_TRUE(needed.result.fell_back);
  ASSERT_EQ(needed.result.filled, every.result.filled);
  ASSERT_EQ(needed.result.filled, indices.size());
  for (size_t k = 0; k < every.result.filled; ++k) {
    EXPECT_EQ(needed.frames[k], every.frames[k]) << "position " << k;
  }
}

TEST(VideoPatchifyOp, ReportsFramesDecodedAndTaken) {
  const auto op = MakeOp(Identity(VisionModel::kNone));
  Fixture f(3 * 2 * 8 * 8);
  f.values[0] = EncodedBytes{Clip().data(), Clip().size()};
  ASSERT_TRUE(op->Run(f.ctx).ok());
  EXPECT_EQ(f.ctx.frames_taken, 6);  // frames 0, 5, ..., 25
  EXPECT_GE(f.ctx.frames_decoded, 6);
  EXPECT_LE(f.ctx.frames_decoded, 30);
}

TEST(VideoPatchifyOp, BadBytesAreTheSamplesCorruptData) {
  const auto op = MakeOp(Identity(VisionModel::kQwen2Vl));
  Fixture f(3 * 2 * 8 * 8);
  const std::vector<uint8_t> junk(100, 7);
  f.values[0] = EncodedBytes{junk.data(), junk.size()};
  EXPECT_EQ(op->Run(f.ctx).code(), StatusCode::kCorruptData);
  EXPECT_EQ(f.ragged.lengths(0).size(), 0u);  // nothing appended
}

TEST(VideoPatchifyOp, ValidateNamesTheKey) {
  VideoPatchifySpec spec = Identity(VisionModel::kQwen2Vl);
  spec.min_frames = 10;
  spec.max_frames = 5;
  EXPECT_THAT(VideoPatchifyOp::Validate(spec, "ops[1].video.patchify").message(),
              HasSubstr("ops[1].video.patchify.max_frames"));
  spec = Identity(VisionModel::kQwen2Vl);
  spec.timestamps_output = spec.output;
  EXPECT_THAT(VideoPatchifyOp::Validate(spec, "p").message(), HasSubstr("p.timestamps_output"));
}

}  // namespace
}  // namespace video_patchify_test
}  // namespace headrace
