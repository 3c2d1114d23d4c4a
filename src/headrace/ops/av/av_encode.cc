#include "headrace/ops/av/av_encode.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>

#include "headrace/ops/av/av_input.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
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

}  // namespace

Status WriteVideo(const std::string& path, const VideoClip& clip) {
  SilenceLog();
  Output out;
  if (int rc = avformat_alloc_output_context2(&out.format, nullptr, nullptr, path.c_str());
      rc < 0) {
    return Error("no container for " + path, rc);
  }
  const AVCodec* encoder = avcodec_find_encoder_by_name(clip.codec.c_str());
  if (encoder == nullptr) return Status::InvalidArgument("no FFmpeg encoder " + clip.codec);
  AVStream* stream = avformat_new_stream(out.format, nullptr);
  out.codec = avcodec_alloc_context3(encoder);
  out.packet = av_packet_alloc();
  if (stream == nullptr || out.codec == nullptr || out.packet == nullptr) {
    return Status::ResourceExhausted("FFmpeg allocation failed");
  }
  out.codec->width = clip.width;
  out.codec->height = clip.height;
  out.codec->time_base = AVRational{1, clip.fps};
  out.codec->framerate = AVRational{clip.fps, 1};
  out.codec->pix_fmt = AV_PIX_FMT_YUV420P;
  out.codec->gop_size = clip.gop;
  out.codec->max_b_frames = 0;
  out.codec->thread_count = 1;  // callers encode one clip per thread
  if (out.format->oformat->flags & AVFMT_GLOBALHEADER) {
    out.codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  }
  if (clip.codec == "libx264") av_opt_set(out.codec->priv_data, "preset", "veryfast", 0);
  if (int rc = avcodec_open2(out.codec, encoder, nullptr); rc < 0) {
    return Error("cannot open the encoder " + clip.codec, rc);
  }
  avcodec_parameters_from_context(stream->codecpar, out.codec);
  stream->time_base = out.codec->time_base;
  if (int rc = avio_open(&out.format->pb, path.c_str(), AVIO_FLAG_WRITE); rc < 0) {
    return Error("cannot write " + path, rc);
  }
  if (int rc = avformat_write_header(out.format, nullptr); rc < 0) return Error("header", rc);

  out.sws = sws_getContext(clip.width, clip.height, AV_PIX_FMT_RGB24, clip.width, clip.height,
                           AV_PIX_FMT_YUV420P, SWS_BILINEAR, nullptr, nullptr, nullptr);
  FramePtr frame = NewFrame();
  if (out.sws == nullptr || frame == nullptr) return Status::ResourceExhausted("sws/frame");
  frame->format = AV_PIX_FMT_YUV420P;
  frame->width = clip.width;
  frame->height = clip.height;
  if (int rc = av_frame_get_buffer(frame.get(), 0); rc < 0) return Error("frame buffer", rc);
  std::vector<uint8_t> rgb(static_cast<size_t>(clip.width) * clip.height * 3);
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

Result<std::vector<uint8_t>> EncodeVideo(const VideoClip& clip, const std::string& scratch_path) {
  HR_RETURN_IF_ERROR(WriteVideo(scratch_path, clip));
  std::ifstream in(scratch_path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  std::remove(scratch_path.c_str());
  if (bytes.empty()) return Status::IoError("cannot read back " + scratch_path);
  return bytes;
}

}  // namespace headrace::av
