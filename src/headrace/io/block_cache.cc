#include "headrace/io/block_cache.h"

#include <algorithm>
#include <cstring>
#include <deque>
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
  std::vector<std::shared_ptr<MemberRead>> waiters;
  std::list<BlockKey>::iterator lru;  // kReady only
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
  std::deque<BlockKey> queue;                // guarded by mu: kQueued blocks, in order
  std::map<std::string, int64_t> sizes;      // guarded by mu: known object sizes
  int loading = 0;                           // guarded by mu
  bool stopping = false;                     // guarded by mu: the cache is being destroyed
  BlockCacheStats stats;                     // guarded by mu

  int64_t BlockSizeLocked(const std::string& uri, int64_t index) const {
    const int64_t start = index * options.block_bytes;
    const auto it = sizes.find(uri);
    if (it == sizes.end()) return options.block_bytes;
    return std::clamp<int64_t>(it->second - start, 0, options.block_bytes);
  }

  // Moves queued blocks to kLoading while their bytes fit (evicting least recently used
  // ready blocks), or alone when nothing is loading; returns the reads to issue.
  std::vector<BlockRead> StartQueuedLocked() {
    std::vector<BlockRead> out;
    while (!queue.empty()) {
      Block& b = blocks.at(queue.front());
      while (stats.bytes_held + b.size > options.capacity_bytes && !lru.empty()) {
        auto victim = blocks.find(lru.front());
        stats.bytes_held -= victim->second.size;
        ++stats.evictions;
        lru.pop_front();
        blocks.erase(victim);
      }
      if (stats.bytes_held + b.size > options.capacity_bytes && loading > 0) break;
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
void CompleteMember(MemberRead& m, int64_t block_bytes) {
  if (!m.error.ok()) return m.done(std::move(m.error));
  Result<Buffer> out = Buffer::Allocate(static_cast<size_t>(m.length));
  if (!out.ok()) return m.done(out.status());
  const int64_t end = m.offset + m.length;
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    const int64_t block_start = (m.first_block + static_cast<int64_t>(i)) * block_bytes;
    const Buffer& block = m.blocks[i];
    const int64_t from = std::max(m.offset, block_start);
    const int64_t to = std::min(end, block_start + block_bytes);
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
  {
    std::lock_guard lock(impl->mu);
    auto it = impl->blocks.find(key);
    Block& block = it->second;
    --impl->loading;
    std::vector<std::shared_ptr<MemberRead>> waiters = std::move(block.waiters);
    if (bytes.ok()) {
      impl->stats.bytes_held += static_cast<int64_t>(bytes->size()) - block.size;
      block.size = static_cast<int64_t>(bytes->size());
      block.bytes = *bytes;
      block.state = BlockState::kReady;
      block.lru = impl->lru.insert(impl->lru.end(), key);
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
    next = impl->StartQueuedLocked();
  }
  IssueBlockReads(base, impl, std::move(next));
  for (auto& m : complete) CompleteMember(*m, impl->options.block_bytes);
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
  const int64_t block_bytes = impl_->options.block_bytes;
  auto member = std::make_shared<MemberRead>();
  member->uri = uri;
  member->offset = offset;
  member->length = length;
  member->first_block = offset / block_bytes;
  const int64_t last_block = (offset + length - 1) / block_bytes;
  member->blocks.resize(static_cast<size_t>(last_block - member->first_block + 1));
  member->done = std::move(done);
  std::vector<BlockRead> reads;
  bool complete_now = false;
  {
    std::lock_guard lock(impl_->mu);
    for (int64_t i = member->first_block; i <= last_block; ++i) {
      BlockKey key{uri, i};
      auto it = impl_->blocks.find(key);
      if (it != impl_->blocks.end() && it->second.state == BlockState::kReady) {
        ++impl_->stats.block_hits;
        impl_->lru.splice(impl_->lru.end(), impl_->lru, it->second.lru);
        member->blocks[i - member->first_block] = it->second.bytes;
        continue;
      }
      if (it != impl_->blocks.end()) {
        ++impl_->stats.block_waits;
      } else {
        Block block;
        block.start = i * block_bytes;
        block.size = impl_->BlockSizeLocked(uri, i);
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
  if (complete_now) CompleteMember(*member, block_bytes);
}

BlockCacheStats BlockCache::CacheStats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

}  // namespace headrace
