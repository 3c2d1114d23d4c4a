#include "headrace/ops/av/av_input.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/core/iso_bmff.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/buffer.h>
#include <libavutil/error.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>
#include <libavutil/rational.h>
}

namespace headrace::av {
namespace {

constexpr int kIoBufferBytes = 64 * 1024;

// The demuxer of the common containers, from their magic bytes. FFmpeg's probe runs every
// demuxer it has over the first kilobytes (libopenmpt's among them), which costs more
// than decoding a short clip; these signatures are unambiguous, and anything else is
// probed as usual.
const AVInputFormat* GuessFormat(const uint8_t* d, size_t n) {
  const auto at = [&](size_t offset, std::string_view magic) {
    return n >= offset + magic.size() && std::memcmp(d + offset, magic.data(), magic.size()) == 0;
  };
  const char* name = nullptr;
  if (at(0, "RIFF") && at(8, "WAVE")) name = "wav";
  else if (at(0, "fLaC")) name = "flac";
  else if (at(0, "OggS")) name = "ogg";
  else if (at(4, "ftyp")) name = "mov,mp4,m4a,3gp,3g2,mj2";
  else if (at(0, "\x1A\x45\xDF\xA3")) name = "matroska,webm";
  else if (at(0, "ID3")) name = "mp3";
  return name != nullptr ? av_find_input_format(name) : nullptr;
}

// A frame's buffers, counted in FrameBytes until the last reference to the frame goes.
struct CountedFrame {
  std::shared_ptr<FrameBytes> counter;
  AVBufferRef* original = nullptr;  // the decoder's own buffer 0, given back when done
  int64_t bytes = 0;
};

void ReleaseCountedFrame(void* opaque, uint8_t*) {
  auto* counted = static_cast<CountedFrame*>(opaque);
  counted->counter->held.fetch_sub(counted->bytes);
  av_buffer_unref(&counted->original);
  delete counted;
}

// The decoder's get_buffer2 (AVCodecContext::opaque: the FrameBytes): counts the
// pictures, and with a limit counts their bytes: FFmpeg's own allocation (its pools),
// refused past the limit; buffer 0 is wrapped so that its release gives the frame's
// bytes back. Frame threads call it from their threads.
int GetCountedBuffer(AVCodecContext* codec, AVFrame* frame, int flags) {
  auto& counter = *static_cast<std::shared_ptr<FrameBytes>*>(codec->opaque);
  if (codec->codec_type == AVMEDIA_TYPE_VIDEO) counter->pictures.fetch_add(1);
  if (counter->limit <= 0) return avcodec_default_get_buffer2(codec, frame, flags);
  int64_t bytes = 0;
  if (codec->codec_type == AVMEDIA_TYPE_VIDEO) {
    bytes = av_image_get_buffer_size(static_cast<AVPixelFormat>(frame->format), frame->width,
                                     frame->height, 1);
    if (bytes < 0) bytes = int64_t{4} * frame->width * frame->height;
  }
  if (bytes > 0 && counter->held.load() + bytes > counter->limit) {
    int64_t none = 0;
    if (counter->refused.compare_exchange_strong(none, counter->held.load() + bytes)) {
      counter->width = frame->width;
      counter->height = frame->height;
    }
    return AVERROR(ENOMEM);
  }
  if (const int rc = avcodec_default_get_buffer2(codec, frame, flags); rc < 0) return rc;
  if (bytes <= 0 || frame->buf[0] == nullptr) return 0;
  auto* counted = new CountedFrame{counter, frame->buf[0], bytes};
  AVBufferRef* wrapper = av_buffer_create(frame->buf[0]->data, frame->buf[0]->size,
                                          ReleaseCountedFrame, counted, 0);
  if (wrapper == nullptr) {
    delete counted;
    av_frame_unref(frame);
    return AVERROR(ENOMEM);
  }
  counter->held.fetch_add(bytes);
  frame->buf[0] = wrapper;
  return 0;
}

// The most entries an MP4/MOV track's edit list (moov/trak/edts/elst) declares, read from
// the box headers without FFmpeg (0 when none has one). FFmpeg's demuxer rebuilds the
// track's index for each edit at open (a 1M-entry list took 572 MB); the check must come
// before it. Written by hand: libavformat offers no look at the boxes before it parses
// them, and this walk reads only sizes, types and one count.
int64_t LargestEditList(const uint8_t* d, size_t n) {
  const auto be32 = [](const uint8_t* p) {
    return (uint64_t{p[0]} << 24) | (uint64_t{p[1]} << 16) | (uint64_t{p[2]} << 8) | p[3];
  };
  // Walks the boxes of [begin, end) at `depth`: 0 the file, 1 moov, 2 trak, 3 edts.
  const auto walk = [&](auto& self, size_t begin, size_t end, int depth) -> int64_t {
    static constexpr const char* kInto[] = {"moov", "trak", "edts"};
    int64_t most = 0;
    size_t at = begin;
    while (end - at >= 8) {
      const std::optional<BoxHeader> box = ParseBoxHeader(d + at, end - at, end - at);
      if (!box.has_value()) break;  // damaged: FFmpeg's to judge
      if (depth < 3 && box->is(kInto[depth])) {
        most = std::max(most, self(self, at + box->header, at + box->size, depth + 1));
      } else if (depth == 3 && box->is("elst") && box->size >= box->header + 8u) {
        most = std::max(most, static_cast<int64_t>(be32(d + at + box->header + 4)));
      }
      at += box->size;
    }
    return most;
  };
  return walk(walk, 0, n, 0);
}

}  // namespace

void SilenceLog() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_level(AV_LOG_QUIET); });
}

Status Error(std::string_view what, int av_error) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(av_error, text, sizeof text);
  return Status::CorruptData(std::string(what) + ": " + text);
}

void FrameDeleter::operator()(AVFrame* frame) const { av_frame_free(&frame); }

FramePtr NewFrame() { return FramePtr(av_frame_alloc()); }

void PacketDeleter::operator()(AVPacket* packet) const { av_packet_free(&packet); }

PacketPtr NewPacket() { return PacketPtr(av_packet_alloc()); }

void CodecDeleter::operator()(AVCodecContext* codec) const { avcodec_free_context(&codec); }

void FormatDeleter::operator()(AVFormatContext* format) const {
  // avformat_close_input is documented for an opened input (avformat_open_input sets
  // iformat); avformat_free_context for one only allocated.
  if (format->iformat != nullptr) {
    avformat_close_input(&format);
  } else {
    avformat_free_context(format);
  }
}

void IoDeleter::operator()(AVIOContext* io) const {
  av_freep(&io->buffer);
  avio_context_free(&io);
}

namespace {

// An MP4 whose edit lists FFmpeg would take too long to read (LargestEditList).
Status CheckEditLists(const uint8_t* data, size_t size) {
  if (const int64_t edits = LargestEditList(data, size); edits > kMaxEditListEntries) {
    return Status::ResourceExhausted(
        "the MP4's edit list declares " + std::to_string(edits) + " entries (at most " +
        std::to_string(kMaxEditListEntries) +
        " are read: FFmpeg rebuilds a track's index for each)");
  }
  return Status::Ok();
}

// The first top-level `moov` box of an MP4 read through `reader`, found by the box
// headers (the header, sizes and types only: what lies between is not read), or an empty
// buffer when there is none. Held in memory outside the budgets, so bounded: by
// kMaxMoovBytes (the index of hours of video) and by the decode allowance
// (`limit`, memory.decode_bytes_per_thread) when there is one.
constexpr int64_t kMaxMoovBytes = int64_t{256} << 20;
// The reader has read the head and an index after the media data already (it asks for
// both when it opens: io/ranged_reader.h), so this walk reads nothing new but a larger
// index's rest.
Result<Buffer> ReadMoov(MediaReader& reader, int64_t limit) {
  int64_t at = 0;
  const int64_t end = reader.size();
  while (end - at >= 8) {
    HR_ASSIGN_OR_RETURN(Buffer header, reader.ReadExact(at, 16));
    const std::optional<BoxHeader> box =
        ParseBoxHeader(header.data(), header.size(), static_cast<uint64_t>(end - at));
    if (!box.has_value()) break;  // FFmpeg's to judge
    const uint64_t size = box->size;
    if (box->is("moov")) {
      const int64_t most = limit > 0 ? std::min(limit, kMaxMoovBytes) : kMaxMoovBytes;
      if (static_cast<int64_t>(size) > most) {
        return Status::ResourceExhausted(
            "the MP4's index (moov) is " + std::to_string(size) + " bytes, over the " +
            std::to_string(most) +
            " an index read in ranges may hold (the decode allowance, "
            "memory.decode_bytes_per_thread, up to 256 MiB)");
      }
      return reader.ReadExact(at, static_cast<int64_t>(size));
    }
    at += static_cast<int64_t>(size);
  }
  return Buffer();
}

}  // namespace

Result<std::unique_ptr<Input>> Input::Open(const uint8_t* data, size_t size, Media media,
                                           int threads, int64_t frame_bytes_limit) {
  SilenceLog();
  if (size == 0) return Status::CorruptData("empty file");
  std::unique_ptr<Input> in(new Input());
  in->memory_ = Memory{data, size, 0};
  const auto read = [](void* opaque, uint8_t* out, int want) -> int {
    auto* m = static_cast<Memory*>(opaque);
    const size_t n = std::min(static_cast<size_t>(want), m->size - m->pos);
    if (n == 0) return AVERROR_EOF;
    std::memcpy(out, m->data + m->pos, n);
    m->pos += n;
    return static_cast<int>(n);
  };
  const auto seek = [](void* opaque, int64_t offset, int whence) -> int64_t {
    auto* m = static_cast<Memory*>(opaque);
    if (whence & AVSEEK_SIZE) return static_cast<int64_t>(m->size);
    int64_t base = 0;
    switch (whence & ~AVSEEK_FORCE) {
      case SEEK_SET: base = 0; break;
      case SEEK_CUR: base = static_cast<int64_t>(m->pos); break;
      case SEEK_END: base = static_cast<int64_t>(m->size); break;
      default: return -1;
    }
    const int64_t to = base + offset;
    if (to < 0 || to > static_cast<int64_t>(m->size)) return -1;
    m->pos = static_cast<size_t>(to);
    return to;
  };
  const AVInputFormat* known = GuessFormat(data, size);
  if (known != nullptr && std::strncmp(known->name, "mov", 3) == 0) {
    HR_RETURN_IF_ERROR(CheckEditLists(data, size));
  }
  HR_RETURN_IF_ERROR(in->OpenIo(&in->memory_, read, seek));
  return OpenContainer(std::move(in), known, media, threads, frame_bytes_limit);
}

Result<std::unique_ptr<Input>> Input::Open(MediaReader& reader, Media media, int threads,
                                           int64_t frame_bytes_limit) {
  SilenceLog();
  if (reader.size() == 0) return Status::CorruptData("empty file");
  std::unique_ptr<Input> in(new Input());
  in->ranged_.reader = &reader;
  // Reads from the block in hand, else asks the reader for the bytes from `pos` (it
  // waits for the range read that holds them, or reads them then).
  const auto read = [](void* opaque, uint8_t* out, int want) -> int {
    auto* r = static_cast<Ranged*>(opaque);
    if (r->pos >= r->reader->size()) return AVERROR_EOF;
    if (r->pos < r->block_at || r->pos >= r->block_at + static_cast<int64_t>(r->block.size())) {
      Result<Buffer> block = r->reader->Read(r->pos, std::max(want, kIoBufferBytes));
      if (!block.ok()) {
        r->error = block.status();
        return AVERROR(EIO);
      }
      if (block->size() == 0) return AVERROR_EOF;
      r->block = *std::move(block);
      r->block_at = r->pos;
    }
    const int64_t skip = r->pos - r->block_at;
    const int n = static_cast<int>(
        std::min<int64_t>(want, static_cast<int64_t>(r->block.size()) - skip));
    std::memcpy(out, r->block.data() + skip, static_cast<size_t>(n));
    r->pos += n;
    return n;
  };
  const auto seek = [](void* opaque, int64_t offset, int whence) -> int64_t {
    auto* r = static_cast<Ranged*>(opaque);
    const int64_t size = r->reader->size();
    if (whence & AVSEEK_SIZE) return size;
    int64_t base = 0;
    switch (whence & ~AVSEEK_FORCE) {
      case SEEK_SET: base = 0; break;
      case SEEK_CUR: base = r->pos; break;
      case SEEK_END: base = size; break;
      default: return -1;
    }
    const int64_t to = base + offset;
    if (to < 0 || to > size) return -1;
    r->pos = to;
    return to;
  };
  HR_ASSIGN_OR_RETURN(Buffer head, reader.ReadExact(0, 64));
  const AVInputFormat* known = GuessFormat(head.data(), head.size());
  if (known != nullptr && std::strncmp(known->name, "mov", 3) == 0) {
    // The index, read whole before FFmpeg parses it (and checked as the bytes in memory
    // are); FFmpeg's reads of it then come from the reader's ranges.
    HR_ASSIGN_OR_RETURN(Buffer moov, ReadMoov(reader, frame_bytes_limit));
    HR_RETURN_IF_ERROR(CheckEditLists(moov.data(), moov.size()));
  }
  HR_RETURN_IF_ERROR(in->OpenIo(&in->ranged_, read, seek));
  // Every seek goes to the reader: a short seek forward would otherwise read the bytes
  // skipped (FFmpeg reads through gaps of up to 32 KiB), which no plan asked for.
  in->io_->direct = 1;
  Result<std::unique_ptr<Input>> opened =
      OpenContainer(std::move(in), known, media, threads, frame_bytes_limit);
  return opened;
}

Status Input::OpenIo(void* opaque, int (*read)(void*, uint8_t*, int),
                     int64_t (*seek)(void*, int64_t, int)) {
  auto* buffer = static_cast<uint8_t*>(av_malloc(kIoBufferBytes));
  if (buffer == nullptr) return Status::ResourceExhausted("av_malloc failed");
  io_.reset(avio_alloc_context(buffer, kIoBufferBytes, 0, opaque, read, nullptr, seek));
  if (io_ == nullptr) {
    av_free(buffer);
    return Status::ResourceExhausted("avio_alloc_context failed");
  }
  format_.reset(avformat_alloc_context());
  if (format_ == nullptr) return Status::ResourceExhausted("avformat_alloc_context failed");
  format_->pb = io_.get();
  format_->flags |= AVFMT_FLAG_CUSTOM_IO;
  format_->max_streams = kMaxStreams;
  return Status::Ok();
}

Result<std::unique_ptr<Input>> Input::OpenContainer(std::unique_ptr<Input> in,
                                                    const AVInputFormat* known, Media media,
                                                    int threads, int64_t frame_bytes_limit) {
  // A known container declares its codecs: FFmpeg's second look at the first packets (a
  // WAV's PCM probed against every demuxer, in case it holds MP3) is skipped too.
  if (known != nullptr) in->format_->max_probe_packets = 0;
  // avformat_open_input frees the context when it fails (and sets the pointer null).
  AVFormatContext* format = in->format_.release();
  const int opened = avformat_open_input(&format, nullptr, known, nullptr);
  in->format_.reset(format);
  if (opened < 0) {
    return in->ReadError("not a media container FFmpeg reads (or one of more than " +
                     std::to_string(kMaxStreams) + " streams)",
                 opened);
  }
  const AVMediaType type = media == Media::kVideo ? AVMEDIA_TYPE_VIDEO : AVMEDIA_TYPE_AUDIO;
  // Containers with a header (MP4, MKV, WAV, FLAC) already describe their streams; probing
  // them (avformat_find_stream_info decodes frames to do it) is only for those that do
  // not, and costs as much as the decode itself on short files.
  // The size a stream declares, checked before anything decodes a frame (probing the
  // stream below decodes one): a decoder holds a few frames of it at least.
  constexpr int kFewestFramesHeld = 3;  // one reference, one decoding, one returned
  const auto check_declared = [&](const AVCodecParameters* p) -> Status {
    if (type != AVMEDIA_TYPE_VIDEO || frame_bytes_limit <= 0 || p->width <= 0 ||
        p->height <= 0) {
      return Status::Ok();
    }
    const int64_t frame = int64_t{3} * p->width * p->height / 2;  // 4:2:0, the least
    if (frame <= frame_bytes_limit / kFewestFramesHeld) return Status::Ok();
    return Status::ResourceExhausted(
        "the video is " + std::to_string(p->width) + "x" + std::to_string(p->height) + ": " +
        std::to_string(kFewestFramesHeld) + " frames of it (" +
        std::to_string(kFewestFramesHeld * frame) +
        " bytes, the fewest a decoder holds) pass the decode allowance of " +
        std::to_string(frame_bytes_limit) +
        " bytes per thread (memory.decode_bytes_per_thread; by default "
        "memory.budget_bytes / 4)");
  };
  bool described = false;
  for (unsigned i = 0; i < in->format_->nb_streams; ++i) {
    const AVCodecParameters* p = in->format_->streams[i]->codecpar;
    if (p->codec_type != type || p->codec_id == AV_CODEC_ID_NONE) continue;
    HR_RETURN_IF_ERROR(check_declared(p));
    described |= type == AVMEDIA_TYPE_VIDEO ? p->width > 0 && p->height > 0 && p->format >= 0
                                            : p->sample_rate > 0 && p->ch_layout.nb_channels > 0 &&
                                                  p->format >= 0;
  }
  if (!described) {
    // Probing decodes frames at the stream's full size, before any size is declared (a
    // raw H.264 stream's SPS): each probing decoder gets the pixel limit of the decode
    // allowance (AVCodecContext.max_pixels), so that a 16000x16000 SPS is refused by the
    // decoder rather than allocated (4.7 KB of it took 2.3-3.8 GB).
    const unsigned streams = in->format_->nb_streams;
    std::vector<AVDictionary*> options(streams, nullptr);
    if (type == AVMEDIA_TYPE_VIDEO && frame_bytes_limit > 0) {
      const int64_t pixels = frame_bytes_limit / kFewestFramesHeld * 2 / 3;  // 4:2:0
      for (AVDictionary*& o : options) {
        av_dict_set_int(&o, "max_pixels", std::max<int64_t>(pixels, 1), 0);
      }
    }
    const int rc = avformat_find_stream_info(in->format(), streams ? options.data() : nullptr);
    for (AVDictionary*& o : options) av_dict_free(&o);
    if (rc < 0) return in->ReadError("cannot read the stream parameters", rc);
    // What the probe found is checked as a container's declared size is.
    for (unsigned i = 0; i < in->format_->nb_streams; ++i) {
      const AVCodecParameters* p = in->format_->streams[i]->codecpar;
      if (p->codec_type == type) HR_RETURN_IF_ERROR(check_declared(p));
    }
  }
  const AVCodec* decoder = nullptr;
  in->stream_ = av_find_best_stream(in->format(), type, -1, -1, &decoder, 0);
  if (in->stream_ < 0) {
    return Error(media == Media::kVideo ? "no video stream FFmpeg decodes"
                                        : "no audio stream FFmpeg decodes",
                 in->stream_);
  }
  const AVStream* stream = in->format_->streams[in->stream_];
  in->codec_.reset(avcodec_alloc_context3(decoder));
  if (in->codec_ == nullptr) return Status::ResourceExhausted("avcodec_alloc_context3 failed");
  if (int rc = avcodec_parameters_to_context(in->codec(), stream->codecpar); rc < 0) {
    return Error("bad codec parameters", rc);
  }
  in->codec_->thread_count = std::max(1, threads);
  in->codec_->pkt_timebase = stream->time_base;
  // Always, limit or not: the pictures the decoder allocates are the frames it decodes
  // (those it drops undecoded allocate none, those a seek flushes unseen do).
  in->frame_bytes_ = std::make_shared<FrameBytes>();
  in->frame_bytes_->limit = frame_bytes_limit;
  in->codec_->opaque = &in->frame_bytes_;
  in->codec_->get_buffer2 = GetCountedBuffer;
  // The other streams are not read into packets.
  for (unsigned i = 0; i < in->format_->nb_streams; ++i) {
    if (static_cast<int>(i) != in->stream_) in->format_->streams[i]->discard = AVDISCARD_ALL;
  }
  if (int rc = avcodec_open2(in->codec(), decoder, nullptr); rc < 0) {
    return Error(std::string("cannot open the ") + decoder->name + " decoder", rc);
  }
  in->packet_ = NewPacket();
  if (in->packet_ == nullptr) return Status::ResourceExhausted("av_packet_alloc failed");
  in->time_base_ = av_q2d(stream->time_base);
  in->start_pts_ = stream->start_time == AV_NOPTS_VALUE ? 0 : stream->start_time;
  if (stream->duration != AV_NOPTS_VALUE && stream->duration > 0) {
    in->duration_ = static_cast<double>(stream->duration) * in->time_base_;
  } else if (in->format_->duration != AV_NOPTS_VALUE && in->format_->duration > 0) {
    in->duration_ = static_cast<double>(in->format_->duration) / AV_TIME_BASE;
  }
  return in;
}

Status Input::SeekBefore(double seconds) {
  // To the nearest tick: a time read from the index converts back to its own timestamp.
  const auto ts = start_pts_ + std::llround(seconds / time_base_);
  if (int rc = av_seek_frame(format(), stream_, ts, AVSEEK_FLAG_BACKWARD); rc < 0) {
    return ReadError("seek failed", rc);
  }
  ResetDecoder();
  drop_before_ = stop_after_ = kNoTime;
  ahead_.clear();
  ahead_begin_ = 0;
  return Status::Ok();
}

void Input::ResetDecoder() {
  avcodec_flush_buffers(codec());
  state_ = State::kDecoding;
  restart_pts_ = kNoTime;
  sent_count_ = 0;
}

std::optional<double> Input::IndexedKeyframeBefore(double seconds) const {
  AVStream* stream = format_->streams[stream_];
  const auto ts = start_pts_ + static_cast<int64_t>(seconds / time_base_);
  const int i = av_index_search_timestamp(stream, ts, AVSEEK_FLAG_BACKWARD);
  if (i < 0) return std::nullopt;
  const AVIndexEntry* entry = avformat_index_get_entry(stream, i);
  if (entry == nullptr || (entry->flags & AVINDEX_KEYFRAME) == 0) return std::nullopt;
  return static_cast<double>(entry->timestamp - start_pts_) * time_base_;
}

Status Input::SeekToKeyframe(double key) {
  // The seek lands on this keyframe or one before it (see the header); what lies between
  // is read, not decoded. A demuxer that takes the target as a presentation time and
  // searches its decode-time index (MP4's) first takes off the stream's decode delay:
  // its index starts that much before the stream's start. Adding it back lands on the
  // keyframe itself rather than one early, whose packets up to it would all be read.
  double delay = 0;
  if (const AVIndexEntry* first = avformat_index_get_entry(format_->streams[stream_], 0)) {
    delay = std::max(0.0, static_cast<double>(start_pts_ - first->timestamp) * time_base_);
  }
  HR_RETURN_IF_ERROR(SeekBefore(key + delay));
  drop_before_ = start_pts_ + std::llround(key / time_base_);
  return Status::Ok();
}

bool Input::SkipToKeyframe(int64_t pts) {
  if (ahead_begin_ < ahead_.size()) return false;
  ResetDecoder();
  // A keyframe before it decodes and shows before it (max(dts, pts) < pts): dropped too.
  drop_before_ = pts;
  return true;
}

void Input::StopAfter(double seconds) {
  // Rounded up, and a microsecond later (a frame "at" a time may come out a rounding
  // error after it): stopping late only decodes more.
  stop_after_ = seconds < 0 ? kNoTime
                            : start_pts_ + static_cast<int64_t>(std::ceil((seconds + 1e-6) /
                                                                          time_base_));
}

void Input::SkipUnreferencedBefore(double seconds) {
  skip_before_ = seconds < 0 ? kNoTime : start_pts_ + static_cast<int64_t>(seconds / time_base_);
}

void Input::SkipUnreferencedBut(std::vector<int64_t> taken) {
  std::sort(taken.begin(), taken.end());
  taken_pts_ = std::move(taken);
}

double Input::ReorderSeconds() const {
  const AVStream* stream = format_->streams[stream_];
  AVRational rate = stream->avg_frame_rate;
  if (rate.num <= 0 || rate.den <= 0) rate = stream->r_frame_rate;
  const double frame = rate.num > 0 && rate.den > 0 ? av_q2d(av_inv_q(rate)) : 0.1;
  return (std::max(codec_->has_b_frames, stream->codecpar->video_delay) + 1) * frame;
}

Result<bool> Input::NextDecodablePacket() {
  if (ahead_begin_ < ahead_.size()) {
    av_packet_move_ref(packet_.get(), ahead_[ahead_begin_].get());
    if (++ahead_begin_ == ahead_.size()) {
      ahead_.clear();
      ahead_begin_ = 0;
    }
    return true;
  }
  return ReadDecodable(packet_.get());
}

Result<bool> Input::NothingLaterShowsByStop() {
  const int window =
      std::max(codec_->has_b_frames, format_->streams[stream_]->codecpar->video_delay) + 1 +
      kStopMargin;
  // packet_ shows after the stop; so must the next window - 1 packets.
  for (size_t i = ahead_begin_;; ++i) {
    if (static_cast<int>(i - ahead_begin_) + 1 >= window) return true;
    if (i == ahead_.size()) {
      PacketPtr p = NewPacket();
      if (p == nullptr) return Status::ResourceExhausted("av_packet_alloc failed");
      HR_ASSIGN_OR_RETURN(const bool more, ReadDecodable(p.get()));
      if (!more) return true;  // the end: every packet is read
      ahead_.push_back(std::move(p));
    }
    const int64_t pts = ahead_[i]->pts;
    if (pts == AV_NOPTS_VALUE || pts <= stop_after_) return false;
  }
}

Result<bool> Input::ReadDecodable(AVPacket* packet) {
  for (;;) {
    const int rc = av_read_frame(format(), packet);
    // A read through a reader that failed ends the container early: its error, not the end.
    if (rc == AVERROR_EOF) return ranged_.error.ok() ? Result<bool>(false) : ranged_.error;
    if (rc < 0) return ReadError("reading the container failed", rc);
    if (packet->stream_index != stream_) {
      av_packet_unref(packet);
      continue;
    }
    ++packets_read_;
    if (drop_before_ != kNoTime) {
      // Up to the keyframe of the index entry: its decode time (MP4's index) or its
      // presentation time (MKV's) is the entry's. Stopping at an earlier keyframe whose
      // time reaches it would only decode more, never differently.
      const int64_t at = std::max(packet->dts, packet->pts);  // AV_NOPTS_VALUE is the least
      if ((packet->flags & AV_PKT_FLAG_KEY) == 0 ||
          (at != AV_NOPTS_VALUE && at < drop_before_)) {
        av_packet_unref(packet);
        continue;
      }
      drop_before_ = kNoTime;  // decoding restarts at this keyframe
    }
    if (restart_pts_ == kNoTime) restart_pts_ = packet->pts;
    return true;
  }
}

Result<bool> Input::NextFrame(AVFrame* frame) {
  av_frame_unref(frame);
  while (state_ != State::kDone && state_ != State::kStopped) {
    const int got = avcodec_receive_frame(codec(), frame);
    if (got == 0) return true;
    if (got == AVERROR_EOF) {
      state_ = Drained(state_);
      break;
    }
    if (got != AVERROR(EAGAIN)) return DecodeError("decoding failed", got);
    if (state_ != State::kDecoding) {  // the decoder wants input, but there is none left
      state_ = Drained(state_);
      break;
    }
    HR_ASSIGN_OR_RETURN(const bool more, NextDecodablePacket());
    if (!more) {
      state_ = State::kDraining;
      avcodec_send_packet(codec(), nullptr);
      continue;
    }
    if (stop_after_ != kNoTime && packet_->pts != AV_NOPTS_VALUE && packet_->pts > stop_after_) {
      HR_ASSIGN_OR_RETURN(const bool stop, NothingLaterShowsByStop());
      if (stop) {  // every frame the caller takes is sent: out with what the decoder holds
        av_packet_unref(packet_.get());
        state_ = State::kStopping;
        avcodec_send_packet(codec(), nullptr);
        continue;
      }
    }
    // Decoded in the call (we send only once the decoder wants input), so the setting
    // applies to this packet alone; frame threads copy it when the packet is handed
    // to one.
    codec_->skip_frame =
        Unshown(packet_->pts) || NotTaken(packet_->pts) ? AVDISCARD_NONREF : AVDISCARD_DEFAULT;
    if (packet_->pts != AV_NOPTS_VALUE) {
      sent_pts_[sent_count_++ % sent_pts_.size()] = packet_->pts;
    }
    const int sent = avcodec_send_packet(codec(), packet_.get());
    av_packet_unref(packet_.get());
    // Damaged packets are skipped as FFmpeg's tools skip them; a stream with none that
    // decode ends with no frame, which the op reports.
    if (sent < 0 && sent != AVERROR_INVALIDDATA) return DecodeError("decoding failed", sent);
    if (sent == AVERROR_INVALIDDATA) ++damaged_packets_;
    // A refused frame may also end as a damaged one the decoder skips.
    HR_RETURN_IF_ERROR(FramesRefused());
  }
  HR_RETURN_IF_ERROR(FramesRefused());
  return false;
}

Result<bool> Input::DecodeFirstFrame(AVFrame* frame) {
  av_frame_unref(frame);
  if (state_ == State::kDone || state_ == State::kStopped) return false;
  HR_ASSIGN_OR_RETURN(const bool more, NextDecodablePacket());
  state_ = Drained(state_);  // the decoder is drained below: a seek resets it
  if (!more) return false;
  codec_->skip_frame = AVDISCARD_DEFAULT;
  const int sent = avcodec_send_packet(codec(), packet_.get());
  av_packet_unref(packet_.get());
  if (sent < 0 && sent != AVERROR_INVALIDDATA) return DecodeError("decoding failed", sent);
  avcodec_send_packet(codec(), nullptr);
  for (;;) {
    const int got = avcodec_receive_frame(codec(), frame);
    if (got == 0) return true;
    HR_RETURN_IF_ERROR(FramesRefused());
    if (got == AVERROR_EOF || got == AVERROR(EAGAIN)) return false;
    return DecodeError("decoding failed", got);
  }
}

std::vector<Input::IndexedKeyframe> Input::IndexedKeyframes() const {
  AVStream* stream = format_->streams[stream_];
  std::vector<IndexedKeyframe> keys;
  const int n = avformat_index_get_entries_count(stream);
  int64_t first = kNoTime, last = kNoTime;
  for (int i = 0; i < n; ++i) {
    const AVIndexEntry* entry = avformat_index_get_entry(stream, i);
    if (entry == nullptr || (entry->flags & AVINDEX_KEYFRAME) == 0) continue;
    if (last != kNoTime && entry->timestamp <= last) return {};  // out of order: a lie
    if (first == kNoTime) first = entry->timestamp;
    last = entry->timestamp;
    keys.push_back({static_cast<double>(entry->timestamp - start_pts_) * time_base_,
                    static_cast<double>(entry->timestamp - first) * time_base_});
  }
  return keys;
}

std::optional<MediaReader::Range> Input::IndexedBytes(double from, double to, int after) const {
  AVStream* stream = format_->streams[stream_];
  const int n = avformat_index_get_entries_count(stream);
  if (n <= 0) return std::nullopt;
  const auto search = [&](double seconds, int flags) {
    const int i = av_index_search_timestamp(
        stream, start_pts_ + static_cast<int64_t>(std::floor(seconds / time_base_ + 1e-6)),
        flags | AVSEEK_FLAG_BACKWARD);
    return std::max(i, 0);
  };
  const int first = search(from, 0);
  const int last = std::min(n - 1, std::max(first, search(to, AVSEEK_FLAG_ANY)) + after);
  int64_t begin = INT64_MAX, end = 0;
  for (int i = first; i <= last; ++i) {
    const AVIndexEntry* entry = avformat_index_get_entry(stream, i);
    if (entry == nullptr || entry->pos < 0) continue;
    begin = std::min(begin, entry->pos);
    end = std::max(end, entry->pos + entry->size);
  }
  if (begin >= end) return std::nullopt;
  return MediaReader::Range{begin, end - begin};
}

Status Input::ReadError(std::string_view what, int av_error) const {
  if (!ranged_.error.ok()) return ranged_.error;
  return Error(what, av_error);
}

Status Input::FramesRefused() const {
  if (frame_bytes_ == nullptr || frame_bytes_->refused.load() == 0) return Status::Ok();
  return Status::ResourceExhausted(
      "the decoder's frames (" + std::to_string(frame_bytes_->width) + "x" +
      std::to_string(frame_bytes_->height) + ") would hold " +
      std::to_string(frame_bytes_->refused.load()) +
      " bytes, past the decode allowance of " + std::to_string(frame_bytes_->limit) +
      " bytes per thread (memory.decode_bytes_per_thread; by default memory.budget_bytes / 4)");
}

Status Input::DecodeError(std::string_view what, int av_error) const {
  HR_RETURN_IF_ERROR(FramesRefused());
  return Error(what, av_error);
}

bool Input::Unshown(int64_t pts) const {
  if (skip_before_ == kNoTime || pts == AV_NOPTS_VALUE || pts >= skip_before_) return false;
  const size_t n = std::min(sent_count_, sent_pts_.size());
  for (size_t i = 0; i < n; ++i) {
    if (sent_pts_[i] > pts && sent_pts_[i] <= skip_before_) return true;
  }
  return false;
}

bool Input::NotTaken(int64_t pts) const {
  if (taken_pts_.empty() || pts == AV_NOPTS_VALUE) return false;
  return !std::binary_search(taken_pts_.begin(), taken_pts_.end(), pts);
}

int64_t Input::FrameTicks(const AVFrame* frame) {
  return frame->best_effort_timestamp != AV_NOPTS_VALUE ? frame->best_effort_timestamp
                                                        : frame->pts;
}

double Input::FrameTime(const AVFrame* frame) const {
  const int64_t pts = frame->best_effort_timestamp != AV_NOPTS_VALUE ? frame->best_effort_timestamp
                                                                     : frame->pts;
  if (pts == AV_NOPTS_VALUE) return 0;
  return static_cast<double>(pts - start_pts_) * time_base_;
}

Result<bool> Input::ReadPacket(AVPacket* packet) {
  av_packet_unref(packet);
  for (;;) {
    const int rc = av_read_frame(format(), packet);
    // A read through a reader that failed ends the container early: its error, not the end.
    if (rc == AVERROR_EOF) return ranged_.error.ok() ? Result<bool>(false) : ranged_.error;
    if (rc < 0) return ReadError("reading the container failed", rc);
    if (packet->stream_index == stream_) return true;
    av_packet_unref(packet);
  }
}

Status Input::SendPacket(const AVPacket* packet) {
  const int sent = avcodec_send_packet(codec(), packet);
  if (sent < 0 && sent != AVERROR_INVALIDDATA && sent != AVERROR_EOF) {
    return DecodeError("decoding failed", sent);
  }
  return FramesRefused();
}

Result<bool> Input::ReceiveFrame(AVFrame* frame) {
  av_frame_unref(frame);
  const int got = avcodec_receive_frame(codec(), frame);
  if (got == 0) return true;
  if (got == AVERROR(EAGAIN) || got == AVERROR_EOF) {
    HR_RETURN_IF_ERROR(FramesRefused());
    return false;
  }
  return DecodeError("decoding failed", got);
}

}  // namespace headrace::av
