#include "headrace/core/pooling_allocator.h"

#include <bit>

namespace headrace {

PoolingAllocator::PoolingAllocator(Allocator* base, size_t max_cached_bytes,
                                   SizeClasses classes)
    : base_(base), max_cached_bytes_(max_cached_bytes), classes_(classes) {}

PoolingAllocator::~PoolingAllocator() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) base_->Free(p, size);
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
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= size;
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
  const size_t size = SizeClass(bytes);
  {
    std::lock_guard lock(mu_);
    if (cached_bytes_ + size <= max_cached_bytes_) {
      free_[size].push_back(ptr);
      cached_bytes_ += size;
      return;
    }
  }
  base_->Free(ptr, size);
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
