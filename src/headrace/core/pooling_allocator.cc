#include "headrace/core/pooling_allocator.h"

#include <bit>

namespace headrace {

PoolingAllocator::PoolingAllocator(Allocator* base, size_t max_cached_bytes,
                                   SizeClasses classes)
    : base_(base), max_cached_bytes_(max_cached_bytes), classes_(classes) {}

PoolingAllocator::~PoolingAllocator() {
  for (auto& [size, blocks] : free_) {
    for (const Cached& c : blocks) base_->Free(c.block, size);
  }
}

size_t PoolingAllocator::SizeClass(size_t bytes) const {
  constexpr size_t kPage = 4096;
  const size_t pages = (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  if (classes_ == SizeClasses::kPages || pages <= kPage) return pages;
  // Keep the top three bits: sizes in (2^k, 2^(k+1)] round up to a multiple of 2^(k-2).
  const int shift = std::bit_width(pages - 1) - 3;
  const size_t step = std::max<size_t>(kPage, size_t{1} << shift);
  return (pages + step - 1) / step * step;
}

void* PoolingAllocator::Allocate(size_t bytes, size_t alignment) {
  const size_t size = SizeClass(bytes);
  if (alignment <= kBufferAlignment) {
    std::lock_guard lock(mu_);
    auto it = free_.find(size);
    if (it == free_.end() && classes_ == SizeClasses::kGeometric) {
      it = free_.upper_bound(size);  // the smallest larger class, if at most 50% over
      if (it != free_.end() && it->first > size + size / 2) it = free_.end();
    }
    if (it != free_.end()) {
      const size_t block_size = it->first;
      void* p = it->second.back().block;
      it->second.pop_back();
      if (it->second.empty()) free_.erase(it);
      cached_bytes_ -= block_size;
      if (block_size != size) lent_larger_.emplace(p, block_size);
      ++hits_;
      return p;
    }
    ++misses_;
  }
  // Every block is allocated with the pool's alignment, so any block of a class can
  // serve any later request of that class.
  return base_->Allocate(size, std::max(alignment, kBufferAlignment));
}

void PoolingAllocator::Free(void* ptr, size_t bytes) {
  size_t size = SizeClass(bytes);
  std::vector<std::pair<void*, size_t>> evicted;
  bool kept = false;
  {
    std::lock_guard lock(mu_);
    if (const auto it = lent_larger_.find(ptr); it != lent_larger_.end()) {
      size = it->second;
      lent_larger_.erase(it);
    }
    if (size <= max_cached_bytes_) {
      while (cached_bytes_ + size > max_cached_bytes_) {  // the oldest make room
        auto oldest = free_.begin();
        for (auto it = free_.begin(); it != free_.end(); ++it) {
          if (it->second.front().freed < oldest->second.front().freed) oldest = it;
        }
        evicted.emplace_back(oldest->second.front().block, oldest->first);
        oldest->second.erase(oldest->second.begin());
        cached_bytes_ -= oldest->first;
        if (oldest->second.empty()) free_.erase(oldest);
      }
      free_[size].push_back(Cached{ptr, frees_++});
      cached_bytes_ += size;
      kept = true;
    }
  }
  for (const auto& [block, block_size] : evicted) base_->Free(block, block_size);
  if (!kept) base_->Free(ptr, size);
}

size_t PoolingAllocator::cached_bytes() const {
  std::lock_guard lock(mu_);
  return cached_bytes_;
}

int64_t PoolingAllocator::hits() const {
  std::lock_guard lock(mu_);
  return hits_;
}

int64_t PoolingAllocator::misses() const {
  std::lock_guard lock(mu_);
  return misses_;
}

}  // namespace headrace
