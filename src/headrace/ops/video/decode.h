// video.decode: N frames of a video (H.264 and whatever else the installed FFmpeg
// decodes, from MP4, MKV, WebM, ...), converted to RGB and resized with libswscale,
// written straight into the sample's row as uint8 [T, 3, H, W] (or [T, H, W, 3]).
//
// Which frames: T timestamps in a window of the video, and for each the frame shown at
// that time (the last frame starting at or before it). The window is the whole video,
// or a clip of `clip_seconds` starting at random (seeded per sample: a resumed epoch
// decodes the same clip, a new epoch another), at the start or in the center. The T
// timestamps are spread evenly over the window (each in the middle of its 1/T), or
// `fps` > 0 spaces them 1/fps apart from the window's start (a short video repeats its
// last frame). A window that starts late is reached by seeking to the keyframe before
// it, not by decoding from the start. A stream whose container gives no duration (a raw
// elementary stream) yields its first T frames (at `fps` if set).
//
// `threads` is libavcodec's thread count per decoder (default 1: the executor already
// decodes one sample per CPU thread; more helps a stage with few, long videos).
//
// Exact by default: each frame taken is, byte for byte, the one a decode of every frame
// in order shows at its time (`seek: exact`), reached with as little decoding as that
// allows (README, "Decode only what shows": restarts at keyframes, B-frames nothing
// shows skipped, the frames after the last one taken before a restart not decoded).
// Two opt-in modes trade exactness for speed:
// - `seek: keyframe`: for each time, the indexed keyframe nearest it (by when it shows)
//   instead of the frame shown then: one frame decoded per frame taken, as decord's
//   key-frame sampling. Frames are up to half a GOP away from their time (0.5 s with a
//   keyframe a second), and times nearest the same keyframe repeat it. A container with
//   no keyframe index decodes exactly.
// - `skip_loop_filter: true`: libavcodec skips the deblocking filter of non-reference
//   frames (AVDISCARD_NONREF): only the frames nothing references change (H.264
//   B-frames taken), by a little; the references, and so every other frame, stay exact.
//
// An index that lies (it lists as a keyframe a frame that is not one, or one that does
// not come out where it says, or past the end) is caught at the frame it restarts at:
// that sample is then decoded exactly from the start of the clip, never with wrong frames.
//
// `read: ranges` reads a video of loose objects (a manifest's files, local or on object
// storage) in byte ranges as it decodes, rather than whole before the chain runs: an
// MP4's index (moov) first, found by the box headers, then, all at once, the stretches
// of the file that the frames wanted need (from the keyframe each restarts at to a few
// packets past its time: Input::IndexedBytes); whatever else the demuxer asks for is
// read when it does (an MKV's cues, an index that lies). Same frames, fewer bytes: a
// long video sampled for a short clip reads the clip's GOPs. The CPU thread waits for
// the reads (two or three round trips a sample); see README, "Reading ranges".
//
// Reports per sample (SampleContext::frames_decoded / frames_taken) the frames the
// decoder produced and the frames taken, for the run report's frames decoded per frame
// taken.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/schema.h"
#include "headrace/ops/window.h"

extern "C" {
struct AVFrame;
}

namespace headrace::av {
class Input;
}

namespace headrace {

enum class VideoLayout { kTCHW, kTHWC };
EnumTable<VideoLayout> TableOf(VideoLayout);

// Which frame a time takes (see the file comment).
enum class VideoSeek {
  kExact,     // "exact": the frame shown at the time, as a decode of every frame
  kKeyframe,  // "keyframe": the indexed keyframe nearest the time
};
EnumTable<VideoSeek> TableOf(VideoSeek);

// How the encoded video reaches the op.
enum class VideoRead {
  kWhole,   // "whole": the object's bytes, read before the chain runs
  kRanges,  // "ranges": the container's index, then the byte ranges of the frames wanted
};
EnumTable<VideoRead> TableOf(VideoRead);

struct VideoDecodeSpec {  // video.decode
  int frames = 8;              // T, frames per sample
  int width = 224;             // output size (the frames are scaled to it)
  int height = 224;
  double fps = 0;              // > 0: frames 1/fps apart; 0: spread over the window
  double clip_seconds = 0;     // > 0: a clip of this length; 0: the whole video
  ClipStart clip_start = ClipStart::kRandom;  // random, start, center
  VideoLayout layout = VideoLayout::kTCHW;    // tchw or thwc
  int threads = 1;             // libavcodec threads per decoder
  VideoSeek seek = VideoSeek::kExact;  // exact or keyframe
  bool skip_loop_filter = false;       // true: no deblocking of non-reference frames
  VideoRead read = VideoRead::kWhole;  // whole or ranges
  std::string field = "video";  // the encoded video read
  std::string output;           // the batch field written; empty: named like `field`
};

// The times (seconds from the stream's start) of the frames to take from a video of
// `duration` seconds (0: unknown), given the spec and, for a random clip, a uniform
// draw `u` in [0, 1). Exposed for tests.
std::vector<double> FrameTimes(const VideoDecodeSpec& spec, double duration, double u);

// The kernel: `frame` converted to RGB and scaled to width x height (libswscale,
// bilinear, one pass) into `dst`, 3 * width * height bytes laid out as `layout` (tchw:
// the R, G, B planes). The calling thread's scaler is reused while the frames' format
// and size stay the same.
Status ConvertVideoFrame(const AVFrame* frame, int width, int height, VideoLayout layout,
                         uint8_t* dst);

class VideoDecodeOp : public Op {
 public:
  static constexpr std::string_view kName = "video.decode";
  static constexpr std::string_view kDoc =
      "Decode T frames of a video (FFmpeg), resized, into uint8 [T,3,H,W]; seeded clips.";
  using Spec = VideoDecodeSpec;
  static void Fields(auto& s, auto&& f) {
    f("frames", s.frames);
    f("width", s.width);
    f("height", s.height);
    f("fps", s.fps);
    f("clip_seconds", s.clip_seconds);
    f("clip_start", s.clip_start);
    f("layout", s.layout);
    f("threads", s.threads);
    f("seek", s.seek);
    f("skip_loop_filter", s.skip_loop_filter);
    f("read", s.read);
    f("field", s.field);
    f("output", s.output);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads the encoded video `field`; writes the batch field [T,3,H,W] (or [T,H,W,3]).
  static Status Declare(const Spec& spec, PlanContext& ctx);
  // A random clip changes with the seed and the epoch (spread frames do not).
  static bool DrawsRandom(const Spec& spec) {
    return spec.clip_seconds > 0 && spec.clip_start == ClipStart::kRandom;
  }
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() {
    return Spec{.frames = 4, .width = 32, .height = 24, .clip_seconds = 0.8};
  }
  // The battery's input (pipeline/op_conformance_test.cc): a short H.264 clip per index.
  static std::vector<uint8_t> ExampleInput(int index);

  // `decode_bytes` > 0: what the decoder's frames may hold (memory.decode_bytes_per_thread);
  // a video that needs more fails its sample (kResourceExhausted), see av::Input::Open.
  VideoDecodeOp(const VideoDecodeSpec& spec, int op_position, int slot, int row,
                int64_t decode_bytes = 0);
  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;
  // read: ranges: the stretches of the clip the frames need, prefetched (PlanRanges).
  void PlanReads(const SampleContext& ctx) const override;

 private:
  // The video of `media` opened: its bytes, or its reader.
  Result<std::unique_ptr<av::Input>> Open(const EncodedBytes& media) const;
  // The times of the sample's frames in `in`.
  std::vector<double> TimesOf(const av::Input& in, const SampleContext& ctx) const;
  VideoDecodeSpec spec_;
  int op_position_;
  int slot_;
  int row_;
  int64_t decode_bytes_;
};

}  // namespace headrace
