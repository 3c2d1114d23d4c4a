#include "headrace/io/ranged_reader.h"

#include <algorithm>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <vector>

namespace headrace {
namespace {

class RangedReader final : public MediaReader {
 public:
  RangedReader(Storage& storage, std::string uri, const RangedReaderOptions& options)
      : storage_(storage), uri_(std::move(uri)), options_(options),
        state_(std::make_shared<State>()) {}

  // Asks the size and the head together; waits for the size.
  Status Open() {
    std::promise<Result<int64_t>> size;
    auto got = size.get_future();
    storage_.SizeAsync(
        uri_, [&size](Result<int64_t> r) { size.set_value(std::move(r)); }, Wanted());
    std::shared_ptr<Piece> head;
    {
      std::lock_guard lock(state_->mu);
      size_ = -1;  // unknown: the head is read whatever the object's length
      head = AddLocked(0, options_.head_bytes, /*unplanned=*/false)->second;
    }
    Start(0, head);
    HR_ASSIGN_OR_RETURN(size_, got.get());
    return Status::Ok();
  }

  int64_t size() const override { return size_; }

  void Prefetch(std::span<const Range> ranges) override {
    std::vector<std::pair<int64_t, std::shared_ptr<Piece>>> added;
    {
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
    }
    for (const auto& [offset, piece] : added) Start(offset, piece);
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

  // Notes a range read of [offset, offset + length); Start issues it, with the lock not
  // held: a storage may complete a read inline (one that fails before it starts).
  Iter AddLocked(int64_t offset, int64_t length, bool unplanned) {
    auto piece = std::make_shared<Piece>();
    piece->length = length;
    auto [it, inserted] = state_->ranges.emplace(offset, piece);
    ++state_->stats.requests;
    state_->stats.bytes += length;
    if (unplanned) ++state_->stats.unplanned;
    return it;
  }

  void Start(int64_t offset, const std::shared_ptr<Piece>& piece) {
    std::weak_ptr<State> weak = state_;
    storage_.ReadRangeAsyncGated(
        uri_, offset, piece->length,
        [weak, piece](Result<Buffer> bytes) {
          const std::shared_ptr<State> state = weak.lock();
          if (state == nullptr) return;  // the reader is gone: nobody waits
          {
            std::lock_guard lock(state->mu);
            piece->bytes = std::move(bytes);
            piece->done = true;
          }
          state->cv.notify_all();
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

Result<std::shared_ptr<MediaReader>> OpenRangedReader(Storage& storage, std::string uri,
                                                      const RangedReaderOptions& options) {
  auto reader = std::make_shared<RangedReader>(storage, std::move(uri), options);
  HR_RETURN_IF_ERROR(reader->Open());
  return std::shared_ptr<MediaReader>(std::move(reader));
}

}  // namespace headrace
