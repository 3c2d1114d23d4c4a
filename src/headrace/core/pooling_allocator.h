// PoolingAllocator: keeps freed blocks and hands them out again.
//
// Batch buffers are large (a batch of 32 f32 224x224 images is 19 MB) and allocated at
// the batch rate. Fresh memory costs a page fault and the kernel's zeroing on first
// touch, measured at ~0.18 ms per sample (5% of the whole image chain) when the
// normalize op writes its rows; glibc returns such blocks to the kernel on free, so the
// cost recurs every batch. A pool reuses them instead. Blocks are kept by size class
// (sizes rounded up to 4 KiB pages), at most `max_cached_bytes` in all; beyond that,
// frees go to the base allocator.
//
// Geometric size classes (kGeometric) serve an allocator whose calls are expensive, such
// as pinned memory (cudaHostAlloc, and cudaFreeHost, which synchronizes the device),
// and sizes that vary from batch to batch (ragged patches and tokens; in plain memory
// RegionAllocator serves those better, region_allocator.h): batches whose
// size varies a little share a few classes, four per doubling (at most 25% of a block
// unused), and a request none of its own class can serve takes a cached block of up to
// two classes larger (at most 50% over) rather than a fresh one.
//
// When a freed block does not fit under the cap, the blocks freed longest ago go back to
// the base allocator to make room for it (the newest sizes are the likeliest to be
// asked for next); a block larger than the cap itself is never kept.
//
// Thread-safe. Buffers keep the pool alive (Buffer::Allocate with a shared_ptr), so a
// pool may be dropped by its owner while batches it produced are still in use.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <vector>

#include "headrace/core/buffer.h"

namespace headrace {

// An allocator that keeps freed memory for later requests (PoolingAllocator,
// RegionAllocator): what it holds, and how often it served from it.
class ReusingAllocator : public Allocator {
 public:
  virtual size_t cached_bytes() const = 0;
  virtual int64_t hits() const = 0;
  virtual int64_t misses() const = 0;
};

class PoolingAllocator final : public ReusingAllocator {
 public:
  enum class SizeClasses { kPages, kGeometric };
  // `base` must outlive the pool.
  PoolingAllocator(Allocator* base, size_t max_cached_bytes,
                   SizeClasses classes = SizeClasses::kPages);
  ~PoolingAllocator() override;

  void* Allocate(size_t bytes, size_t alignment) override;
  void Free(void* ptr, size_t bytes) override;
  const char* name() const override { return "pool"; }

  size_t cached_bytes() const override;
  int64_t hits() const override;
  int64_t misses() const override;
  // The bytes a request of `bytes` takes from the base allocator.
  size_t SizeClass(size_t bytes) const;

 private:
  Allocator* const base_;
  const size_t max_cached_bytes_;
  const SizeClasses classes_;
  mutable std::mutex mu_;
  struct Cached {
    void* block;
    uint64_t freed;  // when it was freed: a sequence number
  };
  // Guarded by mu_: size class -> its blocks, oldest first (no empty entry).
  std::map<size_t, std::vector<Cached>> free_;
  // Guarded by mu_: the blocks handed out for a smaller class, and their own class.
  std::unordered_map<void*, size_t> lent_larger_;
  uint64_t frees_ = 0;                         // guarded by mu_
  size_t cached_bytes_ = 0;                    // guarded by mu_
  int64_t hits_ = 0;                           // guarded by mu_
  int64_t misses_ = 0;                         // guarded by mu_
};

}  // namespace headrace
