#include "headrace/ops/video/decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>


#include "headrace/ops/av/av_encode.h"
#include "headrace/ops/av/av_input.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/frame.h>
#include <libswscale/swscale.h>
}

namespace headrace {
namespace {

constexpr std::pair<VideoLayout, std::string_view> kVideoLayouts[] = {
    {VideoLayout::kTCHW, "tchw"}, {VideoLayout::kTHWC, "thwc"}};
constexpr std::pair<VideoSeek, std::string_view> kVideoSeeks[] = {
    {VideoSeek::kExact, "exact"}, {VideoSeek::kKeyframe, "keyframe"}};
constexpr std::pair<VideoRead, std::string_view> kVideoReads[] = {
    {VideoRead::kWhole, "whole"}, {VideoRead::kRanges, "ranges"}};

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

// What a way of taking the frames found.
enum class Taken {
  kDone,       // every frame is written
  kIndexLied,  // the keyframe index misled it: nothing written can be trusted
};

// The frames at `times`, exactly: decoding forward from the start or, when `use_index`,
// restarting at the indexed keyframes that show by each time and skipping the B-frames
// nothing shows (README, "Decode only what shows"). Each restart is checked: the first
// frame at or after the packet it restarted at must be that packet's, a keyframe, and
// show at or before the time wanted; anything else is kIndexLied.
Result<Taken> TakeExact(av::Input& in, const VideoDecodeSpec& spec,
                        const std::vector<double>& times, bool use_index, uint8_t* row) {
  const bool by_index = in.duration() <= 0 && spec.fps <= 0;  // unknown length: frame by frame
  const bool seeks = use_index && !by_index;
  // The index has decode times, which B-frames put up to ReorderSeconds() before the
  // keyframe shows: only a keyframe that clears the time wanted by that much is sure to
  // show at or before it.
  const double reorder = in.ReorderSeconds();
  bool check = false;  // a restart whose first frame is not checked yet
  if (seeks && in.duration() > 0 && times[0] > 0) {
    const std::optional<double> key = in.IndexedKeyframeBefore(times[0] - reorder);
    if (!key.has_value()) {
      HR_RETURN_IF_ERROR(in.SeekBefore(times[0]));  // no index: the demuxer's own seek
      check = true;
    } else if (*key > 0) {
      HR_RETURN_IF_ERROR(in.SeekToKeyframe(*key));
      check = true;
    }
  }
  const size_t frame_bytes = size_t{3} * static_cast<size_t>(spec.width) *
                             static_cast<size_t>(spec.height);
  const auto write = [&](const AVFrame* frame, size_t i) {
    return ConvertVideoFrame(frame, spec.width, spec.height, spec.layout, row + i * frame_bytes);
  };
  av::FramePtr prev = av::NewFrame(), cur = av::NewFrame();
  if (prev == nullptr || cur == nullptr) return Status::ResourceExhausted("av_frame_alloc");
  bool have_prev = false;
  size_t next = 0;
  double held = -1;  // the time of the frame in `prev`
  double sought = -1;  // the keyframe of the last seek
  double stop = -1;    // the time of the last StopAfter
  bool drained = false;  // the decoder gave all it held after a stop: a seek must follow
  while (next < times.size()) {
    // Frames spread over a long video: when the index has a keyframe after the frame we
    // hold that shows at or before the next time wanted, restart there rather than
    // decode the frames between. Exact: what shows at that time is the keyframe or a
    // frame after it, decoded from the keyframe.
    if (have_prev && seeks) {
      const std::optional<double> key = in.IndexedKeyframeBefore(times[next] - reorder);
      // Only forward, each keyframe once: index and frame times of one file may disagree
      // by an offset (an edit list), and a seek that lands where we already were must not
      // repeat.
      const bool forward = key.has_value() && *key > held + 1e-6 && *key > sought + 1e-6;
      // After a stop (below) the decoder is drained: it must restart, backwards if need
      // be (not when the stop was foreseen right).
      if (forward || (drained && key.has_value())) {
        sought = *key;
        HR_RETURN_IF_ERROR(in.SeekToKeyframe(*key));
        have_prev = drained = false;
        check = true;
      } else if (drained) {
        return Taken::kIndexLied;
      }
    }
    if (seeks) {
      // Nor decode the B-frames that show only before the next time wanted (when nothing
      // references them), on the way to it.
      in.SkipUnreferencedBefore(times[next]);
      // Nor the frames after the one shown at it when a restart comes next (or nothing):
      // the packets' timestamps tell that it is the last one starting by then.
      bool restart_next = next + 1 == times.size();
      if (!restart_next) {
        const std::optional<double> key = in.IndexedKeyframeBefore(times[next + 1] - reorder);
        restart_next = key.has_value() && *key > times[next] + 1e-6 && *key > sought + 1e-6;
      }
      stop = restart_next ? times[next] : -1;
      in.StopAfter(stop);
    }
    HR_ASSIGN_OR_RETURN(bool got, in.NextFrame(cur.get()));
    if (!got) {
      if (check) return Taken::kIndexLied;  // a restart past the end, or where nothing decodes
      if (!in.stopped() || !have_prev) break;
      drained = true;
      // Stopped: no frame still to come shows by `stop`, so the one held shows until then
      // (the times before the frames that came out were written as they came).
      while (next < times.size() && times[next] <= stop) {
        HR_RETURN_IF_ERROR(write(prev.get(), next));
        ++next;
      }
      continue;
    }
    if (by_index) {
      HR_RETURN_IF_ERROR(write(cur.get(), next));
      ++next;
      std::swap(prev, cur);
      have_prev = true;
      continue;
    }
    // Every time before this frame shows the previous one (or this one, if it is first).
    // A microsecond of slack: a frame at 0.6 s is "at 0.6 s" even when its timestamp in
    // ticks of 1/10240 s comes out a rounding error later.
    const double t = in.FrameTime(cur.get()) - 1e-6;
    if (check) {
      const int64_t restart = in.restart_pts(), ticks = av::Input::FrameTicks(cur.get());
      if (restart == av::Input::kNoTime || ticks == av::Input::kNoTime) return Taken::kIndexLied;
      if (ticks < restart) continue;  // an open GOP's leading frame: shows before any time wanted
      if (ticks != restart || !cur->key_frame || times[next] < t) return Taken::kIndexLied;
      check = false;
    }
    while (next < times.size() && times[next] < t) {
      HR_RETURN_IF_ERROR(write(have_prev ? prev.get() : cur.get(), next));
      ++next;
    }
    std::swap(prev, cur);
    have_prev = true;
    held = t;
  }
  if (!have_prev) return Status::CorruptData("video.decode: no frame decodes");
  for (; next < times.size(); ++next) {  // past the last frame: it stays on screen
    HR_RETURN_IF_ERROR(write(prev.get(), next));
  }
  return Taken::kDone;
}

// seek: keyframe. For each time the indexed keyframe that shows nearest it, decoded
// alone (one frame per keyframe; a keyframe nearest several times is decoded once).
// kIndexLied when the index lists none, or one that does not decode as a keyframe at
// its own timestamp.
Result<Taken> TakeKeyframes(av::Input& in, const VideoDecodeSpec& spec,
                            const std::vector<double>& times, uint8_t* row) {
  const std::vector<av::Input::IndexedKeyframe> keys = in.IndexedKeyframes();
  if (keys.empty()) return Taken::kIndexLied;
  const size_t frame_bytes = size_t{3} * static_cast<size_t>(spec.width) *
                             static_cast<size_t>(spec.height);
  av::FramePtr frame = av::NewFrame();
  if (frame == nullptr) return Status::ResourceExhausted("av_frame_alloc");
  size_t held = keys.size();  // the keyframe in `frame`; keys.size(): none
  for (size_t i = 0; i < times.size(); ++i) {
    // The first keyframe showing after the time, or the last one; then the nearer of it
    // and the one before (the earlier on a tie).
    size_t k = std::upper_bound(keys.begin(), keys.end(), times[i],
                                [](double t, const av::Input::IndexedKeyframe& key) {
                                  return t < key.shows_at;
                                }) -
               keys.begin();
    if (k == keys.size() ||
        (k > 0 && times[i] - keys[k - 1].shows_at <= keys[k].shows_at - times[i])) {
      --k;
    }
    if (k != held) {
      HR_RETURN_IF_ERROR(in.SeekToKeyframe(keys[k].index_time));
      HR_ASSIGN_OR_RETURN(const bool got, in.DecodeFirstFrame(frame.get()));
      if (!got || !frame->key_frame || in.restart_pts() == av::Input::kNoTime ||
          av::Input::FrameTicks(frame.get()) != in.restart_pts()) {
        return Taken::kIndexLied;
      }
      held = k;
    }
    HR_RETURN_IF_ERROR(ConvertVideoFrame(frame.get(), spec.width, spec.height, spec.layout,
                                         row + i * frame_bytes));
  }
  return Taken::kDone;
}

// The stretches of the file that taking the frames at `times` reads (TakeExact,
// TakeKeyframes), from the index: for each restart, from the keyframe it restarts at to
// a few packets past the time (the reorder window and StopAfter's margin, doubled), or
// the keyframe's own packet. Only what the decode will ask for: a reader prefetches them
// at once (one round trip), and serves anything else as it is asked.
std::vector<MediaReader::Range> PlanRanges(const av::Input& in, const VideoDecodeSpec& spec,
                                           const std::vector<double>& times, bool keyframes) {
  std::vector<MediaReader::Range> ranges;
  const auto add = [&](std::optional<MediaReader::Range> r) {
    if (r.has_value()) ranges.push_back(*r);
  };
  if (keyframes) {
    const std::vector<av::Input::IndexedKeyframe> keys = in.IndexedKeyframes();
    for (const double t : times) {
      size_t k = std::upper_bound(keys.begin(), keys.end(), t,
                                  [](double v, const av::Input::IndexedKeyframe& key) {
                                    return v < key.shows_at;
                                  }) -
                 keys.begin();
      if (k == keys.size() || (k > 0 && t - keys[k - 1].shows_at <= keys[k].shows_at - t)) --k;
      if (k < keys.size()) add(in.IndexedBytes(keys[k].index_time, keys[k].index_time, 1));
    }
    return ranges;
  }
  if (in.duration() <= 0 && spec.fps <= 0) return ranges;  // the first frames: read in turn
  const double reorder = in.ReorderSeconds();
  const int after = std::max(in.codec()->has_b_frames, 2) + 1 + av::Input::kStopMargin;
  for (const double t : times) {
    const double key = in.IndexedKeyframeBefore(t - reorder).value_or(0);
    add(in.IndexedBytes(key, t, after));
  }
  return ranges;
}

}  // namespace

EnumTable<VideoLayout> TableOf(VideoLayout) { return kVideoLayouts; }
EnumTable<VideoSeek> TableOf(VideoSeek) { return kVideoSeeks; }
EnumTable<VideoRead> TableOf(VideoRead) { return kVideoReads; }

Status ConvertVideoFrame(const AVFrame* frame, int width, int height, VideoLayout layout,
                         uint8_t* dst) {
  thread_local Scaler scaler;
  const bool planar = layout == VideoLayout::kTCHW;
  scaler.sws = sws_getCachedContext(
      scaler.sws, frame->width, frame->height, static_cast<AVPixelFormat>(frame->format),
      width, height, planar ? AV_PIX_FMT_GBRP : AV_PIX_FMT_RGB24, kScaleFlags, nullptr,
      nullptr, nullptr);
  if (scaler.sws == nullptr) {
    return Status::CorruptData("video.decode: cannot convert frames of " +
                               std::to_string(frame->width) + "x" +
                               std::to_string(frame->height) + " from pixel format " +
                               std::to_string(frame->format));
  }
  const size_t plane = static_cast<size_t>(width) * static_cast<size_t>(height);
  uint8_t* planes[4] = {};
  int strides[4] = {};
  if (planar) {  // GBRP's planes are G, B, R: point them at the rows' R, G, B order
    planes[0] = dst + plane;
    planes[1] = dst + 2 * plane;
    planes[2] = dst;
    strides[0] = strides[1] = strides[2] = width;
  } else {
    planes[0] = dst;
    strides[0] = width * 3;
  }
  sws_scale(scaler.sws, frame->data, frame->linesize, 0, frame->height, planes, strides);
  return Status::Ok();
}

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
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".seek", s.seek));
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".read", s.read));
  return schema::NonEmpty(p + ".field", s.field, "the video value to decode");
}

Status VideoDecodeOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_RETURN_IF_ERROR(ctx.Read(spec.field, ValueKind::kEncoded).status());
  if (spec.read == VideoRead::kRanges) ctx.ReadInRanges(spec.field);
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

Result<std::unique_ptr<av::Input>> VideoDecodeOp::Open(const EncodedBytes& media) const {
  HR_ASSIGN_OR_RETURN(
      std::unique_ptr<av::Input> in,
      media.reader != nullptr
          ? av::Input::Open(*media.reader, av::Input::Media::kVideo, spec_.threads,
                            decode_bytes_)
          : av::Input::Open(media.data, media.size, av::Input::Media::kVideo, spec_.threads,
                            decode_bytes_));
  if (spec_.skip_loop_filter) in->codec()->skip_loop_filter = AVDISCARD_NONREF;
  return in;
}

std::vector<double> VideoDecodeOp::TimesOf(const av::Input& in, const SampleContext& ctx) const {
  return FrameTimes(spec_, in.duration(), ctx.OpRng(op_position_).Uniform());
}

void VideoDecodeOp::PlanReads(const SampleContext& ctx) const {
  const EncodedBytes* media = ctx.Get<EncodedBytes>(slot_);
  if (media == nullptr || media->reader == nullptr) return;
  Result<std::unique_ptr<av::Input>> in = Open(*media);
  if (!in.ok()) return;  // Run opens it again and names the error
  const bool keyframes = spec_.seek == VideoSeek::kKeyframe && (*in)->duration() > 0;
  media->reader->Prefetch(PlanRanges(**in, spec_, TimesOf(**in, ctx), keyframes));
}

Status VideoDecodeOp::Run(SampleContext& ctx) const {
  const EncodedBytes* media = ctx.Get<EncodedBytes>(slot_);
  if (media == nullptr) {
    return Status::MissingField("the record has no " + spec_.field +
                                " but the pipeline decodes one (video.decode)");
  }
  const auto open = [&] { return Open(*media); };
  HR_ASSIGN_OR_RETURN(std::unique_ptr<av::Input> in, open());
  const std::vector<double> times = TimesOf(*in, ctx);
  uint8_t* row = ctx.rows[row_];
  // A video of unknown length gives its first frames: nothing to seek to.
  const bool keyframes = spec_.seek == VideoSeek::kKeyframe && in->duration() > 0;
  if (media->reader != nullptr) {  // PlanReads has asked for them, unless it did not run
    media->reader->Prefetch(PlanRanges(*in, spec_, times, keyframes));
  }
  ctx.frames_taken = spec_.frames;
  ctx.frames_decoded = 0;
  Result<Taken> taken = keyframes ? TakeKeyframes(*in, spec_, times, row)
                                  : TakeExact(*in, spec_, times, /*use_index=*/true, row);
  ctx.frames_decoded += in->frames_decoded();
  HR_RETURN_IF_ERROR(taken.status());
  if (*taken == Taken::kIndexLied) {
    // Whatever the index said, a decode of every frame from the start takes the frames
    // shown at the times.
    HR_ASSIGN_OR_RETURN(in, open());
    taken = TakeExact(*in, spec_, times, /*use_index=*/false, row);
    ctx.frames_decoded += in->frames_decoded();
    HR_RETURN_IF_ERROR(taken.status());
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
