#include "headrace/ops/audio/decode.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "headrace/ops/audio/resample.h"
#include "headrace/ops/av/av_encode.h"
#include "headrace/ops/av/av_input.h"
#include "headrace/ops/schema.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/frame.h>
#include <libavutil/intreadwrite.h>
#include <libavutil/samplefmt.h>
}

namespace headrace {
namespace {

// A stream's packets, read before any is decoded, and where each one's samples fall in
// what a decode of the whole stream gives.
struct Packets {
  std::vector<av::PacketPtr> list;
  // Per packet: the sample of a full decode its first sample becomes. The samples a full
  // decode drops (the encoder's delay, at the start) come first: the first packet's
  // is negative when it has any.
  std::vector<int64_t> at;
  int64_t samples = 0;    // what a full decode of `list` gives
  bool complete = false;  // `list` is the whole stream (else it stopped past the limit)
};

// The stream's packets, until the end or until they hold more than `limit` samples.
// nullopt when their timestamps do not say exactly where each one's samples fall: a
// packet without a time or a duration in whole samples, a gap or an overlap, or samples
// to drop (AV_PKT_DATA_SKIP_SAMPLES) elsewhere than at the start of the first packet
// and the end of the last.
Result<std::optional<Packets>> ReadPackets(av::Input& in, int64_t limit) {
  const AVRational time_base = in.format()->streams[in.stream_index()]->time_base;
  const AVRational sample = {1, in.codec()->sample_rate};
  Packets p;
  int64_t raw = 0, skip_start = 0, skip_end = 0;
  for (;;) {
    av::PacketPtr packet = av::NewPacket();
    if (packet == nullptr) return Status::ResourceExhausted("av_packet_alloc");
    HR_ASSIGN_OR_RETURN(const bool got, in.ReadPacket(packet.get()));
    if (!got) {
      p.complete = true;
      break;
    }
    const int64_t n = av_rescale_q(packet->duration, time_base, sample);
    if (packet->pts == AV_NOPTS_VALUE || n <= 0 ||
        av_rescale_q(n, sample, time_base) != packet->duration || skip_end > 0) {
      return std::optional<Packets>();
    }
    if (!p.list.empty()) {
      const AVPacket& last = *p.list.back();
      if (packet->pts != last.pts + last.duration) return std::optional<Packets>();
    }
    size_t size = 0;
    const uint8_t* skip = av_packet_get_side_data(packet.get(), AV_PKT_DATA_SKIP_SAMPLES, &size);
    if (skip != nullptr && size >= 10) {  // samples to drop at its start, at its end
      if (AV_RL32(skip) > 0) {
        if (!p.list.empty()) return std::optional<Packets>();
        skip_start = AV_RL32(skip);
      }
      skip_end = AV_RL32(skip + 4);
    }
    p.at.push_back(raw - skip_start);
    raw += n;
    p.list.push_back(std::move(packet));
    if (raw - skip_start > limit) break;
  }
  p.samples = raw - skip_start - skip_end;
  if (p.list.empty() || p.samples <= 0) return std::optional<Packets>();
  return std::optional<Packets>(std::move(p));
}

// Codecs whose packets decode from the middle of a stream to the samples a decode from
// its start gives (DecodeFrom says from where). Checked in decode_test.cc against full
// decodes; others (AAC, Vorbis, Opus: priming and overlap to reason about) are decoded
// whole.
bool DecodesFromTheMiddle(AVCodecID codec) {
  return codec == AV_CODEC_ID_MP3 || codec == AV_CODEC_ID_FLAC ||
         (codec >= AV_CODEC_ID_FIRST_AUDIO && codec < AV_CODEC_ID_ADPCM_IMA_QT);  // PCM
}

// The first packet to decode for the samples of packet `first` on to come out as a
// decode from the start gives them (a codec of DecodesFromTheMiddle).
size_t DecodeFrom(AVCodecID codec, const Packets& packets, size_t first) {
  if (codec != AV_CODEC_ID_MP3) return first;  // FLAC and PCM frames stand alone
  // A Layer III frame may take up to 511 bytes of its main data from the frames before
  // it (the bit reservoir), and its first granule overlaps the frame before's last
  // (IMDCT, synthesis filter). So the frame before `first` must decode exactly too: the
  // 511 bytes before it must have been sent. A frame carries at least its size less 38
  // bytes of main data (header 4, CRC 2, side information 32 at most).
  constexpr int kReservoirBytes = 511, kFrameOverheadBytes = 38;
  if (first < 2) return 0;
  size_t from = first - 1;
  int64_t bytes = 0;
  while (from > 0 && bytes < kReservoirBytes) {
    --from;
    bytes += std::max(0, packets.list[from]->size - kFrameOverheadBytes);
  }
  return from;
}

// How many samples at `out_rate` resampling `n` samples gives, flushed at the end (as a
// decode of the whole stream does): counted by resampling silence, only the last few
// thousand samples of it. From an input sample that is a multiple of in / gcd(in, out)
// on, a resampler started there is in the same phase as one started at 0, so the rest
// gives the same count, shifted.
Result<int64_t> ResampledLength(const AVCodecContext& codec, int out_rate, int64_t n) {
  const int in_rate = codec.sample_rate;
  if (in_rate == out_rate) return n;
  const int64_t step = in_rate / std::gcd(in_rate, out_rate);
  constexpr int64_t kTail = 4096;
  const int64_t skipped = std::max<int64_t>(0, (n - kTail) / step * step);
  HR_ASSIGN_OR_RETURN(Resampler resampler, Resampler::Make(codec.ch_layout, codec.sample_fmt,
                                                          in_rate, out_rate));
  const auto format = static_cast<AVSampleFormat>(codec.sample_fmt);
  const auto channels = static_cast<size_t>(codec.ch_layout.nb_channels);
  constexpr size_t kChunk = 1024;
  const auto plane_bytes = kChunk * static_cast<size_t>(av_get_bytes_per_sample(format)) *
                           (av_sample_fmt_is_planar(format) ? 1 : channels);
  std::vector<uint8_t> silence(plane_bytes * channels);
  std::vector<const uint8_t*> planes(channels);
  for (size_t c = 0; c < channels; ++c) planes[c] = silence.data() + c * plane_bytes;
  PlanarSamples out;
  out.Reset(channels);
  for (int64_t left = n - skipped; left > 0; left -= int64_t{kChunk}) {
    const auto chunk = static_cast<int>(std::min<int64_t>(left, int64_t{kChunk}));
    HR_RETURN_IF_ERROR(resampler.Convert(planes.data(), chunk, out));
  }
  HR_RETURN_IF_ERROR(resampler.Flush(out));
  return skipped * out_rate / in_rate + out.frames();
}

// A thread's decoded planes stay allocated between samples up to this (8 MiB: a minute of
// stereo at 16 kHz); a longer file's are freed when its sample is done.
constexpr int64_t kKeptPlanesBytes = int64_t{8} << 20;

// Trims a thread's planes to kKeptPlanesBytes when the sample is done with them.
struct TrimAfter {
  PlanarSamples& planes;
  ~TrimAfter() { planes.Trim(kKeptPlanesBytes); }
};

// kResourceExhausted when `frames` decoded frames of `channels` channels (planar float)
// pass the decode allowance `limit` (0: none).
Status CheckDecodedSize(int64_t frames, int channels, int rate, int64_t limit, bool declared) {
  const double bytes = static_cast<double>(frames) * channels * sizeof(float);
  if (limit <= 0 || bytes <= static_cast<double>(limit)) return Status::Ok();
  return Status::ResourceExhausted(
      std::string("audio.decode: ") + (declared ? "the file declares " : "the file decodes to ") +
      std::to_string(frames) + (declared ? "" : "+") + " samples of " + std::to_string(channels) +
      " channels at " + std::to_string(rate) + " Hz (" + std::to_string(static_cast<int64_t>(bytes)) +
      " bytes decoded), past the decode allowance of " + std::to_string(limit) +
      " bytes per thread (memory.decode_bytes_per_thread; by default memory.budget_bytes / 4): "
      "lower audio.decode.max_seconds, or decode only the window an audio.crop takes "
      "(audio.decode with sample_rate, then audio.crop)");
}

}  // namespace

Status AudioDecodeOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::InRange(p + ".sample_rate", s.sample_rate, 0, 384000));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".channels", s.channels, 0, 2));
  // A day: max_seconds x any rate stays far inside int64_t.
  HR_RETURN_IF_ERROR(schema::FiniteInRange(p + ".max_seconds", s.max_seconds, 0, 86400,
                                           /*min_open=*/true));
  return schema::NonEmpty(p + ".field", s.field, "the audio value to decode");
}

Status AudioDecodeOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_RETURN_IF_ERROR(ctx.Read(spec.field, ValueKind::kEncoded).status());
  ValueDesc audio{ValueKind::kAudio, {spec.channels > 0 ? spec.channels : -1, -1},
                  ctx.key() + " (each file's own length)"};
  audio.rate = spec.sample_rate;
  return ctx.Write(spec.field, std::move(audio));
}

Result<std::unique_ptr<Op>> AudioDecodeOp::Make(const Spec& spec, PlanContext& ctx) {
  // A window is in samples at the rate written, which its readers need fixed.
  const AudioWindowHint window =
      spec.sample_rate > 0 ? ctx.window_hint(spec.field) : AudioWindowHint{};
  return std::unique_ptr<Op>(std::make_unique<AudioDecodeOp>(spec, ctx.slot(spec.field), window,
                                                              ctx.decode_bytes_per_thread()));
}

Result<bool> AudioDecodeOp::RunWindow(av::Input& in, SampleContext& ctx) const {
  const AVCodecContext& codec = *in.codec();
  if (!DecodesFromTheMiddle(codec.codec_id)) return false;
  const int in_rate = codec.sample_rate, rate = spec_.sample_rate;
  const auto max_frames = static_cast<int64_t>(spec_.max_seconds * rate);
  const auto to_input = [&](int64_t out) { return out * in_rate / rate; };
  // Input samples either side of what the window's samples are computed from, past the
  // reach of libswresample's filter (by default 32 taps at the lower of the two rates:
  // 16 samples either side at that rate).
  const int64_t margin = 64 + (64 * int64_t{in_rate} + rate - 1) / rate;
  // Read as far as a full decode keeps, and a second more: the samples it then drops at
  // the end (padding) cannot shorten that.
  HR_ASSIGN_OR_RETURN(std::optional<Packets> packets,
                      ReadPackets(in, to_input(max_frames) + 4 * margin + in_rate));
  if (!packets.has_value()) return false;

  // The window, placed in the stream as its readers place it (WindowOf, crop.h), in the
  // samples a full decode keeps: all it resamples, at most max_seconds.
  int64_t total = max_frames, resampled = -1;
  if (packets->complete) {
    HR_ASSIGN_OR_RETURN(resampled, ResampledLength(codec, rate, packets->samples));
    total = std::min(total, resampled);
  }
  const int64_t begin =
      WindowBegin(window_.start, total, window_.frames(rate), ctx.OpRng(window_.rng_op));
  const int64_t end = std::min(total, begin + window_.frames(rate));
  if (end <= begin) return false;  // nothing decodes: the full decode says so

  // The input to resample: from a sample in the resampler's phase at 0 (ResampledLength)
  // `margin` or more before the window, to `margin` past it, or to the end of the stream
  // and flushed there, as a full decode flushes it. The packets to decode: those, and the
  // ones before that the codec needs to decode them as from the start.
  const int64_t step = in_rate / std::gcd(in_rate, rate);
  const int64_t from = std::max<int64_t>(0, to_input(begin) - margin) / step * step;
  const int64_t to = to_input(end) + 1 + margin;
  const bool to_end = packets->complete && to >= packets->samples;
  const auto packet_of = [&](int64_t sample) {  // the last packet starting at or before it
    return static_cast<size_t>(std::upper_bound(packets->at.begin() + 1, packets->at.end(),
                                                sample) -
                               packets->at.begin() - 1);
  };
  const size_t first = DecodeFrom(codec.codec_id, *packets, packet_of(from));
  const size_t last = to_end ? packets->list.size() : packet_of(to) + 1;

  HR_ASSIGN_OR_RETURN(Resampler resampler,
                      Resampler::Make(codec.ch_layout, codec.sample_fmt, in_rate, rate));
  thread_local PlanarSamples planes;  // the output from from * rate / in_rate on
  const TrimAfter trim_after{planes};
  planes.Reset(codec.ch_layout.nb_channels);
  av::FramePtr frame = av::NewFrame();
  if (frame == nullptr) return Status::ResourceExhausted("av_frame_alloc");
  const AVRational time_base = in.format()->streams[in.stream_index()]->time_base;
  const int64_t first_pts = packets->list.front()->pts;
  int64_t next = from;  // the next input sample to resample
  bool in_order = true;  // each frame's samples follow the last's
  std::vector<const uint8_t*> data;
  const auto take = [&](const AVFrame& f) -> Status {
    // Where its samples fall, from its time (which a dropped start moves on).
    if (f.pts == AV_NOPTS_VALUE) in_order = false;
    if (!in_order) return Status::Ok();
    const int64_t at =
        av_rescale_q(f.pts - first_pts, time_base, {1, in_rate}) + packets->at.front();
    const int64_t skip = std::max<int64_t>(0, from - at);
    if (skip >= f.nb_samples) return Status::Ok();  // before the input to resample
    if (at + skip != next) {
      in_order = false;
      return Status::Ok();
    }
    next = at + f.nb_samples;
    const auto format = static_cast<AVSampleFormat>(f.format);
    const bool planar = av_sample_fmt_is_planar(format) != 0;
    const int64_t stride =
        av_get_bytes_per_sample(format) * (planar ? 1 : f.ch_layout.nb_channels);
    data.assign(f.extended_data, f.extended_data + (planar ? f.ch_layout.nb_channels : 1));
    for (const uint8_t*& plane : data) plane += skip * stride;
    return resampler.Convert(data.data(), static_cast<int>(f.nb_samples - skip), planes);
  };
  for (size_t i = first; i < last && in_order; ++i) {
    HR_RETURN_IF_ERROR(in.SendPacket(packets->list[i].get()));
    for (bool got = true; got;) {
      HR_ASSIGN_OR_RETURN(got, in.ReceiveFrame(frame.get()));
      if (got) HR_RETURN_IF_ERROR(take(*frame));
    }
  }
  HR_RETURN_IF_ERROR(in.SendPacket(nullptr));  // and what the decoder still holds
  for (bool got = in_order; got;) {
    HR_ASSIGN_OR_RETURN(got, in.ReceiveFrame(frame.get()));
    if (got) HR_RETURN_IF_ERROR(take(*frame));
  }
  if (to_end) HR_RETURN_IF_ERROR(resampler.Flush(planes));
  // A decoder that dropped or added samples (damage) makes the count wrong: then the
  // whole stream is decoded, which gives what it gives.
  const int64_t offset = from * rate / in_rate;  // the output sample planes start at
  const int64_t got = offset + planes.frames();
  if (!in_order || got < end || (to_end && got != resampled)) return false;

  const int channels = spec_.channels > 0 ? spec_.channels : codec.ch_layout.nb_channels;
  const int64_t frames = end - begin;
  HR_ASSIGN_OR_RETURN(uint8_t * scratch,
                      ctx.NextScratchBytes(static_cast<size_t>(channels) *
                                           static_cast<size_t>(frames) * sizeof(float)));
  auto* out = reinterpret_cast<float*>(scratch);
  MixChannels(planes, begin - offset, frames, channels, out);
  ctx.Set(slot_, AudioView{out, channels, frames, rate, begin, total});
  return true;
}

Status AudioDecodeOp::Run(SampleContext& ctx) const {
  const EncodedBytes* media = ctx.Get<EncodedBytes>(slot_);
  if (media == nullptr) {
    return Status::MissingField("the record has no " + spec_.field +
                                " but the pipeline decodes one (audio.decode)");
  }
  HR_ASSIGN_OR_RETURN(std::unique_ptr<av::Input> in,
                      av::Input::Open(media->data, media->size, av::Input::Media::kAudio, 1));
  if (window_.any() && in->codec()->sample_rate > 0 && in->codec()->ch_layout.nb_channels > 0) {
    HR_ASSIGN_OR_RETURN(const bool done, RunWindow(*in, ctx));
    if (done) return Status::Ok();
    // Not for this file: decode all of it, from the start.
    HR_ASSIGN_OR_RETURN(in, av::Input::Open(media->data, media->size,
                                            av::Input::Media::kAudio, 1));
  }
  const AVCodecContext* codec = in->codec();
  const int source_channels = codec->ch_layout.nb_channels;
  if (source_channels <= 0 || codec->sample_rate <= 0) {
    return Status::CorruptData("audio.decode: the stream gives no channel count or rate");
  }
  const int rate = spec_.sample_rate > 0 ? spec_.sample_rate : codec->sample_rate;
  HR_ASSIGN_OR_RETURN(Resampler resampler,
                      Resampler::Make(codec->ch_layout, codec->sample_fmt, codec->sample_rate,
                                      rate));
  // Planar float per source channel, grown as frames arrive (per thread, reused; freed
  // after a long file).
  thread_local PlanarSamples planes;
  const TrimAfter trim_after{planes};
  planes.Reset(source_channels);
  const auto max_frames = static_cast<int64_t>(spec_.max_seconds * rate);
  // What the header says the decode gives, checked before decoding; what it does give,
  // checked as it grows (a header may lie, or say nothing).
  if (in->duration() > 0) {
    const auto declared = static_cast<int64_t>(std::min(in->duration() * rate + 1.0, 1e15));
    HR_RETURN_IF_ERROR(CheckDecodedSize(std::min(declared, max_frames), source_channels, rate,
                                        decode_bytes_, true));
  }
  av::FramePtr frame = av::NewFrame();
  if (frame == nullptr) return Status::ResourceExhausted("av_frame_alloc");
  while (planes.frames() < max_frames) {
    HR_ASSIGN_OR_RETURN(bool got, in->NextFrame(frame.get()));
    if (!got) break;
    HR_RETURN_IF_ERROR(resampler.Convert(const_cast<const uint8_t**>(frame->extended_data),
                                         frame->nb_samples, planes));
    HR_RETURN_IF_ERROR(
        CheckDecodedSize(planes.frames(), source_channels, rate, decode_bytes_, false));
  }
  HR_RETURN_IF_ERROR(resampler.Flush(planes));
  const int64_t frames = std::min(planes.frames(), max_frames);
  if (frames == 0) return Status::CorruptData("audio.decode: no samples decode");
  const int channels = spec_.channels > 0 ? spec_.channels : source_channels;
  HR_ASSIGN_OR_RETURN(uint8_t * scratch,
                      ctx.NextScratchBytes(static_cast<size_t>(channels) *
                                           static_cast<size_t>(frames) * sizeof(float)));
  auto* out = reinterpret_cast<float*>(scratch);
  MixChannels(planes, 0, frames, channels, out);
  ctx.Set(slot_, AudioView{out, channels, frames, rate});
  return Status::Ok();
}

std::vector<uint8_t> AudioDecodeOp::ExampleInput(int index) {
  av::AudioClip clip;
  clip.sample_rate = 16000;
  clip.channels = 2;
  clip.seconds = 0.25;
  clip.codec = "pcm_s16le";
  const double hz = 220.0 * (1 + index % 4);
  clip.sample = [hz](int64_t i, int c) {
    return static_cast<float>(0.5 * std::sin(2 * M_PI * hz * static_cast<double>(i) / 16000 +
                                             c));
  };
  Result<std::vector<uint8_t>> bytes = av::EncodeAudio(clip);
  return bytes.ok() ? *std::move(bytes) : std::vector<uint8_t>();
}

}  // namespace headrace
