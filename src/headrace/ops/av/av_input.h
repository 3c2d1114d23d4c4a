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

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/media_reader.h"
#include "headrace/core/status.h"

extern "C" {
struct AVFormatContext;
struct AVCodecContext;
struct AVPacket;
struct AVFrame;
struct AVIOContext;
struct AVInputFormat;
}

namespace headrace::av {

// Silences FFmpeg's log (once per process; every entry point here calls it).
void SilenceLog();

// kCorruptData "<what>: <FFmpeg's message>" for an FFmpeg error code.
Status Error(std::string_view what, int av_error);

// What a decoder's frames hold now, against a limit: every frame buffer the decoder
// allocates is counted until its last reference goes (by the decoder's threads too,
// hence atomic), and an allocation that would pass the limit is refused.
struct FrameBytes {
  int64_t limit = 0;                // 0: no limit
  std::atomic<int64_t> held{0};     // bytes of the frames alive now
  std::atomic<int64_t> refused{0};  // > 0: what the first refused allocation would have held
  int width = 0, height = 0;        // the refused frame's size
  std::atomic<int64_t> pictures{0};  // video frames the decoder allocated: decoded
};

// An AVFrame that frees itself.
struct FrameDeleter {
  void operator()(AVFrame* frame) const;
};
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;
FramePtr NewFrame();

// An AVPacket that frees itself.
struct PacketDeleter {
  void operator()(AVPacket* packet) const;
};
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;
PacketPtr NewPacket();

// An AVCodecContext that frees itself.
struct CodecDeleter {
  void operator()(AVCodecContext* codec) const;
};
using CodecPtr = std::unique_ptr<AVCodecContext, CodecDeleter>;

// An AVFormatContext that frees itself: closed as an input once avformat_open_input has
// opened it, else (only allocated) freed. Its AVIOContext, when the caller set one
// (AVFMT_FLAG_CUSTOM_IO), is the caller's to free, after this.
struct FormatDeleter {
  void operator()(AVFormatContext* format) const;
};
using FormatPtr = std::unique_ptr<AVFormatContext, FormatDeleter>;

// An AVIOContext that frees itself and its buffer (AVIOContext::buffer: the one given to
// avio_alloc_context, or the one FFmpeg replaced it with).
struct IoDeleter {
  void operator()(AVIOContext* io) const;
};
using IoPtr = std::unique_ptr<AVIOContext, IoDeleter>;

// Containers with more streams than this are refused (AVFormatContext::max_streams):
// each stream costs the demuxer memory of its own, and no sample needs more.
inline constexpr int kMaxStreams = 64;
// MP4/MOV edit lists longer than this are refused before FFmpeg reads them (it rebuilds
// a track's index once per entry); real files hold one or two.
inline constexpr int64_t kMaxEditListEntries = 1024;

// A container (MP4, MKV, WAV, ...) read from `data` (not copied: it must outlive the
// input), with one stream of the wanted kind opened for decoding.
class Input {
 public:
  enum class Media { kVideo, kAudio };
  // Opens the container and the best stream of `media`; `threads` libavcodec threads
  // (1: the calling thread only). Errors are kCorruptData naming what failed.
  // `frame_bytes_limit` > 0 bounds what the decoder's frames hold at once (its reference
  // frames, those in its threads, and those the caller keeps): a video whose declared
  // size needs more than that for a few frames fails here (kResourceExhausted), before
  // any frame is decoded; one whose bitstream then asks for more fails when it does.
  static Result<std::unique_ptr<Input>> Open(const uint8_t* data, size_t size, Media media,
                                             int threads, int64_t frame_bytes_limit = 0);
  // The same through `reader` (it must outlive the input): an object read in ranges, as
  // the demuxer asks for them. An MP4's index (moov) is found by its box headers and
  // read whole first, so that the caller can plan the rest from it (IndexedBytes,
  // MediaReader::Prefetch). A read that fails is its error (kIoError, kCancelled, ...),
  // not kCorruptData.
  static Result<std::unique_ptr<Input>> Open(MediaReader& reader, Media media, int threads,
                                             int64_t frame_bytes_limit = 0);
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;

  AVFormatContext* format() const { return format_.get(); }
  AVCodecContext* codec() const { return codec_.get(); }
  int stream_index() const { return stream_; }
  // The stream's time base as a double (seconds per tick) and its first timestamp.
  double time_base() const { return time_base_; }
  int64_t start_pts() const { return start_pts_; }
  // The stream's duration in seconds, or 0 when the container does not say.
  double duration() const { return duration_; }

  // Seeks to the last keyframe at or before `seconds` (from the stream's start; the
  // demuxer's notion of it, a presentation time) and resets the decoder. Cheap when the
  // container has an index (MP4, MKV).
  Status SeekBefore(double seconds);
  // The decode time (seconds from the stream's start) of the last keyframe at or before
  // `seconds` that the container's index lists (MP4, MKV); nullopt when it lists none
  // there. Lets a reader skip ahead: restarting at a keyframe past the frames already
  // decoded (SeekToKeyframe) saves decoding the frames between.
  std::optional<double> IndexedKeyframeBefore(double seconds) const;
  // Restarts decoding at the indexed keyframe whose decode time is `key` (a value of
  // IndexedKeyframeBefore): seeks to or before it, resets the decoder, and drops the
  // stream's packets before it undecoded (up to the first keyframe whose decode or
  // presentation time reaches `key`: it, or one before it). Exact where a seek by time
  // is not: demuxers take a seek target as a presentation time, and a keyframe shows up
  // to the reorder delay after its decode time, so seeking to `key` itself lands a
  // keyframe early in an MP4 with B-frames.
  Status SeekToKeyframe(double key);
  // Restarts decoding at the stream's keyframe packet whose presentation timestamp is
  // `pts`, reading on from where the demuxer is (no seek): the packets before it are read
  // and dropped undecoded, and the decoder is reset (the frames it holds are dropped).
  // For a reader that knows the packets ahead (video.patchify: from a read of them
  // before) and that `pts`'s packet is not read yet (packets_read). False, and nothing
  // done, while packets read ahead wait to be sent (StopAfter's).
  bool SkipToKeyframe(int64_t pts);
  // The stream's packets NextFrame has read since Open (those dropped undecoded included).
  int64_t packets_read() const { return packets_read_; }
  // How much later than its index time (a decode timestamp) a keyframe may show: the
  // decoder's reordering delay in frames (B-frames) plus one, in seconds.
  double ReorderSeconds() const;
  // Frames the caller will not take: from now on, a packet is sent to the decoder with
  // AVDISCARD_NONREF (the decoder drops it if no other frame references it: most
  // B-frames) when a packet sent before it since the last seek starts later than it and
  // at or before `seconds` — the frame then shows only before `seconds`, never at it or
  // after. The frames that are decoded are bit-identical to those of a full decode
  // (nothing reads a non-reference frame); the dropped ones never come out of NextFrame.
  // Only ever raise `seconds` between seeks. Negative (the default): every frame decodes.
  void SkipUnreferencedBefore(double seconds);
  // Frames the caller will not take, told by the ones it will: from now on, a packet
  // whose presentation timestamp (ticks) is not in `taken` (sorted) is sent with
  // AVDISCARD_NONREF, as above — the decoded frames stay bit-identical, the unreferenced
  // frames not taken never come out. For a reader that knows the timestamps of the frames
  // it takes (video.patchify, from the packets read beforehand). Empty: off.
  void SkipUnreferencedBut(std::vector<int64_t> taken);
  // The caller takes no frame that shows after `seconds` before its next seek: once no
  // packet still to come shows at or before it, the decoder is drained instead of being
  // sent more, and NextFrame returns the frames it holds, then false (stopped() is then
  // true until the next seek). That is known from the packets' timestamps, read ahead
  // undecoded: a stream that reorders at most d frames (the decoder's has_b_frames)
  // cannot show a later packet before d + 1 packets already read that show after
  // `seconds` (a margin of kStopMargin more are read). Saves decoding the frames after
  // the last one taken, which only tell that it is the last starting at or before the
  // time: d + 1 of them, as the decoder outputs a frame only d frames late. Negative
  // (the default): off.
  void StopAfter(double seconds);
  bool stopped() const { return state_ == State::kStopping || state_ == State::kStopped; }
  static constexpr int kStopMargin = 2;
  // The next decoded frame of the stream into `frame` (unreferenced first): true, or
  // false at the end of the stream (after draining the decoder).
  Result<bool> NextFrame(AVFrame* frame);
  // A frame's time in seconds from the stream's start (its best-effort timestamp).
  double FrameTime(const AVFrame* frame) const;
  // A frame's best-effort timestamp in ticks of the stream's time base (kNoTime: none).
  static int64_t FrameTicks(const AVFrame* frame);
  // The presentation timestamp (ticks) of the first packet sent to the decoder since the
  // last seek: the frame decoding restarted at; kNoTime before one is sent. A reader that
  // trusts the index checks that it is a keyframe that comes out at this time.
  int64_t restart_pts() const { return restart_pts_; }
  // Video frames the decoder has decoded since Open (the pictures it allocated): those it
  // returned and those a seek flushed before they came out; not those dropped undecoded
  // (SkipUnreferencedBefore, the packets SeekToKeyframe drops).
  int64_t frames_decoded() const { return frame_bytes_->pictures.load(); }
  // Packets NextFrame sent that the decoder refused as damaged (and skipped) since Open.
  int64_t damaged_packets() const { return damaged_packets_; }

  // The keyframes the container's index lists (MP4's sync samples, MKV's cues), in index
  // order: the index time (what SeekToKeyframe takes) and when it shows, estimated as its
  // index time less the first entry's (a decode-time index starts its first keyframe,
  // which shows at 0, a reorder delay early). Empty when the index lists none, or when
  // its times do not increase (an index that lies: the caller decodes from the start).
  struct IndexedKeyframe {
    double index_time = 0;
    double shows_at = 0;
  };
  std::vector<IndexedKeyframe> IndexedKeyframes() const;
  // Where in the file the stream's packets lie from the index entry at `from` (an index
  // time, as IndexedKeyframeBefore gives; before the first entry: from it) through the
  // last entry at or before `to`, and `after` entries past that one: from the first
  // byte of those packets to the end of the last (the other streams' bytes between
  // included). nullopt when the index has no entries. For a reader that prefetches what
  // a decode will read (ranges read through Open(MediaReader&)).
  std::optional<MediaReader::Range> IndexedBytes(double from, double to, int after) const;
  // After a seek: decodes the stream's next packet that is not dropped (the keyframe a
  // SeekToKeyframe restarts at) alone, draining the decoder, into `frame`: true, or false
  // when no frame comes out (the end of the stream, a packet that does not decode, or
  // one that needs frames before it). One frame decoded; the next call must seek first.
  Result<bool> DecodeFirstFrame(AVFrame* frame);
  static constexpr int64_t kNoTime = INT64_MIN;  // = AV_NOPTS_VALUE

  // Reading and decoding apart, for a reader that picks the packets to decode (audio.decode
  // of one window), instead of NextFrame. The stream's next packet into `packet`
  // (unreferenced first), undecoded: true, or false at the end of the container.
  Result<bool> ReadPacket(AVPacket* packet);
  // Decodes `packet` (nullptr: no more: the decoder is drained). A damaged packet is
  // skipped, as NextFrame skips it.
  Status SendPacket(const AVPacket* packet);
  // The next frame the decoder has ready into `frame`: true, or false when it wants
  // another packet (or is drained).
  Result<bool> ReceiveFrame(AVFrame* frame);

 private:
  Input() = default;
  // Whether a frame with presentation timestamp `pts` shows only before the time of
  // SkipUnreferencedBefore: a packet sent since the last seek starts after it, by then.
  bool Unshown(int64_t pts) const;
  // The decoder flushed and what follows a restart cleared (a seek's, a keyframe skip's):
  // nothing drained or stopped, no packet sent since.
  void ResetDecoder();
  // Whether SkipUnreferencedBut is on and `pts` is not among the frames taken.
  bool NotTaken(int64_t pts) const;
  // The stream's next packet into packet_ (false at the end), less those a SeekToKeyframe
  // drops; notes restart_pts_.
  Result<bool> NextDecodablePacket();
  // Reads the stream's next packet, less those a SeekToKeyframe drops, into `packet`.
  Result<bool> ReadDecodable(AVPacket* packet);
  // StopAfter: whether no packet after packet_ (read ahead into ahead_) shows at or before
  // stop_after_.
  Result<bool> NothingLaterShowsByStop();

  struct Memory {  // what the AVIOContext reads from
    const uint8_t* data = nullptr;
    size_t size = 0;
    size_t pos = 0;
  };
  struct Ranged {  // or this: an object read in ranges
    MediaReader* reader = nullptr;
    int64_t pos = 0;
    Buffer block;          // the bytes of the last read, from block_at
    int64_t block_at = 0;
    Status error;          // the reader's, when a read failed
  };
  // The AVIOContext and the format context over `opaque`.
  Status OpenIo(void* opaque, int (*read)(void*, uint8_t*, int),
                int64_t (*seek)(void*, int64_t, int));
  // Opens the container (`known`: its demuxer, else probed) and the stream's decoder.
  static Result<std::unique_ptr<Input>> OpenContainer(std::unique_ptr<Input> in,
                                                      const AVInputFormat* known, Media media,
                                                      int threads, int64_t frame_bytes_limit);
  // The reader's error when a read through it failed, else Error(what, av_error).
  Status ReadError(std::string_view what, int av_error) const;
  // kResourceExhausted naming the frames refused, or OK when none was.
  Status FramesRefused() const;
  // `status` of a failed decode, unless a frame was refused: then that.
  Status DecodeError(std::string_view what, int av_error) const;

  // The decode since the last seek (ResetDecoder: kDecoding), as NextFrame and
  // DecodeFirstFrame move it.
  enum class State {
    kDecoding,  // packets are sent as the decoder asks for them
    kDraining,  // the stream's end was sent: the decoder gives out the frames it holds
    kStopping,  // as kDraining, the end sent at StopAfter's time instead (stopped())
    kDone,      // drained (or DecodeFirstFrame's frame out): no frame until a seek
    kStopped,   // kDone reached from kStopping (stopped() still)
  };
  // What `state` becomes once the decoder is drained: kDone, or kStopped after a stop.
  static State Drained(State state) {
    return state == State::kStopping ? State::kStopped : State::kDone;
  }

  // Members are destroyed in reverse order: the FFmpeg handles before what they point
  // into (memory_ or ranged_ is the AVIOContext's opaque, &frame_bytes_ the codec's),
  // and the packet and the codec before the format context, which is freed before the
  // AVIOContext it reads through.
  Memory memory_;
  Ranged ranged_;
  std::shared_ptr<FrameBytes> frame_bytes_;  // also held by every counted frame
  IoPtr io_;
  FormatPtr format_;
  CodecPtr codec_;
  PacketPtr packet_;
  int stream_ = -1;
  double time_base_ = 0;
  int64_t start_pts_ = 0;
  double duration_ = 0;
  State state_ = State::kDecoding;
  // SeekToKeyframe: the stream's packets are dropped until a keyframe whose decode or
  // presentation timestamp (ticks) reaches this; kNoTime: none are.
  int64_t drop_before_ = kNoTime;
  int64_t restart_pts_ = kNoTime;
  // StopAfter: its time in ticks (kNoTime: off); the packets read ahead, not yet sent
  // (owned; at most the reorder window plus the margin).
  int64_t stop_after_ = kNoTime;
  std::vector<PacketPtr> ahead_;
  size_t ahead_begin_ = 0;
  // SkipUnreferencedBefore: its time in ticks (kNoTime: off), and the presentation
  // timestamps of the last packets sent since the last seek (a ring), the later frames
  // that show a skipped one's time is over.
  int64_t skip_before_ = kNoTime;
  std::array<int64_t, 16> sent_pts_{};
  size_t sent_count_ = 0;
  std::vector<int64_t> taken_pts_;  // SkipUnreferencedBut's, sorted (empty: off)
  int64_t packets_read_ = 0;
  int64_t damaged_packets_ = 0;
};

}  // namespace headrace::av
