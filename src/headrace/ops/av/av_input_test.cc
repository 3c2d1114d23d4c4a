#include "headrace/ops/av/av_input.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "headrace/ops/av/av_encode.h"

extern "C" {
#include <libavformat/avformat.h>
#include <libavformat/avio.h>
#include <libavutil/frame.h>
#include <libavutil/mem.h>
}

namespace headrace::av {
namespace {

constexpr int kWidth = 64, kHeight = 48, kFrames = 75, kFps = 25;

// 3 s at 25 fps, a keyframe every 15 frames, and libx264's default B-frames (up to 3 in
// a row, the middle one a reference: B-pyramid). A moving texture, so that the encoder
// uses them.
const std::vector<uint8_t>& BFrameClip() {
  static const std::vector<uint8_t> clip = [] {
    VideoClip c;
    c.width = kWidth;
    c.height = kHeight;
    c.frames = kFrames;
    c.fps = kFps;
    c.gop = 15;
    c.b_frames = -1;
    c.paint = [](int frame, uint8_t* rgb) {
      for (int y = 0; y < kHeight; ++y) {
        for (int x = 0; x < kWidth; ++x) {
          uint8_t* p = rgb + 3 * (y * kWidth + x);
          p[0] = static_cast<uint8_t>(3 * frame);
          p[1] = static_cast<uint8_t>((x + 2 * frame) * 9 ^ y * 5);
          p[2] = static_cast<uint8_t>((y + frame) * 7);
        }
      }
    };
    Result<std::vector<uint8_t>> bytes = EncodeVideo(c);
    EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
    return bytes.ok() ? *std::move(bytes) : std::vector<uint8_t>();
  }();
  return clip;
}

// A decoded frame's pixels (the three planes, rows without padding).
std::vector<uint8_t> Pixels(const AVFrame* f) {
  std::vector<uint8_t> out;
  for (int p = 0; p < 3; ++p) {
    const int w = p == 0 ? f->width : (f->width + 1) / 2;
    const int h = p == 0 ? f->height : (f->height + 1) / 2;
    for (int y = 0; y < h; ++y) {
      const uint8_t* row = f->data[p] + static_cast<ptrdiff_t>(y) * f->linesize[p];
      out.insert(out.end(), row, row + w);
    }
  }
  return out;
}

std::unique_ptr<Input> Open(int threads) {
  const std::vector<uint8_t>& clip = BFrameClip();
  Result<std::unique_ptr<Input>> in =
      Input::Open(clip.data(), clip.size(), Input::Media::kVideo, threads);
  EXPECT_TRUE(in.ok()) << in.status().ToString();
  return in.ok() ? *std::move(in) : nullptr;
}

// Every frame of a full decode, by presentation time in frames (time x fps, rounded).
std::map<int, std::vector<uint8_t>> DecodeAll() {
  std::map<int, std::vector<uint8_t>> frames;
  std::unique_ptr<Input> in = Open(1);
  FramePtr f = NewFrame();
  while (in != nullptr) {
    Result<bool> got = in->NextFrame(f.get());
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    if (!got.ok() || !*got) break;
    frames[static_cast<int>(std::lround(in->FrameTime(f.get()) * kFps))] = Pixels(f.get());
  }
  return frames;
}

int FrameIndex(const Input& in, const AVFrame* f) {
  return static_cast<int>(std::lround(in.FrameTime(f) * kFps));
}

TEST(AvInput, SkippingFramesShownBeforeATimeKeepsTheOthersBitIdentical) {
  const std::map<int, std::vector<uint8_t>> all = DecodeAll();
  ASSERT_EQ(all.size(), static_cast<size_t>(kFrames));
  for (int threads : {1, 3}) {
    for (const double wanted : {0.3, 1.06, 2.5}) {  // in frames 7.5, 26.5, 62.5
      SCOPED_TRACE(testing::Message() << "threads " << threads << ", t " << wanted);
      std::unique_ptr<Input> in = Open(threads);
      ASSERT_NE(in, nullptr);
      in->SkipUnreferencedBefore(wanted);
      const int shown = static_cast<int>(wanted * kFps);  // the frame on screen then
      FramePtr f = NewFrame();
      std::set<int> decoded;
      while (decoded.empty() || *decoded.rbegin() <= shown + 2) {
        Result<bool> got = in->NextFrame(f.get());
        ASSERT_TRUE(got.ok() && *got);
        const int index = FrameIndex(*in, f.get());
        EXPECT_TRUE(Pixels(f.get()) == all.at(index)) << "frame " << index << " differs";
        decoded.insert(index);
      }
      // The frame shown at the time, and each one after it, decode; some before it do not.
      for (int i = shown; i <= shown + 2; ++i) EXPECT_TRUE(decoded.count(i)) << i;
      const auto before = static_cast<int>(std::distance(decoded.begin(), decoded.find(shown)));
      EXPECT_LT(before, shown) << "no B-frame before it was skipped";
    }
  }
}

TEST(AvInput, SeekToKeyframeRestartsAtThatKeyframe) {
  const std::map<int, std::vector<uint8_t>> all = DecodeAll();
  std::unique_ptr<Input> in = Open(1);
  ASSERT_NE(in, nullptr);
  // The index's keyframes, by decode time; B-frames put each before its presentation.
  std::set<double> keys;
  for (double t = 0; t < 3; t += 0.01) {
    if (std::optional<double> key = in->IndexedKeyframeBefore(t)) keys.insert(*key);
  }
  ASSERT_EQ(keys.size(), 5u);
  FramePtr f = NewFrame();
  int expected = 0;
  for (const double key : keys) {  // forward, and then back to the second
    ASSERT_TRUE(in->SeekToKeyframe(key).ok());
    ASSERT_TRUE(*in->NextFrame(f.get()));
    EXPECT_EQ(FrameIndex(*in, f.get()), expected) << "restarted at another keyframe than " << key;
    EXPECT_TRUE(Pixels(f.get()) == all.at(expected)) << "frame " << expected << " differs";
    expected += 15;
  }
  ASSERT_TRUE(in->SeekToKeyframe(*std::next(keys.begin())).ok());
  ASSERT_TRUE(*in->NextFrame(f.get()));
  EXPECT_EQ(FrameIndex(*in, f.get()), 15);
}

// A format context that avformat_open_input never opened is freed, not closed as an
// input, and leaves its AVIOContext (custom I/O) to the IoPtr, which frees its buffer
// too: nothing leaks (the ASan build's leak check) or is freed twice.
TEST(AvHandles, FreeAFormatContextNeverOpenedAndItsIo) {
  constexpr int kBytes = 4096;
  auto* buffer = static_cast<uint8_t*>(av_malloc(kBytes));
  ASSERT_NE(buffer, nullptr);
  IoPtr io(avio_alloc_context(buffer, kBytes, 0, nullptr, nullptr, nullptr, nullptr));
  ASSERT_NE(io, nullptr);
  FormatPtr format(avformat_alloc_context());  // freed first: declared last
  ASSERT_NE(format, nullptr);
  format->pb = io.get();
  format->flags |= AVFMT_FLAG_CUSTOM_IO;
}

}  // namespace
}  // namespace headrace::av
