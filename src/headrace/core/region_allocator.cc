#include "headrace/core/region_allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

namespace headrace {

namespace {

// The bytes every RegionAllocator of the process has mapped (lent, cached or kept):
// RegionBytesMapped().
std::atomic<int64_t> g_mapped{0};

void* Map(size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  g_mapped.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  return p;
}

// `region` (mapped `from` bytes) grown to `to` bytes with its pages (moved if it must,
// never copied). Null on failure, `region` unchanged.
void* Remap(void* region, size_t from, size_t to) {
  void* p = ::mremap(region, from, to, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) return nullptr;
  g_mapped.fetch_add(static_cast<int64_t>(to) - static_cast<int64_t>(from),
                     std::memory_order_relaxed);
  return p;
}

void Unmap(void* region, size_t size) {
  ::munmap(region, size);
  g_mapped.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
}

using Cached = RegionAllocator::Cached;

// Whether a child process made by fork() gets the region: not while it is cached (no
// one's data is in it), so that fork() leaves its pages writable in this process. A
// fork write-protects every page both processes map, and the first write to each after
// it faults, the child gone or not: a VLM pass after a DataLoader's workers were forked
// faulted 350 K of the kept regions' pages again (100-105 against 109-118 samples/s).
// A region lent out is inherited as any memory is (a child may read a batch). Advice
// only: a failure changes nothing but that.
void Inherit(const Cached& c, bool inherit) {
  (void)::madvise(c.region, c.size, inherit ? MADV_DOFORK : MADV_DONTFORK);
}

// Which of `regions` a request of `size` (whole pages) takes: the smallest that holds it
// (Fit::kBest) or else the largest, which is grown; end() when there are none.
std::list<Cached>::iterator Pick(std::list<Cached>& regions, size_t size,
                                 RegionAllocator::Fit fit) {
  auto best = regions.end();
  auto largest = regions.end();
  for (auto it = regions.begin(); it != regions.end(); ++it) {
    if (it->size >= size && (best == regions.end() || it->size < best->size)) best = it;
    if (largest == regions.end() || it->size > largest->size) largest = it;
  }
  return best != regions.end() && fit == RegionAllocator::Fit::kBest ? best : largest;
}

// The regions closed allocators keep for the next (OnClose::kKeepForNext), oldest first,
// apart by Fit: a sample's rows (kLargest) would take a batch's large region whole.
struct KeptRegions {
  struct Kind {
    std::list<Cached> regions;
    size_t bytes = 0;
    size_t cap = 0;  // the largest cap of the allocators that kept theirs here
  };
  std::mutex mu;
  Kind kinds[2];  // guarded by mu; by Fit
  Kind& of(RegionAllocator::Fit fit) { return kinds[fit == RegionAllocator::Fit::kBest ? 0 : 1]; }
};
KeptRegions& Kept() {
  static auto* kept = new KeptRegions;  // never destroyed: allocators may close at exit
  return *kept;
}

}  // namespace

RegionAllocator::RegionAllocator(size_t max_cached_bytes, Fit fit, OnClose on_close)
    : max_cached_bytes_(max_cached_bytes), fit_(fit), on_close_(on_close) {}

RegionAllocator::~RegionAllocator() {
  // Lent regions are freed through Free by their buffers, which keep the allocator alive.
  std::vector<Cached> unmap;
  if (on_close_ == OnClose::kKeepForNext) {
    KeptRegions& all = Kept();
    std::lock_guard lock(all.mu);
    KeptRegions::Kind& kept = all.of(fit_);
    kept.cap = std::max(kept.cap, max_cached_bytes_);
    for (const Cached& c : free_) {
      kept.regions.push_back(c);
      kept.bytes += c.size;
    }
    while (kept.bytes > kept.cap) {
      unmap.push_back(kept.regions.front());
      kept.bytes -= kept.regions.front().size;
      kept.regions.pop_front();
    }
  } else {
    unmap.assign(free_.begin(), free_.end());
  }
  for (const Cached& c : unmap) Unmap(c.region, c.size);
}

size_t RegionAllocator::PagesOf(size_t bytes) {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

void* RegionAllocator::Allocate(size_t bytes, size_t alignment) {
  return Take(bytes, alignment, fit_);
}

void* RegionAllocator::AllocateFinal(size_t bytes, size_t alignment) {
  return Take(bytes, alignment, Fit::kBest);
}

void* RegionAllocator::Take(size_t bytes, size_t alignment, Fit fit) {
  const size_t size = PagesOf(bytes);
  if (bytes < kMinRegionBytes || alignment > PagesOf(1)) {
    return std::aligned_alloc(alignment, (std::max<size_t>(bytes, 1) + alignment - 1) /
                                             alignment * alignment);
  }
  Cached taken{nullptr, 0, 0};
  {
    std::lock_guard lock(mu_);
    const auto from = Pick(free_, size, fit);
    if (from != free_.end()) {
      taken = *from;
      cached_bytes_ -= from->size;
      free_.erase(from);
    }
  }
  if (taken.region == nullptr && on_close_ == OnClose::kKeepForNext) {
    // None of its own: one a closed allocator of its kind kept.
    KeptRegions& all = Kept();
    std::lock_guard lock(all.mu);
    KeptRegions::Kind& kept = all.of(fit_);
    const auto from = Pick(kept.regions, size, fit);
    if (from != kept.regions.end()) {
      taken = *from;
      kept.bytes -= from->size;
      kept.regions.erase(from);
    }
  }
  {
    std::lock_guard lock(mu_);
    if (taken.region != nullptr) {
      ++hits_;
      if (taken.size < size) ++grown_;
    } else {
      ++misses_;
    }
  }
  if (taken.region != nullptr) Inherit(taken, true);
  void* region = nullptr;
  size_t mapped = size;
  size_t written = 0;  // a fresh mapping: none
  if (taken.region == nullptr) {
    region = Map(size);
  } else if (taken.size < size) {
    // Grown with its pages: only the added ones are new.
    region = Remap(taken.region, taken.size, size);
    written = taken.written;
    if (region == nullptr) {
      Unmap(taken.region, taken.size);
      region = Map(size);
      written = 0;
    }
  } else {
    region = taken.region;
    mapped = taken.size;
    written = taken.written;
  }
  if (region == nullptr) return nullptr;
  std::lock_guard lock(mu_);
  lent_.emplace(region, Lent{mapped, written});
  return region;
}

void* RegionAllocator::Reallocate(void* ptr, size_t old_bytes, size_t new_bytes,
                                  size_t alignment) {
  if (alignment > PagesOf(1)) return nullptr;
  size_t mapped = 0;
  Lent lent{0, 0};
  {
    std::lock_guard lock(mu_);
    const auto it = lent_.find(ptr);
    if (it == lent_.end()) return nullptr;  // the heap's (a small block): not grown here
    mapped = it->second.size;
    if (new_bytes <= mapped) return ptr;
    lent = it->second;
    lent_.erase(it);
    ++grown_;
  }
  (void)old_bytes;
  const size_t size = PagesOf(new_bytes);
  void* region = Remap(ptr, mapped, size);
  std::lock_guard lock(mu_);
  if (region == nullptr) {
    lent_.emplace(ptr, lent);  // as it was: the caller copies instead
    return nullptr;
  }
  lent.size = size;  // its pages moved with it: what was written is where it was
  lent_.emplace(region, lent);
  return region;
}

size_t RegionAllocator::Settle(void* ptr, size_t bytes, size_t used) {
  Cached tail{nullptr, 0, 0};
  {
    std::lock_guard lock(mu_);
    const auto it = lent_.find(ptr);
    if (it == lent_.end()) return bytes;  // the heap's
    Lent& lent = it->second;
    lent.written = std::max(lent.written, std::min(used, lent.size));
    lent.settled = true;
    const size_t keep = PagesOf(lent.written);
    if (keep < lent.size) {
      tail = {static_cast<uint8_t*>(ptr) + keep, lent.size - keep, 0};
      lent.size = keep;
    }
    bytes = std::min(bytes, lent.size);
  }
  if (tail.region != nullptr) Unmap(tail.region, tail.size);
  return bytes;
}

void RegionAllocator::Free(void* ptr, size_t /*bytes*/) {
  if (ptr == nullptr) return;
  std::vector<Cached> unmap;
  Cached freed{nullptr, 0, 0};
  {
    std::lock_guard lock(mu_);
    const auto it = lent_.find(ptr);
    if (it == lent_.end()) {
      std::free(ptr);  // the heap's
      return;
    }
    // Unsettled, any of it may have been written.
    const Lent& lent = it->second;
    freed = {ptr, lent.size, lent.settled ? lent.written : lent.size};
    lent_.erase(it);
  }
  if (freed.size <= max_cached_bytes_) Inherit(freed, false);  // before others may take it
  {
    std::lock_guard lock(mu_);
    if (freed.size > max_cached_bytes_) {
      unmap.push_back(freed);
    } else {
      while (cached_bytes_ + freed.size > max_cached_bytes_) {  // the oldest make room
        unmap.push_back(free_.front());
        cached_bytes_ -= free_.front().size;
        free_.pop_front();
      }
      free_.push_back(freed);
      cached_bytes_ += freed.size;
    }
  }
  for (const Cached& c : unmap) Unmap(c.region, c.size);
}

size_t RegionAllocator::cached_bytes() const {
  std::lock_guard lock(mu_);
  return cached_bytes_;
}
int64_t RegionAllocator::hits() const {
  std::lock_guard lock(mu_);
  return hits_;
}
int64_t RegionAllocator::misses() const {
  std::lock_guard lock(mu_);
  return misses_;
}
int64_t RegionAllocator::grown() const {
  std::lock_guard lock(mu_);
  return grown_;
}

std::shared_ptr<ReusingAllocator> MakeVaryingPool(Allocator* base, size_t max_cached_bytes,
                                                  RegionAllocator::Fit fit,
                                                  RegionAllocator::OnClose on_close) {
  if (base == DefaultAllocator()) {
    return std::make_shared<RegionAllocator>(max_cached_bytes, fit, on_close);
  }
  return std::make_shared<PoolingAllocator>(base, max_cached_bytes,
                                            PoolingAllocator::SizeClasses::kGeometric);
}

size_t ReleaseKeptRegions() {
  std::list<Cached> regions;
  size_t bytes = 0;
  {
    KeptRegions& all = Kept();
    std::lock_guard lock(all.mu);
    for (KeptRegions::Kind& kept : all.kinds) {
      regions.splice(regions.end(), kept.regions);
      bytes += kept.bytes;
      kept = KeptRegions::Kind{};
    }
  }
  for (const Cached& c : regions) Unmap(c.region, c.size);
  return bytes;
}

int64_t RegionBytesMapped() { return g_mapped.load(std::memory_order_relaxed); }

size_t KeptRegionBytes() {
  KeptRegions& all = Kept();
  std::lock_guard lock(all.mu);
  return all.kinds[0].bytes + all.kinds[1].bytes;
}

}  // namespace headrace
