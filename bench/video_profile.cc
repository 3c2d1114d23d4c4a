// Where a video.decode sample's time goes (issue 31), measured with FFmpeg's own calls
// in the order the op makes them: open the container from memory, for each of T times
// spread over the clip restart at the indexed keyframe that shows by it, decode forward
// (B-frames that show only before the time sent with AVDISCARD_NONREF, as the op does),
// and scale the frame shown at the time to WxH planar RGB with libswscale; with `-k`,
// as `seek: keyframe`: the keyframe nearest each time, decoded alone.
//
// Each packet's decode time (send + receive, one decoder thread: the work happens in the
// call) is put down to its frame: "shown" (a frame taken), "reference" (decoded only
// because a later frame needs it: from the keyframe to the frame shown), "lookahead" (the
// frames after the one shown, decoded to learn that it is the last starting at or before
// the time). Not built by CMake (a measurement, not a tool):
//
//   g++ -O2 -std=c++20 bench/video_profile.cc -o build/video_profile \
//     $(pkg-config --cflags --libs libavformat libavcodec libswscale libavutil)
//   build/video_profile [-k] [-t T] [-s SIDE] [-r ROUNDS] clip.mp4...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Totals {
  double open = 0, seek = 0, demux = 0, shown = 0, reference = 0, lookahead = 0, scale = 0;
  long packets = 0, decoded = 0, taken = 0, skipped = 0;
};

struct Memory {
  const std::vector<uint8_t>* data;
  size_t pos = 0;
};

int Read(void* opaque, uint8_t* out, int want) {
  auto* m = static_cast<Memory*>(opaque);
  const size_t n = std::min(static_cast<size_t>(want), m->data->size() - m->pos);
  if (n == 0) return AVERROR_EOF;
  std::memcpy(out, m->data->data() + m->pos, n);
  m->pos += n;
  return static_cast<int>(n);
}

int64_t Seek(void* opaque, int64_t offset, int whence) {
  auto* m = static_cast<Memory*>(opaque);
  if (whence & AVSEEK_SIZE) return static_cast<int64_t>(m->data->size());
  const int64_t base = (whence & 3) == SEEK_CUR ? static_cast<int64_t>(m->pos)
                       : (whence & 3) == SEEK_END ? static_cast<int64_t>(m->data->size())
                                                  : 0;
  m->pos = static_cast<size_t>(base + offset);
  return static_cast<int64_t>(m->pos);
}

void Sample(const std::vector<uint8_t>& bytes, int frames, int side, bool keyframe_mode,
            Totals& tot) {
  auto t0 = Clock::now();
  Memory mem{&bytes};
  auto* buffer = static_cast<uint8_t*>(av_malloc(1 << 16));
  AVIOContext* io = avio_alloc_context(buffer, 1 << 16, 0, &mem, Read, nullptr, Seek);
  AVFormatContext* fmt = avformat_alloc_context();
  fmt->pb = io;
  if (avformat_open_input(&fmt, nullptr, nullptr, nullptr) < 0) std::exit(1);
  const AVCodec* dec = nullptr;
  const int si = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &dec, 0);
  AVStream* st = fmt->streams[si];
  AVCodecContext* cc = avcodec_alloc_context3(dec);
  avcodec_parameters_to_context(cc, st->codecpar);
  cc->thread_count = 1;
  cc->pkt_timebase = st->time_base;
  avcodec_open2(cc, dec, nullptr);
  tot.open += Since(t0);

  const double tb = av_q2d(st->time_base);
  const double duration = st->duration * tb;
  const double frame_s = av_q2d(av_inv_q(st->avg_frame_rate));
  const double reorder = (std::max(cc->has_b_frames, st->codecpar->video_delay) + 1) * frame_s;
  const int64_t start = st->start_time == AV_NOPTS_VALUE ? 0 : st->start_time;
  std::vector<int64_t> key_dts;  // the index's keyframes (decode times)
  for (int i = 0; i < avformat_index_get_entries_count(st); ++i) {
    const AVIndexEntry* e = avformat_index_get_entry(st, i);
    if (e->flags & AVINDEX_KEYFRAME) key_dts.push_back(e->timestamp);
  }
  std::vector<uint8_t> out(3 * side * side);
  SwsContext* sws = nullptr;
  AVPacket* pkt = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  AVFrame* prev = av_frame_alloc();
  const auto scale = [&](AVFrame* f) {
    auto t = Clock::now();
    sws = sws_getCachedContext(sws, f->width, f->height, static_cast<AVPixelFormat>(f->format),
                               side, side, AV_PIX_FMT_GBRP, SWS_BILINEAR, nullptr, nullptr,
                               nullptr);
    uint8_t* planes[4] = {out.data() + side * side, out.data() + 2 * side * side, out.data()};
    int strides[4] = {side, side, side};
    sws_scale(sws, f->data, f->linesize, 0, f->height, planes, strides);
    tot.scale += Since(t);
    ++tot.taken;
  };
  // Decoding `pkt` (null: drain) and collecting the frames it gives, timed as `bucket`
  // once we know which frame the packet was: here the packet's own pts decides.
  std::map<int64_t, double> decode_time;  // pts -> seconds (per restart)
  const auto send = [&](AVPacket* p) {
    auto t = Clock::now();
    avcodec_send_packet(cc, p);
    decode_time[p ? p->pts : INT64_MAX] += Since(t);
  };
  const auto receive = [&](AVFrame* f) {
    auto t = Clock::now();
    const int rc = avcodec_receive_frame(cc, f);
    // The work of a receive is the decode of the packet sent last: charge it there.
    if (!decode_time.empty()) std::prev(decode_time.end())->second += Since(t);
    if (rc == 0) ++tot.decoded;
    return rc;
  };
  // Restarts at the keyframe with decode time `dts`: seek, drop packets before it.
  const auto restart = [&](int64_t dts) {
    auto t = Clock::now();
    av_seek_frame(fmt, si, dts, AVSEEK_FLAG_BACKWARD);
    avcodec_flush_buffers(cc);
    tot.seek += Since(t);
    for (;;) {
      t = Clock::now();
      const int rc = av_read_frame(fmt, pkt);
      tot.demux += Since(t);
      if (rc < 0) return false;
      if (pkt->stream_index == si && (pkt->flags & AV_PKT_FLAG_KEY) &&
          std::max(pkt->dts, pkt->pts) >= dts) {
        return true;  // pkt holds the keyframe
      }
      av_packet_unref(pkt);
    }
  };
  const auto charge = [&](int64_t shown_pts) {
    for (auto& [pts, s] : decode_time) {
      if (pts == shown_pts) tot.shown += s;
      else if (pts < shown_pts) tot.reference += s;
      else tot.lookahead += s;
    }
    decode_time.clear();
  };

  for (int i = 0; i < frames; ++i) {
    const double want = (i + 0.5) * duration / frames;
    if (keyframe_mode) {
      size_t k = 0;  // nearest by when it shows (decode time less the first's)
      for (size_t j = 1; j < key_dts.size(); ++j) {
        if (std::abs((key_dts[j] - key_dts[0]) * tb - want) <
            std::abs((key_dts[k] - key_dts[0]) * tb - want)) {
          k = j;
        }
      }
      if (!restart(key_dts[k])) break;
      ++tot.packets;
      send(pkt);
      av_packet_unref(pkt);
      send(nullptr);
      receive(frame);
      charge(frame->pts);
      scale(frame);
      continue;
    }
    int64_t key = key_dts[0];
    for (int64_t d : key_dts) {
      if ((d - start) * tb <= want - reorder) key = d;
    }
    if (!restart(key)) break;
    std::vector<int64_t> sent;
    bool have_prev = false;
    const int64_t want_ts = start + static_cast<int64_t>(want / tb);
    for (bool first = true;; first = false) {
      bool eof = false;
      if (!first) {
        auto t = Clock::now();
        const int rc = av_read_frame(fmt, pkt);
        tot.demux += Since(t);
        if (rc < 0) {
          eof = true;
        } else if (pkt->stream_index != si) {
          av_packet_unref(pkt);
          continue;
        }
      }
      if (eof) {
        send(nullptr);
      } else {
        bool unshown = false;
        for (int64_t s : sent) unshown |= s > pkt->pts && s <= want_ts && pkt->pts < want_ts;
        cc->skip_frame = unshown ? AVDISCARD_NONREF : AVDISCARD_DEFAULT;
        tot.skipped += unshown;
        sent.push_back(pkt->pts);
        ++tot.packets;
        send(pkt);
        av_packet_unref(pkt);
      }
      bool done = false;
      while (receive(frame) == 0) {
        const double t = (frame->best_effort_timestamp - start) * tb - 1e-6;
        if (want < t) {  // the frame before this one shows at `want`
          charge(have_prev ? prev->pts : frame->pts);
          scale(have_prev ? prev : frame);
          done = true;
          break;
        }
        av_frame_unref(prev);
        av_frame_move_ref(prev, frame);
        have_prev = true;
      }
      if (done) break;
      if (eof) {  // past the last frame: it stays on screen
        if (have_prev) {
          charge(prev->pts);
          scale(prev);
        }
        break;
      }
    }
  }
  sws_freeContext(sws);
  av_frame_free(&frame);
  av_frame_free(&prev);
  av_packet_free(&pkt);
  avcodec_free_context(&cc);
  avformat_close_input(&fmt);
  av_freep(&io->buffer);
  avio_context_free(&io);
}

}  // namespace

int main(int argc, char** argv) {
  int frames = 8, side = 224, rounds = 3;
  bool keyframe_mode = false;
  std::vector<std::vector<uint8_t>> clips;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-k") keyframe_mode = true;
    else if (a == "-t") frames = std::atoi(argv[++i]);
    else if (a == "-s") side = std::atoi(argv[++i]);
    else if (a == "-r") rounds = std::atoi(argv[++i]);
    else {
      std::ifstream f(a, std::ios::binary);
      clips.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
  }
  av_log_set_level(AV_LOG_QUIET);
  Totals best;
  double best_total = 1e30;
  for (int r = 0; r < rounds; ++r) {
    Totals tot;
    const auto t = Clock::now();
    for (const auto& clip : clips) Sample(clip, frames, side, keyframe_mode, tot);
    const double total = Since(t);
    if (total < best_total) {
      best_total = total;
      best = tot;
    }
  }
  const double n = static_cast<double>(clips.size()) / 1e3;  // ms per sample
  const double accounted = best.open + best.seek + best.demux + best.shown + best.reference +
                           best.lookahead + best.scale;
  std::printf("samples %zu, best of %d rounds, ms per sample (one thread)\n", clips.size(), rounds);
  std::printf("  open (container, decoder)  %7.2f\n", best.open / n);
  std::printf("  seek                       %7.2f\n", best.seek / n);
  std::printf("  demux (read packets)       %7.2f\n", best.demux / n);
  std::printf("  decode: frames shown       %7.2f\n", best.shown / n);
  std::printf("  decode: references only    %7.2f\n", best.reference / n);
  std::printf("  decode: lookahead          %7.2f\n", best.lookahead / n);
  std::printf("  swscale (to %dx%d GBRP)    %7.2f\n", side, side, best.scale / n);
  std::printf("  other (loop, allocation)   %7.2f\n", (best_total - accounted) / n);
  std::printf("  total                      %7.2f\n", best_total / n);
  std::printf("  packets sent %.1f (%.1f with NONREF), frames decoded %.1f, taken %.1f: "
              "%.2f decoded per taken\n",
              best.packets / (n * 1e3), best.skipped / (n * 1e3), best.decoded / (n * 1e3),
              best.taken / (n * 1e3), static_cast<double>(best.decoded) / best.taken);
  return 0;
}
