// BlockCache: a Storage decorator that serves ranged reads (members of tar shards) from
// large aligned blocks of the object, each fetched once and shared by every member in it.
//
//   engine ── ReadRangeAsyncGated(shard, member offset, size) ──▶ BlockCache
//      gate(size) first (the engine's I/O budget sees the member), then
//      block i = [i × block_bytes, (i+1) × block_bytes) ∩ [0, object size):
//        ready ─▶ hit: the member is copied out at once
//        loading ─▶ the read waits on it (no second request)
//        absent ─▶ one ranged read of the whole block from the base storage, once the
//                  cache's bytes allow it (least recently used ready blocks are evicted)
//      a member that straddles blocks waits for each and is copied from all of them
//   ReadAsync / ReadAsyncGated (whole objects: manifests, indexes, loose files) pass
//   through untouched.
//
// Why blocks, and why a copy:
// - Requests: a shard member is ~100 KB; one GET each would cost what loose files cost.
//   A 16 MiB block serves ~160 such members with one request (≤ 0.01 requests/sample),
//   and aligned blocks need no coordination with the sample order: whichever member of a
//   block comes first fetches it.
// - Memory is exact: the cache holds at most `capacity_bytes` of blocks (loading ones
//   included), because a member is copied out of its block (one memcpy of the member,
//   ~1% of decoding it) instead of being a slice that would keep an evicted block alive
//   for as long as its sample runs. The engine's I/O budget counts the copies, the cache's
//   capacity the blocks: both are parts of memory.budget_bytes (pipeline/loader.cc).
// - Shuffled order over a window of W shards touches every block of the W shards
//   throughout the window, so a cache that holds the window reads each block once per
//   epoch; a smaller one re-reads evicted blocks (more requests, same bytes delivered).
// - A global order (every sample next to any other) would touch a 16 MiB block for each
//   ~100 KB member; such objects are laid out in blocks of one sample each instead
//   (SetObjectBlocks): one request a sample for all its members (an image and its
//   conversation are neighbours in the tar), and no byte of another sample.
//
// Contract: as Storage. Block reads run on the base storage's threads; members are copied
// and their callbacks run there (or inline on a hit, on the caller's thread). The
// destructor must run after every read has completed (the base storage, destroyed first
// by the owner, completes them with kCancelled).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "headrace/io/storage.h"

namespace headrace {

struct BlockCacheOptions {
  int64_t block_bytes = int64_t{16} << 20;
  // Bytes of blocks held at once, loading or ready; at least one block is always allowed.
  int64_t capacity_bytes = int64_t{256} << 20;
};

struct BlockCacheStats {
  int64_t block_reads = 0;   // blocks fetched from the base storage (its requests)
  int64_t block_hits = 0;    // member reads served by a ready block
  int64_t block_waits = 0;   // member reads that waited on a block being fetched
  int64_t evictions = 0;     // ready blocks dropped to make room
  int64_t drops = 0;         // blocks dropped after their last use (SetObjectBlocks)
  int64_t bytes_held = 0;    // blocks held now
  int64_t peak_bytes = 0;    // most blocks held at once
  int64_t bytes_copied = 0;  // member bytes copied out of blocks
  int64_t capacity_bytes = 0;
  int64_t block_bytes = 0;
};

class BlockCache final : public Storage {
 public:
  BlockCache(std::shared_ptr<Storage> base, BlockCacheOptions options);
  ~BlockCache() override;

  // Records an object's size (a shard index knows it), so that its last block is read at
  // its real size. Unknown objects get full-size blocks, cut short by the storage.
  void SetObjectSize(const std::string& uri, int64_t bytes);
  // Lays an object of `bytes` out in blocks of its own instead of aligned ones: a block
  // starts at 0 and at each of `blocks`' offsets and ends where the next starts (the last
  // at the object's end); each serves its count of member reads and is then dropped
  // (evicted sooner if the cache needs the room: a later member read fetches it again).
  // For a shard read in a global order (source.shuffle_scope: global): each block is
  // one sample's members, so that a sample costs one request whatever order the samples
  // come in, no byte of another sample is fetched with it, and the cache holds only the
  // samples being read.
  void SetObjectBlocks(const std::string& uri, int64_t bytes,
                       std::vector<std::pair<int64_t, int>> blocks);

  void ReadAsync(std::string uri, ReadCallback done) override;
  void ReadAsyncGated(std::string uri, ReadCallback done, ReadGate gate) override;
  // length < 0 (to the object's end) passes through to the base storage.
  void ReadRangeAsyncGated(std::string uri, int64_t offset, int64_t length, ReadCallback done,
                           ReadGate gate) override;
  void SizeAsync(std::string uri, SizeCallback done, ReadGate wanted) override {
    base_->SizeAsync(std::move(uri), std::move(done), std::move(wanted));
  }
  std::string_view name() const override { return base_->name(); }
  std::vector<StorageStats> Stats() const override { return base_->Stats(); }

  BlockCacheStats CacheStats() const;
  const std::shared_ptr<Storage>& base() const { return base_; }

  struct Impl;  // the cache's state, shared with its reads in flight

 private:
  std::shared_ptr<Storage> base_;
  std::shared_ptr<Impl> impl_;  // shared with in-flight block reads
};

}  // namespace headrace
