// FFmpeg plumbing shared by the video and audio operators: a container opened from
// bytes in memory (the sample's encoded media, never a temporary file), FFmpeg errors
// as Status, and the decoder of one stream.
//
// Each call opens its own contexts: nothing FFmpeg holds is shared between threads, so
// the executor's threads decode side by side (libavcodec's own threads, when a stage
// asks for them, are per decoder). FFmpeg's log is silenced on first use: a corrupt
// sample is reported through its Status (named by epoch, index and URI), not as lines
// on stderr from inside the library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/status.h"

extern "C" {
struct AVFormatContext;
struct AVCodecContext;
struct AVPacket;
struct AVFrame;
struct AVIOContext;
}

namespace headrace::av {

// Silences FFmpeg's log (once per process; every entry point here calls it).
void SilenceLog();

// kCorruptData "<what>: <FFmpeg's message>" for an FFmpeg error code.
Status Error(std::string_view what, int av_error);

// A container (MP4, MKV, WAV, ...) read from `data` (not copied: it must outlive the
// input), with one stream of the wanted kind opened for decoding.
class Input {
 public:
  enum class Media { kVideo, kAudio };
  // Opens the container and the best stream of `media`; `threads` libavcodec threads
  // (1: the calling thread only). Errors are kCorruptData naming what failed.
  static Result<std::unique_ptr<Input>> Open(const uint8_t* data, size_t size, Media media,
                                             int threads);
  ~Input();
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;

  AVFormatContext* format() const { return format_; }
  AVCodecContext* codec() const { return codec_; }
  int stream_index() const { return stream_; }
  // The stream's time base as a double (seconds per tick) and its first timestamp.
  double time_base() const { return time_base_; }
  int64_t start_pts() const { return start_pts_; }
  // The stream's duration in seconds, or 0 when the container does not say.
  double duration() const { return duration_; }

  // Seeks to the last keyframe at or before `seconds` (from the stream's start) and
  // resets the decoder. Cheap when the container has an index (MP4, MKV).
  Status SeekBefore(double seconds);
  // The time (seconds from the stream's start) of the last keyframe at or before
  // `seconds` that the container's index lists (MP4, MKV), or -1 when it has no index
  // entry there. Lets a reader skip ahead: seeking to a keyframe past the frames already
  // decoded saves decoding the frames between.
  double IndexedKeyframeBefore(double seconds) const;
  // How much later than its index time (a decode timestamp) a keyframe may show: the
  // decoder's reordering delay in frames (B-frames) plus one, in seconds.
  double ReorderSeconds() const;
  // The next decoded frame of the stream into `frame` (unreferenced first): true, or
  // false at the end of the stream (after draining the decoder).
  Result<bool> NextFrame(AVFrame* frame);
  // A frame's time in seconds from the stream's start (its best-effort timestamp).
  double FrameTime(const AVFrame* frame) const;

 private:
  Input() = default;

  struct Memory {  // what the AVIOContext reads from
    const uint8_t* data = nullptr;
    size_t size = 0;
    size_t pos = 0;
  };
  Memory memory_;
  AVIOContext* io_ = nullptr;
  AVFormatContext* format_ = nullptr;
  AVCodecContext* codec_ = nullptr;
  AVPacket* packet_ = nullptr;
  int stream_ = -1;
  double time_base_ = 0;
  int64_t start_pts_ = 0;
  double duration_ = 0;
  bool draining_ = false;
  bool done_ = false;
};

// An AVFrame that frees itself.
struct FrameDeleter {
  void operator()(AVFrame* frame) const;
};
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;
FramePtr NewFrame();

}  // namespace headrace::av
