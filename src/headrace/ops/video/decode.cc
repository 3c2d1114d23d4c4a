#include "headrace/ops/video/decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>


#include "headrace/ops/av/av_encode.h"
#include "headrace/ops/av/av_input.h"

extern "C" {
#include <libavutil/frame.h>
#include <libswscale/swscale.h>
}

namespace headrace {
namespace {

constexpr std::pair<VideoLayout, std::string_view> kVideoLayouts[] = {
    {VideoLayout::kTCHW, "tchw"}, {VideoLayout::kTHWC, "thwc"}};

std::string OutputOf(const VideoDecodeSpec& spec) {
  return spec.output.empty() ? spec.field : spec.output;
}

// Bilinear scaling. (Full-resolution chroma interpolation and accurate rounding changed
// nothing measurable against the ffmpeg command line's frames here: tests/python/
// test_video.py compares them.)
constexpr int kScaleFlags = SWS_BILINEAR;

// The thread's scaler, reused while the frames' format and size stay the same.
struct Scaler {
  SwsContext* sws = nullptr;
  ~Scaler() { sws_freeContext(sws); }
};

// Converts `frame` to RGB at width x height into `dst` (one frame's part of the row).
Status WriteFrame(const AVFrame* frame, const VideoDecodeSpec& spec, uint8_t* dst) {
  thread_local Scaler scaler;
  const bool planar = spec.layout == VideoLayout::kTCHW;
  scaler.sws = sws_getCachedContext(
      scaler.sws, frame->width, frame->height, static_cast<AVPixelFormat>(frame->format),
      spec.width, spec.height, planar ? AV_PIX_FMT_GBRP : AV_PIX_FMT_RGB24, kScaleFlags,
      nullptr, nullptr, nullptr);
  if (scaler.sws == nullptr) {
    return Status::CorruptData("video.decode: cannot convert frames of " +
                               std::to_string(frame->width) + "x" +
                               std::to_string(frame->height) + " from pixel format " +
                               std::to_string(frame->format));
  }
  const size_t plane = static_cast<size_t>(spec.width) * static_cast<size_t>(spec.height);
  uint8_t* planes[4] = {};
  int strides[4] = {};
  if (planar) {  // GBRP's planes are G, B, R: point them at the rows' R, G, B order
    planes[0] = dst + plane;
    planes[1] = dst + 2 * plane;
    planes[2] = dst;
    strides[0] = strides[1] = strides[2] = spec.width;
  } else {
    planes[0] = dst;
    strides[0] = spec.width * 3;
  }
  sws_scale(scaler.sws, frame->data, frame->linesize, 0, frame->height, planes, strides);
  return Status::Ok();
}

}  // namespace

EnumTable<VideoLayout> TableOf(VideoLayout) { return kVideoLayouts; }

std::vector<double> FrameTimes(const VideoDecodeSpec& spec, double duration, double u) {
  std::vector<double> times(static_cast<size_t>(spec.frames));
  if (duration <= 0) {  // unknown length: the first frames, at fps if set
    for (int i = 0; i < spec.frames; ++i) times[i] = spec.fps > 0 ? i / spec.fps : 0;
    return times;
  }
  double begin = 0, length = duration;
  if (spec.clip_seconds > 0 && spec.clip_seconds < duration) {
    const double slack = duration - spec.clip_seconds;
    switch (spec.clip_start) {
      case ClipStart::kRandom: begin = u * slack; break;
      case ClipStart::kStart: begin = 0; break;
      case ClipStart::kCenter: begin = slack / 2; break;
    }
    length = spec.clip_seconds;
  }
  for (int i = 0; i < spec.frames; ++i) {
    times[i] = spec.fps > 0 ? begin + i / spec.fps : begin + (i + 0.5) * length / spec.frames;
  }
  return times;
}

Status VideoDecodeOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::InRange(p + ".frames", s.frames, 1, 4096));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".width", s.width, 1, 16384));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".height", s.height, 1, 16384));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".threads", s.threads, 1, 64));
  // Frame i is at i / fps seconds, a timestamp in the stream's time base (int64_t): a
  // tiny fps overflowed it.
  HR_RETURN_IF_ERROR(schema::FiniteInRange(p + ".fps", s.fps, 0.001, 1000, false,
                                           "spread over the clip"));
  if (!(s.clip_seconds >= 0) || !std::isfinite(s.clip_seconds)) {
    return schema::Invalid(p + ".clip_seconds",
                           "must be >= 0 (0: the whole video)" + schema::Got(s.clip_seconds));
  }
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".clip_start", s.clip_start));
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".layout", s.layout));
  return schema::NonEmpty(p + ".field", s.field, "the video value to decode");
}

Status VideoDecodeOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_RETURN_IF_ERROR(ctx.Read(spec.field, ValueKind::kEncoded).status());
  const int64_t t = spec.frames, h = spec.height, w = spec.width;
  FieldSpec field{OutputOf(spec), DType::kU8, {}};
  field.sample_shape = spec.layout == VideoLayout::kTCHW ? std::vector<int64_t>{t, 3, h, w}
                                                         : std::vector<int64_t>{t, h, w, 3};
  ctx.AddField(std::move(field), ctx.key() + " frames x height x width");
  return Status::Ok();
}

Result<std::unique_ptr<Op>> VideoDecodeOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(std::make_unique<VideoDecodeOp>(
      spec, ctx.position(), ctx.slot(spec.field), ctx.row(OutputOf(spec)),
      ctx.decode_bytes_per_thread()));
}

VideoDecodeOp::VideoDecodeOp(const VideoDecodeSpec& spec, int op_position, int slot, int row,
                             int64_t decode_bytes)
    : spec_(spec), op_position_(op_position), slot_(slot), row_(row), decode_bytes_(decode_bytes) {}

Status VideoDecodeOp::Run(SampleContext& ctx) const {
  const EncodedBytes* media = ctx.Get<EncodedBytes>(slot_);
  if (media == nullptr) {
    return Status::MissingField("the record has no " + spec_.field +
                                " but the pipeline decodes one (video.decode)");
  }
  HR_ASSIGN_OR_RETURN(std::unique_ptr<av::Input> in,
                      av::Input::Open(media->data, media->size, av::Input::Media::kVideo,
                                      spec_.threads, decode_bytes_));
  const std::vector<double> times =
      FrameTimes(spec_, in->duration(), ctx.OpRng(op_position_).Uniform());
  const bool by_index = in->duration() <= 0 && spec_.fps <= 0;  // unknown length: frame by frame
  // The index has decode times, which B-frames put up to ReorderSeconds() before the
  // keyframe shows: only a keyframe that clears the time wanted by that much is sure to
  // show at or before it.
  const double reorder = in->ReorderSeconds();
  if (in->duration() > 0 && times[0] > 0) {
    const std::optional<double> key = in->IndexedKeyframeBefore(times[0] - reorder);
    if (!key.has_value()) {
      HR_RETURN_IF_ERROR(in->SeekBefore(times[0]));  // no index: the demuxer's own seek
    } else if (*key > 0) {
      HR_RETURN_IF_ERROR(in->SeekToKeyframe(*key));
    }
  }

  uint8_t* row = ctx.rows[row_];
  const size_t frame_bytes = size_t{3} * static_cast<size_t>(spec_.width) *
                             static_cast<size_t>(spec_.height);
  av::FramePtr prev = av::NewFrame(), cur = av::NewFrame();
  if (prev == nullptr || cur == nullptr) return Status::ResourceExhausted("av_frame_alloc");
  bool have_prev = false;
  size_t next = 0;
  double held = -1;  // the time of the frame in `prev`
  double sought = -1;  // the keyframe of the last seek
  while (next < times.size()) {
    // Frames spread over a long video: when the index has a keyframe after the frame we
    // hold that shows at or before the next time wanted, restart there rather than
    // decode the frames between. Exact: what shows at that time is the keyframe or a
    // frame after it, decoded from the keyframe.
    if (have_prev && !by_index) {
      const std::optional<double> key = in->IndexedKeyframeBefore(times[next] - reorder);
      // Only forward, each keyframe once: index and frame times of one file may disagree
      // by an offset (an edit list), and a seek that lands where we already were must not
      // repeat.
      if (key.has_value() && *key > held + 1e-6 && *key > sought + 1e-6) {
        sought = *key;
        HR_RETURN_IF_ERROR(in->SeekToKeyframe(*key));
        have_prev = false;
      }
    }
    // Nor decode the B-frames that show only before the next time wanted (when nothing
    // references them), on the way to it.
    if (!by_index) in->SkipUnreferencedBefore(times[next]);
    HR_ASSIGN_OR_RETURN(bool got, in->NextFrame(cur.get()));
    if (!got) break;
    if (by_index) {
      HR_RETURN_IF_ERROR(WriteFrame(cur.get(), spec_, row + next * frame_bytes));
      ++next;
      std::swap(prev, cur);
      have_prev = true;
      continue;
    }
    // Every time before this frame shows the previous one (or this one, if it is first).
    // A microsecond of slack: a frame at 0.6 s is "at 0.6 s" even when its timestamp in
    // ticks of 1/10240 s comes out a rounding error later.
    const double t = in->FrameTime(cur.get()) - 1e-6;
    while (next < times.size() && times[next] < t) {
      HR_RETURN_IF_ERROR(
          WriteFrame(have_prev ? prev.get() : cur.get(), spec_, row + next * frame_bytes));
      ++next;
    }
    std::swap(prev, cur);
    have_prev = true;
    held = t;
  }
  if (!have_prev) return Status::CorruptData("video.decode: no frame decodes");
  for (; next < times.size(); ++next) {  // past the last frame: it stays on screen
    HR_RETURN_IF_ERROR(WriteFrame(prev.get(), spec_, row + next * frame_bytes));
  }
  return Status::Ok();
}

std::vector<uint8_t> VideoDecodeOp::ExampleInput(int index) {
  av::VideoClip clip;
  clip.width = 48;
  clip.height = 32;
  clip.frames = 20;
  clip.fps = 10;
  clip.gop = 5;
  clip.paint = [index](int frame, uint8_t* rgb) {
    for (int i = 0; i < 48 * 32; ++i) {
      rgb[3 * i] = static_cast<uint8_t>(frame * 12);
      rgb[3 * i + 1] = static_cast<uint8_t>(index * 40);
      rgb[3 * i + 2] = static_cast<uint8_t>(i % 48 * 5);
    }
  };
  Result<std::vector<uint8_t>> bytes = av::EncodeVideo(clip);
  return bytes.ok() ? *std::move(bytes) : std::vector<uint8_t>();
}

}  // namespace headrace
