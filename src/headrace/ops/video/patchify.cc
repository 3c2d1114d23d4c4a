#include "headrace/ops/video/patchify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "headrace/ops/av/av_input.h"
#include "headrace/ops/schema.h"
#include "headrace/ops/video/decode.h"
#include "headrace/ops/vision/patchify_op.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/frame.h>
#include <libswscale/swscale.h>
}

namespace headrace {
namespace {

// The geometry, normalisation, dtype and output keys, as vision.patchify has them: its
// Validate and ResolvePatchify apply to this spec unchanged.
PatchifySpec PatchKeys(const VideoPatchifySpec& s) {
  return PatchifySpec{.preset = s.preset, .patch_size = s.patch_size,
                      .temporal_patch_size = s.temporal_patch_size,
                      .merge_size = s.merge_size, .mean = s.mean, .std = s.std,
                      .dtype = s.dtype, .field = s.field, .output = s.output,
                      .grid_output = s.grid_output};
}

// Converts a decoded frame to packed RGB at its own size (no scaling: the resize is
// PIL's, after). The thread's converter is reused while the format and size stay.
struct RgbConverter {
  SwsContext* sws = nullptr;
  ~RgbConverter() { sws_freeContext(sws); }
};

Status ToRgb(const AVFrame* frame, uint8_t* dst) {
  thread_local RgbConverter conv;
  // Libswscale's bilinear conversion, as PyAV's VideoFrame.to_ndarray("rgb24") makes it by
  // default. For YUV clips the RGB bytes depend on the converter (about one level per
  // pixel between flag sets); test_vlm_video.py uses lossless RGB clips, whose conversion
  // is exact.
  conv.sws = sws_getCachedContext(conv.sws, frame->width, frame->height,
                                  static_cast<AVPixelFormat>(frame->format), frame->width,
                                  frame->height, AV_PIX_FMT_RGB24, SWS_BILINEAR,
                                  nullptr, nullptr, nullptr);
  if (conv.sws == nullptr) {
    return Status::CorruptData("video.patchify: cannot convert frames of pixel format " +
                               std::to_string(frame->format) + " to RGB");
  }
  uint8_t* planes[4] = {dst, nullptr, nullptr, nullptr};
  int strides[4] = {frame->width * 3, 0, 0, 0};
  sws_scale(conv.sws, frame->data, frame->linesize, 0, frame->height, planes, strides);
  return Status::Ok();
}

// The stream's packets as a read of them tells, for FrameWalk::kNeeded: their
// presentation timestamps in show order — the frame a decode of every frame gives k-th
// is the k-th packet's (one frame a packet; those the demuxer marks to be decoded and
// discarded, before an edit list's start, give none) — and the keyframes in decode
// order, each with how many of the stream's packets come before it.
struct PacketsRead {
  std::vector<int64_t> shown;
  std::vector<int64_t> key_pts;
  std::vector<int64_t> key_at;
};

// Empty `shown` when the packets cannot tell: a packet without a timestamp, or two
// sharing one; or more than `max_packets` (the lists hold 8 bytes a packet: a stream of
// far more packets than the frames sampled from is decoded every frame, counted as they
// come, which holds nothing per packet).
Result<PacketsRead> ReadPackets(av::Input& in, size_t max_packets) {
  av::PacketPtr packet = av::NewPacket();
  if (packet == nullptr) return Status::ResourceExhausted("av_packet_alloc");
  PacketsRead read;
  for (int64_t at = 0;; ++at) {
    HR_ASSIGN_OR_RETURN(const bool more, in.ReadPacket(packet.get()));
    if (!more) break;
    if ((packet->flags & AV_PKT_FLAG_DISCARD) != 0) continue;
    if (packet->pts == AV_NOPTS_VALUE || read.shown.size() == max_packets) return PacketsRead{};
    read.shown.push_back(packet->pts);
    if ((packet->flags & AV_PKT_FLAG_KEY) != 0) {
      read.key_pts.push_back(packet->pts);
      read.key_at.push_back(at);
    }
  }
  std::sort(read.shown.begin(), read.shown.end());
  if (std::adjacent_find(read.shown.begin(), read.shown.end()) != read.shown.end()) {
    return PacketsRead{};
  }
  return read;
}

}  // namespace

Result<FramesAtIndices> DecodeAtIndices(
    std::unique_ptr<av::Input> in,
    const std::function<Result<std::unique_ptr<av::Input>>()>& open,
    std::span<const int64_t> indices, FrameWalk walk,
    const std::function<Status(size_t first, size_t last, const AVFrame& frame)>& take) {
  FramesAtIndices out;
  PacketsRead packets;  // kNeeded
  const std::vector<int64_t>& shown = packets.shown;
  if (walk == FrameWalk::kNeeded && !indices.empty()) {
    // Room for a declared frame count (the indices' range) 4 times off, and more.
    const size_t max_packets = 4 * static_cast<size_t>(indices.back() + 1) + 4096;
    HR_ASSIGN_OR_RETURN(packets, ReadPackets(*in, max_packets));
    HR_ASSIGN_OR_RETURN(in, open());
    if (shown.empty()) {
      walk = FrameWalk::kEveryFrame;
    } else {
      std::vector<int64_t> taken;
      for (const int64_t index : indices) {
        if (index < static_cast<int64_t>(shown.size())) taken.push_back(shown[index]);
      }
      if (!taken.empty()) {
        in->StopAfter(static_cast<double>(taken.back() - in->start_pts()) * in->time_base());
      }
      in->SkipUnreferencedBut(std::move(taken));
    }
  }
  av::FramePtr frame = av::NewFrame();
  if (frame == nullptr) return Status::ResourceExhausted("av_frame_alloc");
  size_t next = 0;  // the next position of `indices` to fill
  int64_t index = -1;  // the frame's
  bool as_told = true;  // kNeeded: the frames came out as the packets said
  // kNeeded: the keyframe decoding restarted at (kNoTime: none since the last check).
  int64_t restarted_at = av::Input::kNoTime;
  size_t keys_before = 0;  // keyframes that show by the last frame to take looked at
  // kNeeded, before each frame to take: when the last keyframe that shows by it is not
  // read yet, decoding restarts there, the packets before it read and dropped undecoded
  // (sampled frames further apart than the keyframes: long videos at low rates).
  const auto skip_ahead = [&] {
    if (walk != FrameWalk::kNeeded || next == indices.size() ||
        indices[next] >= static_cast<int64_t>(shown.size())) {
      return;
    }
    const int64_t target = shown[static_cast<size_t>(indices[next])];
    // The targets ascend: one pass over the keyframes for all of them (a stream whose
    // keyframes do not show in decode order only restarts less).
    while (keys_before < packets.key_pts.size() && packets.key_pts[keys_before] <= target) {
      ++keys_before;
    }
    if (keys_before == 0) return;
    const size_t key = keys_before - 1;
    if (packets.key_at[key] < in->packets_read()) return;
    if (in->SkipToKeyframe(packets.key_pts[key])) restarted_at = packets.key_pts[key];
  };
  skip_ahead();
  while (next < indices.size()) {
    HR_ASSIGN_OR_RETURN(const bool got, in->NextFrame(frame.get()));
    if (!got) break;
    if (walk == FrameWalk::kEveryFrame) {
      ++index;
    } else {
      const int64_t ticks = av::Input::FrameTicks(frame.get());
      const auto at = std::lower_bound(shown.begin(), shown.end(), ticks);
      const int64_t rank = at - shown.begin();
      // Out of order, at no packet's time, or past a frame to take: not as told. After a
      // restart, the first frame must be its keyframe's (an open GOP's leading frames,
      // which need the frames before the keyframe, come out before it: not as told).
      if (at == shown.end() || *at != ticks || rank <= index || rank > indices[next] ||
          (restarted_at != av::Input::kNoTime &&
           (ticks != restarted_at || !frame->key_frame))) {
        as_told = false;
        break;
      }
      restarted_at = av::Input::kNoTime;
      index = rank;
    }
    if (index < indices[next]) continue;
    size_t last = next + 1;
    while (last < indices.size() && indices[last] == index) ++last;
    HR_RETURN_IF_ERROR(take(next, last, *frame));
    next = last;
    skip_ahead();
  }
  out.decoded += in->frames_decoded();
  if (walk == FrameWalk::kNeeded) {
    // A damaged packet may be a frame a decode of every frame does not count; a frame
    // the packets promised that did not come out, the same.
    if (in->damaged_packets() > 0 ||
        (next < indices.size() && indices[next] < static_cast<int64_t>(shown.size()))) {
      as_told = false;
    }
    if (!as_told) {
      HR_ASSIGN_OR_RETURN(in, open());
      HR_ASSIGN_OR_RETURN(FramesAtIndices again,
                          DecodeAtIndices(std::move(in), open, indices, FrameWalk::kEveryFrame,
                                          take));
      again.decoded += out.decoded;
      again.fell_back = true;
      return again;
    }
  }
  out.filled = next;
  return out;
}

Result<std::vector<int64_t>> SampleFrameIndices(const FrameSampling& rule, int64_t total,
                                                double video_fps) {
  if (total < 1) return Status::InvalidArgument("video.patchify: the video has no frame");
  if (!(video_fps > 0)) video_fps = 24;  // transformers' default when the metadata has none
  const int64_t t = std::max(rule.temporal_patch_size, 1);
  std::vector<int64_t> indices;
  if (rule.model == VisionModel::kQwen3Vl) {
    int64_t n = rule.num_frames;
    if (n <= 0) {
      // int(total / video_fps * fps): truncation toward zero of the double.
      n = static_cast<int64_t>(static_cast<double>(total) / video_fps * rule.fps);
      n = std::min<int64_t>({std::max<int64_t>(n, rule.min_frames), rule.max_frames, total});
    }
    if (n < 1) return Status::InvalidArgument("video.patchify: no frame to sample");
    // np.linspace(0, total - 1, n): i * step with step = stop / (n - 1), the last exactly
    // stop; then round half to even.
    const double stop = static_cast<double>(total - 1);
    indices.resize(static_cast<size_t>(n));
    if (n == 1) {
      indices[0] = 0;
    } else {
      const double step = stop / static_cast<double>(n - 1);
      for (int64_t i = 0; i < n; ++i) {
        const double v = i == n - 1 ? stop : static_cast<double>(i) * step;
        indices[static_cast<size_t>(i)] = static_cast<int64_t>(std::nearbyint(v));
      }
    }
    return indices;
  }
  double n = 0;
  if (rule.num_frames > 0) {
    n = static_cast<double>(
        static_cast<int64_t>(std::nearbyint(static_cast<double>(rule.num_frames) / t)) * t);
  } else {
    const int64_t max_frames = std::min<int64_t>(rule.max_frames, total) / t * t;
    n = static_cast<double>(total) / video_fps * rule.fps;
    n = std::min({std::max(n, static_cast<double>(rule.min_frames)),
                  static_cast<double>(max_frames), static_cast<double>(total)});
    n = std::floor(n / static_cast<double>(t)) * static_cast<double>(t);
  }
  if (n > static_cast<double>(total)) {
    return Status::InvalidArgument("video.patchify: " + std::to_string(static_cast<int64_t>(n)) +
                                   " frames asked of a video of " + std::to_string(total));
  }
  if (n < 1) {
    return Status::InvalidArgument("video.patchify: a video of " + std::to_string(total) +
                                   " frames has fewer than temporal_patch_size " +
                                   std::to_string(t) + " to sample");
  }
  // torch.arange(0, total, total / n) in float32: size ceil(total / step), element i
  // start + i * step in double, rounded to float; .int() truncates.
  const double step = static_cast<double>(total) / n;
  const auto size = static_cast<int64_t>(std::ceil(static_cast<double>(total) / step));
  indices.resize(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    indices[static_cast<size_t>(i)] =
        static_cast<int64_t>(static_cast<float>(static_cast<double>(i) * step));
  }
  return indices;
}

std::vector<double> GroupTimestamps(std::span<const int64_t> indices, double video_fps,
                                    int temporal_patch_size) {
  std::vector<double> out;
  if (indices.empty() || temporal_patch_size < 1) return out;
  if (!(video_fps > 0)) video_fps = 24;
  const size_t t = static_cast<size_t>(temporal_patch_size);
  const size_t groups = (indices.size() + t - 1) / t;
  out.reserve(groups);
  for (size_t g = 0; g < groups; ++g) {
    const size_t last = std::min(g * t + t - 1, indices.size() - 1);  // padding repeats it
    const double a = static_cast<double>(indices[g * t]) / video_fps;
    const double b = static_cast<double>(indices[last]) / video_fps;
    out.push_back((a + b) / 2);
  }
  return out;
}

VideoPatchifyRules ResolveVideoPatchify(const VideoPatchifySpec& spec) {
  VideoPatchifyRules r;
  r.patch = ResolvePatchify(PatchKeys(spec));
  r.size.patch_size = r.patch.patch_size;
  r.size.merge_size = r.patch.merge_size;
  // transformers' Qwen2VLVideoProcessor class defaults (size shortest/longest_edge).
  r.size.min_pixels = 128 * 28 * 28;
  r.size.max_pixels = 768 * 28 * 28;
  if (const VisionPreset* p = FindVisionPreset(spec.preset)) {
    r.size.min_pixels = p->video_min_pixels;
    r.size.max_pixels = p->video_max_pixels;
  }
  if (spec.min_pixels != 0) r.size.min_pixels = spec.min_pixels;
  if (spec.max_pixels != 0) r.size.max_pixels = spec.max_pixels;
  r.size.max_aspect_ratio = spec.max_aspect_ratio;
  r.volume_bound = spec.preset == VisionModel::kQwen3Vl;
  r.sampling = FrameSampling{.model = spec.preset == VisionModel::kQwen3Vl ? VisionModel::kQwen3Vl
                                                                            : VisionModel::kQwen2Vl,
                             .temporal_patch_size = r.patch.temporal_patch_size,
                             .fps = spec.fps,
                             .num_frames = spec.num_frames,
                             .min_frames = spec.min_frames,
                             .max_frames = spec.max_frames};
  return r;
}

Status VideoPatchifyOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(PatchifyOp::Validate(PatchKeys(s), p));
  HR_RETURN_IF_ERROR(
      schema::NonEmpty(p + ".timestamps_output", s.timestamps_output, "the timestamps field"));
  if (s.timestamps_output == s.output || s.timestamps_output == s.grid_output) {
    return schema::Invalid(p + ".timestamps_output",
                           "must differ from output and grid_output (got '" +
                               s.timestamps_output + "')");
  }
  HR_RETURN_IF_ERROR(schema::FiniteInRange(p + ".fps", s.fps, 0.001, 1000));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".num_frames", s.num_frames, 0, 4096));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".min_frames", s.min_frames, 1, 4096));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".max_frames", s.max_frames, s.min_frames, 4096));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".threads", s.threads, 1, 64));
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".resample", s.resample));
  HR_RETURN_IF_ERROR(
      schema::FiniteInRange(p + ".max_aspect_ratio", s.max_aspect_ratio, 1.0, 1e6));
  constexpr int64_t kMaxPixels = int64_t{1} << 31;  // Qwen3-VL bounds frames * h * w
  HR_RETURN_IF_ERROR(schema::InRange(p + ".min_pixels", s.min_pixels, int64_t{0}, kMaxPixels));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".max_pixels", s.max_pixels, int64_t{0}, kMaxPixels));
  const VideoPatchifyRules r = ResolveVideoPatchify(s);
  if (r.size.min_pixels < 1 || r.size.min_pixels > r.size.max_pixels) {
    return schema::Invalid(p + ".min_pixels", "must be in [1, max_pixels] (got min_pixels " +
                                                  std::to_string(r.size.min_pixels) +
                                                  ", max_pixels " +
                                                  std::to_string(r.size.max_pixels) + ")");
  }
  return schema::NonEmpty(p + ".field", s.field, "the video value to patchify");
}

Status VideoPatchifyOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_RETURN_IF_ERROR(ctx.Read(spec.field, ValueKind::kEncoded).status());
  const VideoPatchifyRules r = ResolveVideoPatchify(spec);
  const PatchifyParams& pp = r.patch;
  const int64_t patch_dim = int64_t{3} * pp.temporal_patch_size * pp.patch_size * pp.patch_size;
  ctx.AddField(FieldSpec{spec.output, spec.dtype, {patch_dim}, FieldLayout::kRagged},
               ctx.key() + ".max_pixels " + std::to_string(r.size.max_pixels) +
                   " (each video's patches: their number varies with its length and size)");
  ctx.AddField(FieldSpec{spec.grid_output, DType::kI64, {3}},
               ctx.key() + " (t, h, w patches per video)");
  ctx.AddField(FieldSpec{spec.timestamps_output, DType::kF32, {}, FieldLayout::kRagged},
               ctx.key() + " (one timestamp per temporal group of each video)");
  ctx.SetGeometry(PatchGeometry{
      pp.patch_size, pp.merge_size, ctx.key(),
      std::string(PresetOfSizes(spec.preset, spec.patch_size, spec.merge_size))});
  return Status::Ok();
}

Result<std::unique_ptr<Op>> VideoPatchifyOp::Make(const Spec& spec, PlanContext& ctx) {
  VideoPatchifyRules rules = ResolveVideoPatchify(spec);
  Result<PatchifyKernel> kernel = PatchifyKernel::Make(rules.patch);
  if (!kernel.ok()) return ctx.Error(kernel.status().message());
  return std::unique_ptr<Op>(std::make_unique<VideoPatchifyOp>(
      std::move(rules), *std::move(kernel), spec.resample, spec.threads, ctx.slot(spec.field),
      ctx.row(spec.output), ctx.row(spec.grid_output), ctx.row(spec.timestamps_output),
      ctx.decode_bytes_per_thread()));
}

std::vector<uint8_t> VideoPatchifyOp::ExampleInput(int index) {
  return VideoDecodeOp::ExampleInput(index);
}

VideoPatchifyOp::VideoPatchifyOp(VideoPatchifyRules rules, PatchifyKernel kernel,
                                 ResampleFilter resample, int threads, int slot, int pixels_row,
                                 int grid_row, int timestamps_row, int64_t decode_bytes)
    : rules_(std::move(rules)),
      kernel_(std::move(kernel)),
      resample_(resample),
      threads_(threads),
      slot_(slot),
      pixels_row_(pixels_row),
      grid_row_(grid_row),
      timestamps_row_(timestamps_row),
      decode_bytes_(decode_bytes) {}

Status VideoPatchifyOp::Run(SampleContext& ctx) const {
  const EncodedBytes* media = ctx.Get<EncodedBytes>(slot_);
  if (media == nullptr) {
    return Status::MissingField("the record has no video but the pipeline patchifies one "
                                "(video.patchify)");
  }
  const auto open = [&] {
    return av::Input::Open(media->data, media->size, av::Input::Media::kVideo, threads_,
                           decode_bytes_);
  };
  HR_ASSIGN_OR_RETURN(std::unique_ptr<av::Input> in, open());
  // The metadata transformers' decoders report: the stream's frame count and average
  // rate (a container without a count: duration x rate).
  const AVStream* stream = in->format()->streams[in->stream_index()];
  double video_fps = av_q2d(stream->avg_frame_rate);
  if (!(video_fps > 0)) video_fps = av_q2d(stream->r_frame_rate);
  int64_t total = stream->nb_frames;
  if (total <= 0 && in->duration() > 0 && video_fps > 0) {
    total = std::llround(in->duration() * video_fps);
  }
  if (total <= 0) return Status::CorruptData("video.patchify: the video's frame count is unknown");
  HR_ASSIGN_OR_RETURN(std::vector<int64_t> indices,
                      SampleFrameIndices(rules_.sampling, total, video_fps));
  const int n = static_cast<int>(indices.size());
  const int src_w = in->codec()->width, src_h = in->codec()->height;
  ImageSize size{};
  if (rules_.volume_bound) {
    HR_ASSIGN_OR_RETURN(size, SmartResizeVideoSize(n, rules_.patch.temporal_patch_size, src_w,
                                                   src_h, rules_.size));
  } else {
    HR_ASSIGN_OR_RETURN(size, SmartResizeSize(src_w, src_h, rules_.size));
  }
  HR_ASSIGN_OR_RETURN(PatchGrid grid, kernel_.Grid(size.width, size.height, n));

  // Scratch: the sampled frames at their final size, the decoded frame in RGB, PIL's
  // intermediate pass.
  const size_t frame_bytes = size_t{3} * static_cast<size_t>(size.width) *
                             static_cast<size_t>(size.height);
  HR_ASSIGN_OR_RETURN(uint8_t * frames, ctx.NextScratchBytes(frame_bytes * static_cast<size_t>(n)));
  HR_ASSIGN_OR_RETURN(uint8_t * rgb, ctx.NextScratchBytes(size_t{3} * static_cast<size_t>(src_w) *
                                                          static_cast<size_t>(src_h)));
  uint8_t* temp = nullptr;
  if (const size_t bytes =
          PilResizeTempBytes(src_w, src_h, size.width, size.height, 3, resample_)) {
    HR_ASSIGN_OR_RETURN(temp, ctx.NextScratchBytes(bytes));
  }

  const auto take = [&](size_t first, size_t last, const AVFrame& frame) -> Status {
    if (frame.width != src_w || frame.height != src_h) {
      return Status::CorruptData("video.patchify: frame " + std::to_string(indices[first]) +
                                 " is " + std::to_string(frame.width) + "x" +
                                 std::to_string(frame.height) + ", the stream " +
                                 std::to_string(src_w) + "x" + std::to_string(src_h));
    }
    HR_RETURN_IF_ERROR(ToRgb(&frame, rgb));
    uint8_t* dst = frames + first * frame_bytes;
    HR_RETURN_IF_ERROR(PilResizeInto(ImageView{rgb, src_w, src_h, 3, int64_t{src_w} * 3},
                                     MutableImageView{dst, size.width, size.height, 3,
                                                      int64_t{size.width} * 3},
                                     resample_, temp));
    // The same index again: Qwen3-VL's num_frames above the clip's length repeats some.
    for (size_t k = first + 1; k < last; ++k) {
      std::memcpy(frames + k * frame_bytes, dst, frame_bytes);
    }
    return Status::Ok();
  };
  ctx.frames_taken = n;
  ctx.frames_decoded = 0;
  Result<FramesAtIndices> walked =
      DecodeAtIndices(std::move(in), open, indices, FrameWalk::kNeeded, take);
  HR_RETURN_IF_ERROR(walked.status());
  ctx.frames_decoded = walked->decoded;
  int next = static_cast<int>(walked->filled);
  if (next == 0) return Status::CorruptData("video.patchify: no frame decodes");
  // A stream shorter than its declared count: its last sampled frame stays.
  for (; next < n; ++next) {
    std::memcpy(frames + static_cast<size_t>(next) * frame_bytes,
                frames + static_cast<size_t>(next - 1) * frame_bytes, frame_bytes);
  }

  thread_local std::vector<ImageView> views;
  views.clear();
  for (int k = 0; k < n; ++k) {
    views.push_back(ImageView{frames + static_cast<size_t>(k) * frame_bytes, size.width,
                              size.height, 3, int64_t{size.width} * 3});
  }
  HR_ASSIGN_OR_RETURN(uint8_t * out, ctx.AppendRows(pixels_row_, grid.patches()));
  HR_RETURN_IF_ERROR(kernel_.Into(views, {out, kernel_.Bytes(grid)}).status());
  const int64_t thw[3] = {grid.t, grid.h, grid.w};
  std::memcpy(ctx.rows[grid_row_], thw, sizeof thw);
  const std::vector<double> times =
      GroupTimestamps(indices, video_fps, rules_.patch.temporal_patch_size);
  HR_ASSIGN_OR_RETURN(uint8_t * ts,
                      ctx.AppendRows(timestamps_row_, static_cast<int64_t>(times.size())));
  for (size_t g = 0; g < times.size(); ++g) {
    // As the prompt shows it: Python's f"{t:.1f}" of the double (printf rounds the exact
    // binary value as Python does), then f32. Rounding the f32 later could differ
    // (1.05 as f32 is 1.0499999).
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", times[g]);
    const float v = std::strtof(text, nullptr);
    std::memcpy(ts + g * sizeof v, &v, sizeof v);
  }
  return Status::Ok();
}

}  // namespace headrace
