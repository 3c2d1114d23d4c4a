#include "headrace/io/block_cache.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "headrace/core/strings.h"

namespace headrace {
namespace {

struct BlockKey {
  std::string uri;
  int64_t index = 0;
  auto operator<=>(const BlockKey&) const = default;
};

// One member read: the blocks it needs, filled in as they arrive.
struct MemberRead {
  std::string uri;
  int64_t offset = 0;
  int64_t length = 0;
  int64_t first_block = 0;
  ReadCallback done;
  std::vector<Buffer> blocks;  // by block index - first_block
  std::vector<int64_t> starts;  // each block's first byte in the object
  std::vector<int64_t> ends;    // and its end, as laid out (the object may end sooner)
  int pending = 0;             // blocks not yet in; guarded by Impl::mu
  Status error;                // the first block that failed; guarded by Impl::mu
};

// What a block is doing.
enum class BlockState {
  kQueued,   // wanted, waiting until the cache's bytes allow its read
  kLoading,  // its read is in flight; its size is counted in held
  kReady,    // in memory, in the LRU list, evictable
};

struct Block {
  BlockState state = BlockState::kQueued;
  int64_t start = 0;
  int64_t size = 0;  // bytes it reserves: the block's size (cut at a known object end)
  Buffer bytes;      // kReady
  // Member reads it serves before it is dropped (a laid-out object's block: its sample's
  // members); -1: kept until evicted.
  int uses_left = -1;
  // Its waiters are being handed its bytes (OnBlock, outside the lock): not evicted, as
  // their samples' next members are about to use it. `serial` tells this block from a
  // later one of the same key.
  bool handing_out = false;
  uint64_t serial = 0;
  std::vector<std::shared_ptr<MemberRead>> waiters;
  std::list<BlockKey>::iterator lru;  // kReady only: in Impl::lru, or Impl::awaited
                                      // while uses_left > 0
};

struct BlockRead {
  BlockKey key;
  int64_t start = 0;
  int64_t size = 0;
};

}  // namespace

struct BlockCache::Impl {
  explicit Impl(BlockCacheOptions o) : options(o) {}

  const BlockCacheOptions options;
  std::mutex mu;
  std::map<BlockKey, Block> blocks;          // guarded by mu
  std::list<BlockKey> lru;                   // guarded by mu: ready blocks, oldest first
  // guarded by mu: ready blocks that still await uses (a sample's members being read),
  // oldest first: evicted only when nothing else can make room (below)
  std::list<BlockKey> awaited;
  std::list<BlockKey>& ListOf(const Block& b) { return b.uses_left > 0 ? awaited : lru; }
  std::deque<BlockKey> queue;                // guarded by mu: kQueued blocks, in order
  std::map<std::string, int64_t> sizes;      // guarded by mu: known object sizes
  // guarded by mu: objects laid out in blocks of their own (SetObjectBlocks): where each
  // block after the first starts, and the member reads each serves (block 0 first)
  struct Layout {
    std::vector<int64_t> starts;
    std::vector<int> uses;
  };
  std::map<std::string, Layout> layouts;
  int loading = 0;                           // guarded by mu
  uint64_t serials = 0;                      // guarded by mu: Block::serial
  bool stopping = false;                     // guarded by mu: the cache is being destroyed
  BlockCacheStats stats;                     // guarded by mu

  // Block `index` of `uri`: where it starts, where it ends as laid out, and how many
  // bytes its read asks for (cut at the object's end when its size is known; unknown, a
  // full block is asked for and the storage cuts it). A member's bytes past what its
  // block turned out to hold are a truncated object (CompleteMember).
  struct Extent {
    int64_t start = 0;
    int64_t end = 0;
    int64_t read_bytes = 0;
    int uses = -1;  // Block::uses_left
  };
  Extent BlockLocked(const std::string& uri, int64_t index) const {
    const auto size = sizes.find(uri);
    constexpr int64_t kNoEnd = std::numeric_limits<int64_t>::max();
    const int64_t known_end = size == sizes.end() ? kNoEnd : size->second;
    Extent e;
    if (const auto layout = layouts.find(uri); layout != layouts.end()) {
      const std::vector<int64_t>& starts = layout->second.starts;
      e.uses = layout->second.uses[static_cast<size_t>(index)];
      e.start = index == 0 ? 0 : starts[static_cast<size_t>(index - 1)];
      e.end = index < static_cast<int64_t>(starts.size()) ? starts[static_cast<size_t>(index)]
                                                          : kNoEnd;
    } else {
      e.start = index * options.block_bytes;
      e.end = e.start + options.block_bytes;
    }
    e.read_bytes = std::max<int64_t>(0, std::min(e.end, known_end) - e.start);
    return e;
  }
  // The block holding byte `offset` of `uri`.
  int64_t BlockIndexLocked(const std::string& uri, int64_t offset) const {
    if (const auto layout = layouts.find(uri); layout != layouts.end()) {
      const std::vector<int64_t>& starts = layout->second.starts;
      return std::upper_bound(starts.begin(), starts.end(), offset) - starts.begin();
    }
    return offset / options.block_bytes;
  }

  // `reads` member reads have taken a ready block's bytes: a block with a count of uses
  // is dropped after its last (its bytes live on in the members that hold them until
  // they are copied out, a moment later).
  void UsedLocked(std::map<BlockKey, Block>::iterator it, int reads = 1) {
    Block& b = it->second;
    if (b.uses_left < 0) return;
    std::list<BlockKey>& list = ListOf(b);
    b.uses_left -= reads;
    if (b.uses_left > 0) return;
    stats.bytes_held -= b.size;
    ++stats.drops;
    list.erase(b.lru);
    blocks.erase(it);
  }

  // Moves queued blocks to kLoading while their bytes fit (evicting least recently used
  // ready blocks), or alone when nothing is loading; returns the reads to issue. A block
  // that awaits uses is evicted only when nothing is loading, and with `evict_awaited`:
  // not by the completion of a block whose members have yet to be handed out (their
  // samples read their next members from the callback, and those uses drop blocks and
  // make the room), but by the next start after it, so that a block whose sample gave up
  // on it still goes.
  std::vector<BlockRead> StartQueuedLocked(bool evict_awaited = true) {
    std::vector<BlockRead> out;
    auto evict = [this](std::list<BlockKey>& from) {
      auto victim = blocks.find(from.front());
      stats.bytes_held -= victim->second.size;
      ++stats.evictions;
      from.pop_front();
      blocks.erase(victim);
    };
    while (!queue.empty()) {
      Block& b = blocks.at(queue.front());
      const auto over = [&] { return stats.bytes_held + b.size > options.capacity_bytes; };
      while (over() && !lru.empty()) evict(lru);
      while (over() && evict_awaited && loading == 0) {
        const auto victim = std::find_if(awaited.begin(), awaited.end(), [this](const BlockKey& k) {
          return !blocks.at(k).handing_out;
        });
        if (victim == awaited.end()) break;
        awaited.splice(awaited.begin(), awaited, victim);
        evict(awaited);
      }
      // Over, with something that will end (a read, a hand-out): its end starts this
      // one. Only a block larger than the whole cache is read alone past it.
      if (over() && (loading > 0 || !awaited.empty())) break;
      b.state = BlockState::kLoading;
      ++loading;
      ++stats.block_reads;
      stats.bytes_held += b.size;
      stats.peak_bytes = std::max(stats.peak_bytes, stats.bytes_held);
      out.push_back(BlockRead{queue.front(), b.start, b.size});
      queue.pop_front();
    }
    return out;
  }
};

namespace {

// Copies the member out of its blocks and completes it.
void CompleteMember(MemberRead& m) {
  if (!m.error.ok()) return m.done(std::move(m.error));
  Result<Buffer> out = Buffer::Allocate(static_cast<size_t>(m.length));
  if (!out.ok()) return m.done(out.status());
  const int64_t end = m.offset + m.length;
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    const int64_t block_start = m.starts[i];
    const Buffer& block = m.blocks[i];
    const int64_t from = std::max(m.offset, block_start);
    const int64_t to = std::min(end, m.ends[i]);
    if (block_start + static_cast<int64_t>(block.size()) < to) {
      // The object ended early: a shard truncated after its index was written.
      return m.done(Status::CorruptData(
          QuoteForMessage(m.uri) + ": bytes " + std::to_string(m.offset) + "-" +
          std::to_string(end - 1) + " run past the object's end at " +
          std::to_string(block_start + static_cast<int64_t>(block.size())) +
          " (truncated after its index was written?)"));
    }
    std::memcpy(out->mutable_data() + (from - m.offset), block.data() + (from - block_start),
                static_cast<size_t>(to - from));
  }
  m.done(std::move(out));
}

}  // namespace

namespace {

void IssueBlockReads(Storage* base, const std::shared_ptr<BlockCache::Impl>& impl,
                     std::vector<BlockRead> reads);

// A block's read completed: hand it to its waiters (or fail them), then start the queued
// blocks that now fit.
void OnBlock(Storage* base, const std::shared_ptr<BlockCache::Impl>& impl, const BlockKey& key,
             Result<Buffer> bytes) {
  std::vector<std::shared_ptr<MemberRead>> complete;
  std::vector<BlockRead> next;
  uint64_t serial = 0;
  {
    std::lock_guard lock(impl->mu);
    auto it = impl->blocks.find(key);
    Block& block = it->second;
    serial = block.serial;
    block.handing_out = bytes.ok();
    --impl->loading;
    std::vector<std::shared_ptr<MemberRead>> waiters = std::move(block.waiters);
    if (bytes.ok()) {
      impl->stats.bytes_held += static_cast<int64_t>(bytes->size()) - block.size;
      block.size = static_cast<int64_t>(bytes->size());
      block.bytes = *bytes;
      block.state = BlockState::kReady;
      std::list<BlockKey>& list = impl->ListOf(block);
      block.lru = list.insert(list.end(), key);
    } else {
      impl->stats.bytes_held -= block.size;
      impl->blocks.erase(it);
    }
    for (auto& m : waiters) {
      if (bytes.ok()) {
        m->blocks[key.index - m->first_block] = *bytes;
      } else if (m->error.ok()) {
        m->error = bytes.status();
      }
      if (--m->pending == 0) complete.push_back(std::move(m));
    }
    for (auto& m : complete) impl->stats.bytes_copied += m->error.ok() ? m->length : 0;
    // Each waiter has the block's bytes: one use each.
    if (bytes.ok()) impl->UsedLocked(it, static_cast<int>(waiters.size()));
    next = impl->StartQueuedLocked(/*evict_awaited=*/false);
  }
  IssueBlockReads(base, impl, std::move(next));
  // The members first: their samples read their next members now, from the block just in.
  for (auto& m : complete) CompleteMember(*m);
  {
    std::lock_guard lock(impl->mu);
    if (auto it = impl->blocks.find(key); it != impl->blocks.end() && it->second.serial == serial) {
      it->second.handing_out = false;
    }
    next = impl->StartQueuedLocked(/*evict_awaited=*/true);
  }
  IssueBlockReads(base, impl, std::move(next));
}

void IssueBlockReads(Storage* base, const std::shared_ptr<BlockCache::Impl>& impl,
                     std::vector<BlockRead> reads) {
  for (BlockRead& read : reads) {
    bool stopping = false;
    {
      std::lock_guard lock(impl->mu);
      stopping = impl->stopping;
    }
    if (stopping) {
      OnBlock(base, impl, read.key, Status::Cancelled("storage shut down"));
      continue;
    }
    // A block is read at its full size even where the object's size is unknown; the
    // storage cuts a range that runs past the end short. No gate: the cache's capacity,
    // not the engine's I/O budget, bounds blocks.
    base->ReadRangeAsyncGated(
        read.key.uri, read.start, read.size,
        [base, impl, key = read.key](Result<Buffer> bytes) {
          OnBlock(base, impl, key, std::move(bytes));
        },
        nullptr);
  }
}

}  // namespace

BlockCache::BlockCache(std::shared_ptr<Storage> base, BlockCacheOptions options)
    : base_(std::move(base)) {
  options.block_bytes = std::max<int64_t>(options.block_bytes, 1);
  options.capacity_bytes = std::max<int64_t>(options.capacity_bytes, 0);
  impl_ = std::make_shared<Impl>(options);
  impl_->stats.capacity_bytes = options.capacity_bytes;
  impl_->stats.block_bytes = options.block_bytes;
}

BlockCache::~BlockCache() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  // Completes the reads in flight (kCancelled); the blocks queued behind them fail too.
  base_.reset();
}

void BlockCache::SetObjectSize(const std::string& uri, int64_t bytes) {
  std::lock_guard lock(impl_->mu);
  impl_->sizes[uri] = bytes;
}

void BlockCache::SetObjectBlocks(const std::string& uri, int64_t bytes,
                                 std::vector<std::pair<int64_t, int>> blocks) {
  // Sorted, a start at 0 or past the end merged into the block before it, equal starts
  // merged (their uses added): the blocks partition the object whatever the layout said,
  // so a member is copied from whichever blocks it spans.
  std::sort(blocks.begin(), blocks.end());
  Impl::Layout layout;
  layout.uses.push_back(0);  // block 0: [0, the first start)
  for (const auto& [start, uses] : blocks) {
    if (start > 0 && start < bytes && (layout.starts.empty() || start > layout.starts.back())) {
      layout.starts.push_back(start);
      layout.uses.push_back(std::max(uses, 1));
    } else {
      layout.uses.back() += std::max(uses, 1);
    }
  }
  for (int& uses : layout.uses) uses = std::max(uses, 1);  // block 0 may have had none
  std::lock_guard lock(impl_->mu);
  impl_->sizes[uri] = bytes;
  impl_->layouts[uri] = std::move(layout);
}

void BlockCache::ReadAsync(std::string uri, ReadCallback done) {
  base_->ReadAsync(std::move(uri), std::move(done));
}

void BlockCache::ReadAsyncGated(std::string uri, ReadCallback done, ReadGate gate) {
  base_->ReadAsyncGated(std::move(uri), std::move(done), std::move(gate));
}

void BlockCache::ReadRangeAsyncGated(std::string uri, int64_t offset, int64_t length,
                                     ReadCallback done, ReadGate gate) {
  if (length < 0 || offset < 0) {
    return base_->ReadRangeAsyncGated(std::move(uri), offset, length, std::move(done),
                                      std::move(gate));
  }
  if (gate && !gate(length)) {
    return done(Status::Cancelled("reading " + QuoteForMessage(uri) +
                                  ": its size was refused by the reader"));
  }
  if (length == 0) return done(Buffer());
  auto member = std::make_shared<MemberRead>();
  member->uri = uri;
  member->offset = offset;
  member->length = length;
  member->done = std::move(done);
  std::vector<BlockRead> reads;
  bool complete_now = false;
  {
    std::lock_guard lock(impl_->mu);
    member->first_block = impl_->BlockIndexLocked(uri, offset);
    const int64_t last_block = impl_->BlockIndexLocked(uri, offset + length - 1);
    const auto blocks = static_cast<size_t>(last_block - member->first_block + 1);
    member->blocks.resize(blocks);
    member->starts.resize(blocks);
    member->ends.resize(blocks);
    for (int64_t i = member->first_block; i <= last_block; ++i) {
      const Impl::Extent extent = impl_->BlockLocked(uri, i);
      member->starts[static_cast<size_t>(i - member->first_block)] = extent.start;
      member->ends[static_cast<size_t>(i - member->first_block)] = extent.end;
      BlockKey key{uri, i};
      auto it = impl_->blocks.find(key);
      if (it != impl_->blocks.end() && it->second.state == BlockState::kReady) {
        ++impl_->stats.block_hits;
        std::list<BlockKey>& list = impl_->ListOf(it->second);
        list.splice(list.end(), list, it->second.lru);
        member->blocks[i - member->first_block] = it->second.bytes;
        impl_->UsedLocked(it);
        continue;
      }
      if (it != impl_->blocks.end()) {
        ++impl_->stats.block_waits;
      } else {
        Block block;
        block.start = extent.start;
        block.size = extent.read_bytes;
        block.uses_left = extent.uses;
        block.serial = ++impl_->serials;
        it = impl_->blocks.emplace(key, std::move(block)).first;
        impl_->queue.push_back(std::move(key));
      }
      it->second.waiters.push_back(member);
      ++member->pending;
    }
    // Decided under the lock: once a waiter is registered, the block's callback (on
    // another thread) may complete the member at any time.
    complete_now = member->pending == 0;
    if (complete_now) impl_->stats.bytes_copied += length;
    reads = impl_->StartQueuedLocked();
  }
  IssueBlockReads(base_.get(), impl_, std::move(reads));
  if (complete_now) CompleteMember(*member);
}

BlockCacheStats BlockCache::CacheStats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

}  // namespace headrace
