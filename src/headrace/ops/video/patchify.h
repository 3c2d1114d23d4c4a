// video.patchify: a video as the rows a Qwen-VL vision tower eats, as transformers'
// Qwen2VLVideoProcessor / Qwen3VLVideoProcessor make them from the decoded clip:
//   1. frames sampled by index the way the preset's processor samples them
//      (SampleFrameIndices);
//   2. each resized to the video smart_resize size (Qwen2-VL/2.5-VL: the image rule over
//      the video pixel range, per frame; Qwen3-VL: its rule bounding frames * h * w) with
//      PIL's resampling, the same kernel as image.smart_resize (PilResizeInto);
//   3. rescaled, normalised and cut into patches by vision.patchify's kernel
//      (PatchifyKernel: frames grouped by temporal_patch_size, the last repeated to fill
//      a group).
// It writes, appended to the batch:
//   <output>             pixel_values_videos, ragged [patches, 3 * T * P * P], one entry
//                        of <output>_lengths per video;
//   <grid_output>        video_grid_thw, i64 [3] per video: (t, h / P, w / P);
//   <timestamps_output>  video_timestamps, ragged f32, one per temporal group: the mean
//                        of its first and last frame's time (index / fps) rounded to one
//                        decimal, what Qwen3-VL's processor writes as "<t.t seconds>"
//                        before the group's tokens (text.tokenize reads it; printed with
//                        %.1f it gives the processor's text).
// Mapped over a media list (max_items) each video appends once to each ragged field, so
// that their lengths hold one entry per item (as vision.patchify's pixel_values).
//
// Decoding (DecodeAtIndices): the packets read first tell each frame's index and the
// keyframes; then only the pictures the sampled frames need are decoded (below).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/core/tensor.h"
#include "headrace/ops/image/normalize.h"  // TableOf(DType)
#include "headrace/ops/image/smart_resize.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/vision/patchify.h"
#include "headrace/ops/vision/preset.h"

struct AVFrame;

namespace headrace {
namespace av {
class Input;
}

// How frames are picked from a clip of `total` frames at `video_fps`.
struct FrameSampling {
  // kQwen3Vl: Qwen3VLVideoProcessor.sample_frames; any other: Qwen2VLVideoProcessor's
  // (also Qwen2.5-VL's).
  VisionModel model = VisionModel::kQwen2Vl;
  int temporal_patch_size = 2;
  double fps = 2;       // frames per second wanted (used when num_frames is 0)
  int num_frames = 0;   // > 0: this many (Qwen2: rounded to a multiple of T)
  int min_frames = 4;
  int max_frames = 768;
};

// The indices (0-based, in decode order) of the frames to take. Qwen2-VL: n = total /
// video_fps * fps clamped to [min_frames, floor(min(max_frames, total) / T) * T] and to
// total, floored to a multiple of T; indices torch.arange(0, total, total / n).int().
// Qwen3-VL: n = int(total / video_fps * fps) clamped to [min_frames, max_frames] and to
// total; indices np.linspace(0, total - 1, n).round(). kInvalidArgument (the sample's)
// when no frame would be taken (a clip shorter than T frames for Qwen2-VL) or total < 1.
Result<std::vector<int64_t>> SampleFrameIndices(const FrameSampling& rule, int64_t total,
                                                double video_fps);

// Qwen3-VL's timestamps (Qwen3VLProcessor._calculate_timestamps): the indices padded to a
// multiple of `temporal_patch_size` with the last, each index / video_fps, then per group
// the mean of its first and last.
std::vector<double> GroupTimestamps(std::span<const int64_t> indices, double video_fps,
                                    int temporal_patch_size);

// How video.patchify reaches the frames at its sampled indices (ascending, repeats
// allowed): index k is the k-th frame in show order.
enum class FrameWalk {
  // Only the pictures those frames need. The packets are read first, undecoded: their
  // presentation times give each packet's index (its rank among them, as torchcodec's
  // exact mode — transformers' video decoder — indexes frames), and their keyframes.
  // Then, before each frame to take, decoding restarts at the last keyframe that shows
  // by it if that one is not read yet (reading on, the packets between dropped
  // undecoded); a packet of a frame not taken goes to the decoder with AVDISCARD_NONREF
  // (dropped when nothing references it: most B-frames); decoding stops after the last
  // frame taken. The frames taken are bit-identical to kEveryFrame's. Falls back to
  // kEveryFrame when the frames do not come out as the packets say: a packet without a
  // timestamp or two sharing one, a packet the decoder refuses, a frame at a time no
  // packet has or out of order, a frame to take that does not come out, a restart whose
  // first frame is not its keyframe (an open GOP's leading frames).
  kNeeded,
  // Every frame decoded from the first, in order, counted as it comes out (PyAV's way;
  // the same indices where every packet decodes).
  kEveryFrame,
};
struct FramesAtIndices {
  size_t filled = 0;     // positions of `indices` filled, from the first (fewer: the
                         // stream ended before the rest)
  int64_t decoded = 0;   // pictures decoded (av::Input::frames_decoded), every pass
  bool fell_back = false;  // kNeeded gave way to kEveryFrame
};
// Decodes the frames at `indices` of the video `in` (opened; `open` opens it again for
// a second pass) and hands each to `take(first, last, frame)`: positions [first, last)
// of `indices` are that frame's.
Result<FramesAtIndices> DecodeAtIndices(
    std::unique_ptr<av::Input> in,
    const std::function<Result<std::unique_ptr<av::Input>>()>& open,
    std::span<const int64_t> indices, FrameWalk walk,
    const std::function<Status(size_t first, size_t last, const AVFrame& frame)>& take);

struct VideoPatchifySpec {  // video.patchify
  // A model's geometry, normalisation, video pixel range and sampling rule
  // (ops/vision/preset.h); a key set overrides the preset's, as on vision.patchify. No
  // preset: Qwen2-VL's rules with transformers' Qwen2VLVideoProcessor class defaults.
  VisionModel preset = VisionModel::kNone;
  int patch_size = 0;           // 0: preset or 14
  int temporal_patch_size = 0;  // 0: preset or 2
  int merge_size = 0;           // 0: preset or 2
  std::optional<std::array<float, 3>> mean{};  // unset: preset or OpenAI CLIP's
  std::optional<std::array<float, 3>> std{};
  double fps = 2;       // frames sampled per second of video
  int num_frames = 0;   // > 0: a fixed count instead of fps
  int min_frames = 4;
  int max_frames = 768;
  int64_t min_pixels = 0;  // 0: the preset's video range, or 128 * 28 * 28
  int64_t max_pixels = 0;  // 0: the preset's video range, or 768 * 28 * 28
  double max_aspect_ratio = 200;
  ResampleFilter resample = ResampleFilter::kBicubic;
  DType dtype = DType::kF32;
  int threads = 1;  // libavcodec threads per decoder
  std::string field = "video";  // the encoded video read
  std::string output = "pixel_values_videos";
  std::string grid_output = "video_grid_thw";
  std::string timestamps_output = "video_timestamps";
};

// The resolved rules of a spec.
struct VideoPatchifyRules {
  PatchifyParams patch;
  SmartResizeRule size;  // min/max_pixels: the video range
  FrameSampling sampling;
  bool volume_bound = false;  // Qwen3-VL: the range bounds frames * h * w (SmartResizeVideoSize)
};
VideoPatchifyRules ResolveVideoPatchify(const VideoPatchifySpec& spec);

class VideoPatchifyOp : public Op {
 public:
  static constexpr std::string_view kName = "video.patchify";
  static constexpr std::string_view kDoc =
      "Qwen-VL video: frames sampled as the preset's processor does, smart-resized (PIL), "
      "pixel_values_videos [patches, 3*T*P*P] ragged, video_grid_thw [3], "
      "video_timestamps per temporal group.";
  using Spec = VideoPatchifySpec;
  static void Fields(auto& s, auto&& f) {
    f("preset", s.preset);
    f("patch_size", s.patch_size);
    f("temporal_patch_size", s.temporal_patch_size);
    f("merge_size", s.merge_size);
    f("mean", s.mean);
    f("std", s.std);
    f("fps", s.fps);
    f("num_frames", s.num_frames);
    f("min_frames", s.min_frames);
    f("max_frames", s.max_frames);
    f("min_pixels", s.min_pixels);
    f("max_pixels", s.max_pixels);
    f("max_aspect_ratio", s.max_aspect_ratio);
    f("resample", s.resample);
    f("dtype", s.dtype);
    f("threads", s.threads);
    f("field", s.field);
    f("output", s.output);
    f("grid_output", s.grid_output);
    f("timestamps_output", s.timestamps_output);
  }
  // The geometry keys as vision.patchify's; fps in [0.001, 1000], num_frames in [0,
  // 4096], 1 <= min_frames <= max_frames <= 4096, the resolved 1 <= min_pixels <=
  // max_pixels <= 2^31, threads in [1, 64], outputs named and distinct.
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads the encoded video `field`; writes `output` (ragged), `grid_output` and
  // `timestamps_output` (ragged).
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() {
    // The battery's clip: 20 frames of 48x32 at 10 fps -> 4 frames of 40x30 (factor 10).
    return Spec{.patch_size = 5, .merge_size = 2, .fps = 2, .min_pixels = 100,
                .max_pixels = 1200};
  }
  // The battery's input: video.decode's clips.
  static std::vector<uint8_t> ExampleInput(int index);

  VideoPatchifyOp(VideoPatchifyRules rules, PatchifyKernel kernel, ResampleFilter resample,
                  int threads, int slot, int pixels_row, int grid_row, int timestamps_row,
                  int64_t decode_bytes);

  std::string_view name() const override { return kName; }
  // Bad input is the sample's kCorruptData (as video.decode's); a clip too short to
  // sample or an aspect ratio past the limit its kInvalidArgument / kPixelLimit.
  Status Run(SampleContext& ctx) const override;

 private:
  VideoPatchifyRules rules_;
  PatchifyKernel kernel_;
  ResampleFilter resample_;
  int threads_;
  int slot_;
  int pixels_row_;
  int grid_row_;
  int timestamps_row_;
  int64_t decode_bytes_;
};

}  // namespace headrace
