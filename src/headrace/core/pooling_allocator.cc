#include "headrace/core/pooling_allocator.h"

namespace headrace {

PoolingAllocator::PoolingAllocator(Allocator* base, size_t max_cached_bytes)
    : base_(base), max_cached_bytes_(max_cached_bytes) {}

PoolingAllocator::~PoolingAllocator() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) base_->Free(p, size);
  }
}

size_t PoolingAllocator::SizeClass(size_t bytes) {
  constexpr size_t kPage = 4096;
  return (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
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
