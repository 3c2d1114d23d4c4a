// RegionAllocator: plain memory for blocks whose sizes vary widely (ragged batches),
// kept mapped between uses and grown in place, so that memory once touched is not
// faulted in and zeroed by the kernel again.
//
// Why not PoolingAllocator's size classes: a Qwen-VL batch's patches are 50 to 500 MB as
// its samples' images come, and a sample's rows grow image by image. A pool of classes
// serves a request only from a cached block at least as large, so about every other
// batch missed and took fresh pages; with the sample rows' geometric growth (a new block
// and a copy per growth) the kernel's page zeroing was 38% of the CPU time of
// bench/vlm_processor.py's pipeline (3.2 M minor faults for 384 samples). Here:
//
// - A request of at least kMinRegionBytes takes a cached region whole: the smallest that
//   holds it (Fit::kBest, for buffers of one size) or the largest (Fit::kLargest, for
//   buffers that grow: they grow into its pages for free); one too small is grown to it
//   with mremap (its pages move with it, not copied: only the added pages are new); with
//   none cached, a fresh anonymous mapping. (Splitting a large region for a small
//   request, or shrinking it, left the growing requests to fault their pages in again:
//   measured slower.)
// - AllocateFinal (a block whose size is known before it is written: a sample's rows
//   after the size pass, RaggedRows::Reserve) takes the smallest that holds it whatever
//   the Fit: a packer keeps samples' rows for a window of samples, and with the largest
//   each held about twice its rows (1.93 GB lent in a 3-epoch VLM run), so the pool kept
//   mapping fresh regions.
// - Reallocate grows a region the same way: a buffer that grows (a sample's rows, one
//   image after another) keeps its contents without a copy (Buffer::Grow).
// - Settle: a block whose contents are final (a joined batch tensor) gives back the
//   pages past every byte ever written in its region, so that the cap below counts
//   memory that exists rather than room a batch was given and did not use.
// - Freed regions are kept, at most `max_cached_bytes` of them (the oldest unmapped
//   first); smaller requests go to the process heap. A kept region is not inherited by
//   a child made by fork() (MADV_DONTFORK until it is lent again), so that a fork (a
//   DataLoader's workers) does not write-protect its pages and fault each on its next
//   write.
// - OnClose::kKeepForNext (the engine's and the packer's pools): when the allocator goes
//   (its Loader closed and its last buffer freed), its cached regions stay mapped for the
//   next such allocator of the process, which takes them when its own cache has none
//   (a Loader per epoch, or a validation loader every N steps, then starts on pages
//   already there: on this VM a fresh page costs ~3 us of kernel zeroing, and a VLM pass
//   of 128 samples faulted 290 K of them, ~30% of its CPU time). At most the largest
//   `max_cached_bytes` of those allocators is kept (the oldest unmapped first), so at
//   most one memory budget; ReleaseKeptRegions() unmaps them (headrace.release_memory()).
//
// Thread-safe. mmap, mremap and munmap run outside the lock.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "headrace/core/pooling_allocator.h"

namespace headrace {

class RegionAllocator final : public ReusingAllocator {
 public:
  // Smaller requests are the heap's (a mapping per block would cost a system call each).
  static constexpr size_t kMinRegionBytes = size_t{1} << 20;

  // Which cached region a request takes.
  enum class Fit {
    // The smallest that holds it (else the largest, grown): for buffers of one size (a
    // batch's tensors), leaving the large regions to the large requests.
    kBest,
    // The largest (grown if it must): for buffers that grow after their first request
    // (a sample's rows, image by image), which then grow into pages already there.
    kLargest,
  };

  // What the cached regions become when the allocator goes.
  enum class OnClose {
    kUnmap,
    // Kept for the next allocator of the process with kKeepForNext (see above).
    kKeepForNext,
  };

  explicit RegionAllocator(size_t max_cached_bytes, Fit fit = Fit::kBest,
                           OnClose on_close = OnClose::kUnmap);
  ~RegionAllocator() override;

  void* Allocate(size_t bytes, size_t alignment) override;
  // A block that will not grow: the smallest cached region that holds it, whatever `fit`
  // (a sample's rows sized before they are written: RaggedRows::Reserve).
  void* AllocateFinal(size_t bytes, size_t alignment) override;
  void Free(void* ptr, size_t bytes) override;
  void* Reallocate(void* ptr, size_t old_bytes, size_t new_bytes, size_t alignment) override;
  const char* name() const override { return "regions"; }

  size_t cached_bytes() const override;
  // A request served by a cached region (grown or not), and one that mapped fresh memory.
  int64_t hits() const override;
  int64_t misses() const override;
  // Regions grown by mremap (by Allocate from a smaller cached one, or by Reallocate).
  int64_t grown() const;

  // The block's first `used` bytes are all it holds from now on (a batch tensor once its
  // samples are joined: AssembleStage::Joined): the pages past every byte ever written
  // in its region (this use's `used` and any earlier use's, as far as known) are unmapped,
  // so that the cache's cap counts memory that exists. They were never touched: nothing
  // is faulted in again for them. Returns the block's size now (at least `used`).
  size_t Settle(void* ptr, size_t bytes, size_t used) override;

  // A mapped region, its size and how much of it from its start may have been written
  // (cached here, or kept for the next allocator).
  struct Cached {
    void* region;
    size_t size;
    size_t written;
  };

 private:
  // Allocate's work, the cached region picked by `fit`.
  void* Take(size_t bytes, size_t alignment, Fit fit);
  // The region's mapped size: at least the pages of the bytes asked for.
  static size_t PagesOf(size_t bytes);

  const size_t max_cached_bytes_;
  const Fit fit_;
  const OnClose on_close_;
  mutable std::mutex mu_;
  std::list<Cached> free_;                    // guarded by mu_: oldest first
  // A region lent out: its mapped size, the bytes from its start that may have been
  // written, and whether its user settled them (Settle) this time.
  struct Lent {
    size_t size;
    size_t written;
    bool settled = false;
  };
  std::unordered_map<void*, Lent> lent_;      // guarded by mu_
  size_t cached_bytes_ = 0;                   // guarded by mu_
  int64_t hits_ = 0;                          // guarded by mu_
  int64_t misses_ = 0;                        // guarded by mu_
  int64_t grown_ = 0;                         // guarded by mu_
};

// The pool for blocks whose sizes vary (ragged batches, a sample's rows): regions when
// `base` is the process heap, else (pinned memory, a consumer's allocator) `base`'s
// blocks in geometric size classes (PoolingAllocator).
std::shared_ptr<ReusingAllocator> MakeVaryingPool(
    Allocator* base, size_t max_cached_bytes,
    RegionAllocator::Fit fit = RegionAllocator::Fit::kBest,
    RegionAllocator::OnClose on_close = RegionAllocator::OnClose::kUnmap);

// The regions closed allocators (OnClose::kKeepForNext) keep for the next: unmaps them and
// returns their bytes. KeptRegionBytes(): their bytes now.
size_t ReleaseKeptRegions();
size_t KeptRegionBytes();
// The bytes the process's RegionAllocators have mapped now: lent out (batches and samples'
// rows in flight), cached and kept. Mapped, not all resident: a region's pages count in
// RSS once written. What RSS holds beyond malloc's heap is mostly these (the run report's
// memory.regions_mapped_bytes).
int64_t RegionBytesMapped();

}  // namespace headrace
