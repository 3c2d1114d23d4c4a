#include "headrace/io/ranged_reader.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "headrace/core/iso_bmff.h"

namespace headrace {
namespace {

// ISO BMFF (MP4, MOV) written without "faststart" has its index (moov) after the media
// data (mdat), at the end: the top-level box headers in the head say where, and the
// reader asks for it with the size rather than one round trip later, when the demuxer
// would. Here rather than in the op: the reader opens before any op runs. Reads only box
// sizes and types; nullopt when the head shows no such layout (faststart: moov is in
// the head; not an MP4; damaged: the demuxer judges).
std::optional<MediaReader::Range> IndexAfterMediaData(const Buffer& head, int64_t size) {
  const uint8_t* d = head.data();
  const int64_t n = static_cast<int64_t>(head.size());
  if (n < 8 || std::memcmp(d + 4, "ftyp", 4) != 0) return std::nullopt;
  int64_t at = 0;
  while (at + 16 <= n) {
    const std::optional<BoxHeader> box =
        ParseBoxHeader(d + at, static_cast<uint64_t>(n - at), static_cast<uint64_t>(size - at));
    if (!box.has_value() || box->is("moov")) return std::nullopt;  // damaged; in the head
    if (box->is("mdat")) {
      const int64_t after = at + static_cast<int64_t>(box->size);
      if (after >= size) return std::nullopt;
      // FFmpeg's MP4 reader also reads the bytes just before the index when it opens
      // (the last packets': a few hundred bytes on x264 clips): 16 KiB come with it. At
      // most 1 MiB of what follows (the index of an hour of video; a longer one is read
      // as the demuxer asks): what comes after the media data is the file's to say, and
      // a hostile one would otherwise have the reader hold any amount at open.
      const int64_t from = std::max(at, after - (int64_t{16} << 10));
      return MediaReader::Range{from, std::min(size - from, (after - from) + (int64_t{1} << 20))};
    }
    at += static_cast<int64_t>(box->size);
  }
  return std::nullopt;
}

class RangedReader final : public MediaReader,
                           public std::enable_shared_from_this<RangedReader> {
 public:
  RangedReader(Storage& storage, std::string uri, const RangedReaderOptions& options)
      : storage_(storage), uri_(std::move(uri)), options_(options),
        state_(std::make_shared<State>()) {}

  // Asks the size and the head together, then what the head shows the container's
  // index to be after (IndexAfterMediaData); `done` once they are all in: with the
  // reader, or the size's error. A read that failed fails the Read that needs it.
  void OpenAsync(ReaderCallback done) {
    struct Opening {
      std::shared_ptr<RangedReader> reader;
      ReaderCallback done;
      std::atomic<int> first{2};  // the size and the head, before the follow-up
      std::atomic<int> left{2};   // every read still out (the follow-up's added)
      Status status;              // the size's error (written before its arrival)
      void Arrive() {
        if (left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        if (status.ok()) {
          done(std::shared_ptr<MediaReader>(std::move(reader)));
        } else {
          done(std::move(status));
        }
      }
      // The size or the head is in: once both are, the reads the head calls for.
      void Arrived(const std::shared_ptr<Opening>& self) {
        if (first.fetch_sub(1, std::memory_order_acq_rel) == 1 && status.ok()) {
          for (auto& [offset, piece] : reader->FollowHead()) {
            left.fetch_add(1, std::memory_order_relaxed);
            reader->Start(offset, piece, [self] { self->Arrive(); });
          }
        }
        Arrive();
      }
    };
    auto opening = std::make_shared<Opening>();
    opening->reader = shared_from_this();
    opening->done = std::move(done);
    std::shared_ptr<Piece> head;
    {
      std::lock_guard lock(state_->mu);
      size_ = -1;  // unknown: the head is read whatever the object's length
      head = AddLocked(0, options_.head_bytes, /*unplanned=*/false)->second;
    }
    storage_.SizeAsync(
        uri_,
        [this, opening](Result<int64_t> size) {
          if (!size.ok()) {
            opening->status = size.status();
          } else {
            std::lock_guard lock(state_->mu);
            size_ = *size;
          }
          opening->Arrived(opening);
        },
        Wanted());
    Start(0, head, [opening] { opening->Arrived(opening); });
  }

  int64_t size() const override { return size_; }

  void Prefetch(std::span<const Range> ranges) override {
    for (const auto& [offset, piece] : AddRanges(ranges)) Start(offset, piece);
  }

  Result<Buffer> Read(int64_t offset, int64_t length) override {
    if (offset >= size_ || length <= 0) return Buffer();
    std::shared_ptr<Piece> piece;
    int64_t start = 0;
    bool added = false;
    {
      std::lock_guard lock(state_->mu);
      auto held = HolderLocked(offset);
      if (held == state_->ranges.end()) {
        const int64_t until =
            std::min({size_, NextStartLocked(offset),
                      offset + std::max(length, options_.read_ahead)});
        held = AddLocked(offset, until - offset, /*unplanned=*/true);
        added = true;
      }
      start = held->first;
      piece = held->second;
    }
    if (added) Start(start, piece);
    {
      // A stopped run's reads end on their own (their gate gives them up: kCancelled).
      std::unique_lock lock(state_->mu);
      state_->cv.wait(lock, [&] { return piece->done; });
    }
    if (!piece->bytes.ok()) return piece->bytes.status();
    const Buffer& bytes = *piece->bytes;
    const int64_t skip = offset - start;
    if (skip >= static_cast<int64_t>(bytes.size())) {
      // The range came back shorter than asked (the object shrank): nothing past it.
      return Buffer();
    }
    const int64_t n = std::min<int64_t>(length, static_cast<int64_t>(bytes.size()) - skip);
    return bytes.Slice(static_cast<size_t>(skip), static_cast<size_t>(n));
  }

  Stats stats() const override {
    std::lock_guard lock(state_->mu);
    return state_->stats;
  }

 private:
  struct Piece {
    int64_t length = 0;
    bool done = false;
    Result<Buffer> bytes = Buffer();
  };
  // Shared with the storage's callbacks, which may complete after the reader is gone.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::map<int64_t, std::shared_ptr<Piece>> ranges;  // by offset; never overlapping
    Stats stats;
  };
  using Iter = std::map<int64_t, std::shared_ptr<Piece>>::iterator;

  // The range read that holds byte `at`, or end().
  Iter HolderLocked(int64_t at) {
    auto it = state_->ranges.upper_bound(at);
    if (it == state_->ranges.begin()) return state_->ranges.end();
    --it;
    return at < it->first + it->second->length ? it : state_->ranges.end();
  }
  // Where the first range read after `at` starts (the object's end if none).
  int64_t NextStartLocked(int64_t at) {
    auto it = state_->ranges.upper_bound(at);
    const int64_t end = size_ < 0 ? INT64_MAX : size_;
    return it == state_->ranges.end() ? end : std::min(end, it->first);
  }

  // The size and the head are in: the ranges the head says the container's index lies in
  // past it, added.
  std::vector<std::pair<int64_t, std::shared_ptr<Piece>>> FollowHead() {
    std::optional<Range> index;
    {
      std::lock_guard lock(state_->mu);
      const auto head = state_->ranges.find(0);
      if (head != state_->ranges.end() && head->second->bytes.ok()) {
        index = IndexAfterMediaData(*head->second->bytes, size_);
      }
    }
    if (!index.has_value()) return {};
    const Range ranges[] = {*index};
    return AddRanges(ranges);
  }

  // Notes range reads of what `ranges` hold that no read holds or reads (clipped to the
  // object), to be started.
  std::vector<std::pair<int64_t, std::shared_ptr<Piece>>> AddRanges(std::span<const Range> ranges) {
    std::vector<std::pair<int64_t, std::shared_ptr<Piece>>> added;
    std::lock_guard lock(state_->mu);
    for (const Range& r : ranges) {
      int64_t at = std::max<int64_t>(0, r.offset);
      const int64_t end = std::min(size_, r.offset + r.length);
      while (at < end) {
        auto held = HolderLocked(at);
        if (held != state_->ranges.end()) {  // covered up to where it ends
          at = held->first + held->second->length;
          continue;
        }
        const int64_t until = std::min(end, NextStartLocked(at));
        added.emplace_back(at, AddLocked(at, until - at, /*unplanned=*/false)->second);
        at = until;
      }
    }
    return added;
  }

  // Notes a range read of [offset, offset + length); Start issues it, with the lock not
  // held: a storage may complete a read inline (one that fails before it starts).
  Iter AddLocked(int64_t offset, int64_t length, bool unplanned) {
    auto piece = std::make_shared<Piece>();
    piece->length = length;
    auto [it, inserted] = state_->ranges.emplace(offset, piece);
    ++state_->stats.requests;
    if (unplanned) ++state_->stats.unplanned;
    return it;
  }

  // `then`, if set, runs once the read is in (after its waiters are woken).
  void Start(int64_t offset, const std::shared_ptr<Piece>& piece,
             std::function<void()> then = nullptr) {
    std::weak_ptr<State> weak = state_;
    storage_.ReadRangeAsyncGated(
        uri_, offset, piece->length,
        [weak, piece, then = std::move(then)](Result<Buffer> bytes) {
          if (const std::shared_ptr<State> state = weak.lock()) {
            {
              std::lock_guard lock(state->mu);
              if (bytes.ok()) state->stats.bytes += static_cast<int64_t>(bytes->size());
              piece->bytes = std::move(bytes);
              piece->done = true;
            }
            state->cv.notify_all();
          }  // else the reader is gone: nobody waits
          if (then) then();
        },
        Wanted());
  }

  // The reads' gate: no size refused (they are outside the I/O budget), none wanted once
  // the run stops.
  ReadGate Wanted() const {
    return [stop = options_.stop](int64_t bytes) {
      return bytes != kReadStillWanted || !stop.stop_requested();
    };
  }

  Storage& storage_;
  const std::string uri_;
  const RangedReaderOptions options_;
  std::shared_ptr<State> state_;
  int64_t size_ = -1;
};

}  // namespace

void OpenRangedReaderAsync(Storage& storage, std::string uri, const RangedReaderOptions& options,
                           ReaderCallback done) {
  std::make_shared<RangedReader>(storage, std::move(uri), options)->OpenAsync(std::move(done));
}

Result<std::shared_ptr<MediaReader>> OpenRangedReader(Storage& storage, std::string uri,
                                                      const RangedReaderOptions& options) {
  std::promise<Result<std::shared_ptr<MediaReader>>> opened;
  auto got = opened.get_future();
  OpenRangedReaderAsync(storage, std::move(uri), options,
                        [&opened](Result<std::shared_ptr<MediaReader>> r) {
                          opened.set_value(std::move(r));
                        });
  return got.get();
}

}  // namespace headrace
