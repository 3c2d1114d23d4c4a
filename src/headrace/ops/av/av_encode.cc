#include "headrace/ops/av/av_encode.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>

#include "headrace/ops/av/av_input.h"

#include <unistd.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

namespace headrace::av {
namespace {

struct Output {
  AVFormatContext* format = nullptr;
  AVCodecContext* codec = nullptr;
  SwsContext* sws = nullptr;
  AVPacket* packet = nullptr;
  ~Output() {
    av_packet_free(&packet);
    sws_freeContext(sws);
    avcodec_free_context(&codec);
    if (format != nullptr) {
      if (format->pb != nullptr) avio_closep(&format->pb);
      avformat_free_context(format);
    }
  }
};

// Sends `frame` (null: flush) and writes every packet the encoder gives back.
Status Drain(Output& out, AVStream* stream, const AVFrame* frame) {
  if (int rc = avcodec_send_frame(out.codec, frame); rc < 0) return Error("encoding", rc);
  for (;;) {
    const int rc = avcodec_receive_packet(out.codec, out.packet);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return Status::Ok();
    if (rc < 0) return Error("encoding", rc);
    // One frame each, so that the container's duration covers the last frame too.
    if (out.packet->duration == 0) out.packet->duration = 1;
    av_packet_rescale_ts(out.packet, out.codec->time_base, stream->time_base);
    out.packet->stream_index = stream->index;
    if (int w = av_interleaved_write_frame(out.format, out.packet); w < 0) {
      return Error("writing", w);
    }
  }
}

// The container for `path` (from its extension), the encoder `codec` and one stream.
Result<AVStream*> Begin(Output& out, const std::string& path, const std::string& codec,
                        const AVCodec** encoder) {
  SilenceLog();
  if (int rc = avformat_alloc_output_context2(&out.format, nullptr, nullptr, path.c_str());
      rc < 0) {
    return Error("no container for " + path, rc);
  }
  *encoder = avcodec_find_encoder_by_name(codec.c_str());
  // The wheel's FFmpeg is built without GPL parts (scripts/build_ffmpeg.sh): H.264 is
  // encoded there by OpenH264 (BSD), which has no B-frames.
  if (*encoder == nullptr && codec == "libx264") {
    *encoder = avcodec_find_encoder_by_name("libopenh264");
  }
  if (*encoder == nullptr) return Status::InvalidArgument("no FFmpeg encoder " + codec);
  AVStream* stream = avformat_new_stream(out.format, nullptr);
  out.codec = avcodec_alloc_context3(*encoder);
  out.packet = av_packet_alloc();
  if (stream == nullptr || out.codec == nullptr || out.packet == nullptr) {
    return Status::ResourceExhausted("FFmpeg allocation failed");
  }
  out.codec->thread_count = 1;  // callers encode one file per thread
  if (out.format->oformat->flags & AVFMT_GLOBALHEADER) {
    out.codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  }
  return stream;
}

// Opens the configured encoder, the file, and writes the container's header.
Status Open(Output& out, AVStream* stream, const AVCodec* encoder, const std::string& path,
            const std::string& codec) {
  if (int rc = avcodec_open2(out.codec, encoder, nullptr); rc < 0) {
    return Error("cannot open the encoder " + codec, rc);
  }
  avcodec_parameters_from_context(stream->codecpar, out.codec);
  stream->time_base = out.codec->time_base;
  if (int rc = avio_open(&out.format->pb, path.c_str(), AVIO_FLAG_WRITE); rc < 0) {
    return Error("cannot write " + path, rc);
  }
  if (int rc = avformat_write_header(out.format, nullptr); rc < 0) return Error("header", rc);
  return Status::Ok();
}

}  // namespace

Status WriteVideo(const std::string& path, const VideoClip& clip) {
  Output out;
  const AVCodec* encoder = nullptr;
  HR_ASSIGN_OR_RETURN(AVStream * stream, Begin(out, path, clip.codec, &encoder));
  out.codec->width = clip.width;
  out.codec->height = clip.height;
  out.codec->time_base = AVRational{1, clip.fps};
  out.codec->framerate = AVRational{clip.fps, 1};
  out.codec->pix_fmt = AV_PIX_FMT_YUV420P;
  out.codec->gop_size = clip.gop;
  const std::string_view name = encoder->name;
  out.codec->max_b_frames = name == "libopenh264" ? 0 : clip.b_frames;
  if (name == "libx264") av_opt_set(out.codec->priv_data, "preset", "veryfast", 0);
  HR_RETURN_IF_ERROR(Open(out, stream, encoder, path, clip.codec));

  out.sws = sws_getContext(clip.width, clip.height, AV_PIX_FMT_RGB24, clip.width, clip.height,
                           AV_PIX_FMT_YUV420P, SWS_BILINEAR, nullptr, nullptr, nullptr);
  FramePtr frame = NewFrame();
  if (out.sws == nullptr || frame == nullptr) return Status::ResourceExhausted("sws/frame");
  frame->format = AV_PIX_FMT_YUV420P;
  frame->width = clip.width;
  frame->height = clip.height;
  if (int rc = av_frame_get_buffer(frame.get(), 0); rc < 0) return Error("frame buffer", rc);
  // Padded: libswscale's SIMD reads up to 16 bytes past the last pixel of its input
  // (valgrind saw it); paint writes only the frame's bytes.
  std::vector<uint8_t> rgb(static_cast<size_t>(clip.width) * clip.height * 3 +
                           AV_INPUT_BUFFER_PADDING_SIZE);
  for (int i = 0; i < clip.frames; ++i) {
    clip.paint(i, rgb.data());
    if (int rc = av_frame_make_writable(frame.get()); rc < 0) return Error("frame", rc);
    const uint8_t* src[1] = {rgb.data()};
    const int src_stride[1] = {clip.width * 3};
    sws_scale(out.sws, src, src_stride, 0, clip.height, frame->data, frame->linesize);
    frame->pts = i;
    HR_RETURN_IF_ERROR(Drain(out, stream, frame.get()));
  }
  HR_RETURN_IF_ERROR(Drain(out, stream, nullptr));
  if (int rc = av_write_trailer(out.format); rc < 0) return Error("trailer", rc);
  return Status::Ok();
}

namespace {

// A file name no other thread or process uses, in the system's temporary folder.
std::string ScratchPath(std::string_view extension) {
  static std::atomic<int> next{0};
  return (std::filesystem::temp_directory_path() /
          ("headrace-encode-" + std::to_string(::getpid()) + "-" + std::to_string(next++) + "." +
           std::string(extension)))
      .string();
}

// The file's bytes; the file is removed.
Result<std::vector<uint8_t>> ReadBack(const std::string& scratch_path) {
  std::ifstream in(scratch_path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  std::remove(scratch_path.c_str());
  if (bytes.empty()) return Status::IoError("cannot read back " + scratch_path);
  return bytes;
}

// The encoder's first sample format this writer fills, or AV_SAMPLE_FMT_NONE.
AVSampleFormat PickFormat(const AVCodec* encoder) {
  for (const AVSampleFormat* f = encoder->sample_fmts; f != nullptr && *f != AV_SAMPLE_FMT_NONE;
       ++f) {
    switch (*f) {
      case AV_SAMPLE_FMT_S16:
      case AV_SAMPLE_FMT_S16P:
      case AV_SAMPLE_FMT_FLT:
      case AV_SAMPLE_FMT_FLTP:
      case AV_SAMPLE_FMT_S32: return *f;
      default: break;
    }
  }
  return AV_SAMPLE_FMT_NONE;
}

// Sample i of channel c of `clip` into `frame` at position k, in the frame's format.
void Put(AVFrame* frame, int k, int c, int channels, float v) {
  v = std::max(-1.0f, std::min(1.0f, v));
  switch (static_cast<AVSampleFormat>(frame->format)) {
    case AV_SAMPLE_FMT_S16:
      reinterpret_cast<int16_t*>(frame->data[0])[k * channels + c] =
          static_cast<int16_t>(std::lrint(v * 32767));
      break;
    case AV_SAMPLE_FMT_S16P:
      reinterpret_cast<int16_t*>(frame->data[c])[k] = static_cast<int16_t>(std::lrint(v * 32767));
      break;
    case AV_SAMPLE_FMT_FLT: reinterpret_cast<float*>(frame->data[0])[k * channels + c] = v; break;
    case AV_SAMPLE_FMT_FLTP: reinterpret_cast<float*>(frame->data[c])[k] = v; break;
    case AV_SAMPLE_FMT_S32:
      reinterpret_cast<int32_t*>(frame->data[0])[k * channels + c] =
          static_cast<int32_t>(std::lrint(static_cast<double>(v) * 2147483647.0));
      break;
    default: break;
  }
}

}  // namespace

Result<std::vector<uint8_t>> EncodeVideo(const VideoClip& clip, std::string_view extension) {
  const std::string scratch_path = ScratchPath(extension);
  HR_RETURN_IF_ERROR(WriteVideo(scratch_path, clip));
  return ReadBack(scratch_path);
}

Status WriteAudio(const std::string& path, const AudioClip& clip) {
  Output out;
  const AVCodec* encoder = nullptr;
  HR_ASSIGN_OR_RETURN(AVStream * stream, Begin(out, path, clip.codec, &encoder));
  const AVSampleFormat format = PickFormat(encoder);
  if (format == AV_SAMPLE_FMT_NONE) {
    return Status::InvalidArgument("no sample format this writer fills for " + clip.codec);
  }
  out.codec->sample_fmt = format;
  out.codec->sample_rate = clip.sample_rate;
  av_channel_layout_default(&out.codec->ch_layout, clip.channels);
  out.codec->time_base = AVRational{1, clip.sample_rate};
  if (clip.bit_rate > 0) out.codec->bit_rate = clip.bit_rate;
  HR_RETURN_IF_ERROR(Open(out, stream, encoder, path, clip.codec));
  const int per_frame = out.codec->frame_size > 0 ? out.codec->frame_size : 1024;
  const auto total = static_cast<int64_t>(clip.seconds * clip.sample_rate);
  FramePtr frame = NewFrame();
  if (frame == nullptr) return Status::ResourceExhausted("av_frame_alloc");
  for (int64_t at = 0; at < total; at += per_frame) {
    av_frame_unref(frame.get());
    frame->format = format;
    frame->sample_rate = clip.sample_rate;
    av_channel_layout_copy(&frame->ch_layout, &out.codec->ch_layout);
    // A fixed-size encoder takes full frames only, but its last one may be short.
    frame->nb_samples = static_cast<int>(std::min<int64_t>(per_frame, total - at));
    if (int rc = av_frame_get_buffer(frame.get(), 0); rc < 0) return Error("frame", rc);
    for (int k = 0; k < frame->nb_samples; ++k) {
      for (int c = 0; c < clip.channels; ++c) Put(frame.get(), k, c, clip.channels, clip.sample(at + k, c));
    }
    frame->pts = at;
    HR_RETURN_IF_ERROR(Drain(out, stream, frame.get()));
  }
  HR_RETURN_IF_ERROR(Drain(out, stream, nullptr));
  if (int rc = av_write_trailer(out.format); rc < 0) return Error("trailer", rc);
  return Status::Ok();
}

Result<std::vector<uint8_t>> EncodeAudio(const AudioClip& clip, std::string_view extension) {
  const std::string scratch_path = ScratchPath(extension);
  HR_RETURN_IF_ERROR(WriteAudio(scratch_path, clip));
  return ReadBack(scratch_path);
}

}  // namespace headrace::av
