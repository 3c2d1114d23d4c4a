#include "headrace/core/buffer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace headrace {
namespace {

class HeapAllocator final : public Allocator {
 public:
  void* Allocate(size_t bytes, size_t alignment) override {
    // aligned_alloc needs a size that is a multiple of the alignment.
    size_t rounded = (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
    return std::aligned_alloc(alignment, rounded);
  }
  void Free(void* ptr, size_t /*bytes*/) override { std::free(ptr); }
  const char* name() const override { return "heap"; }
};

}  // namespace

Allocator* DefaultAllocator() {
  static HeapAllocator allocator;
  return &allocator;
}

struct Buffer::Block {
  Block(Allocator* a, void* p, size_t b, std::shared_ptr<Allocator> owner = nullptr)
      : allocator(a), ptr(p), bytes(b), keep_alive(std::move(owner)) {}
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block() { allocator->Free(ptr, bytes); }

  Allocator* allocator;
  void* ptr;
  size_t bytes;
  std::shared_ptr<Allocator> keep_alive;  // released after Free, in member order
};

Result<Buffer> Buffer::Allocate(size_t size, Allocator* allocator, size_t alignment) {
  void* ptr = allocator->Allocate(size, alignment);
  if (ptr == nullptr) {
    return Status::ResourceExhausted("allocator '" + std::string(allocator->name()) +
                                     "' could not provide " + std::to_string(size) + " bytes");
  }
  auto block = std::make_shared<Block>(allocator, ptr, size);
  return Buffer(std::move(block), static_cast<uint8_t*>(ptr), size);
}

Result<Buffer> Buffer::Own(void* ptr, size_t size, std::shared_ptr<Allocator> allocator) {
  Allocator* raw = allocator.get();
  if (ptr == nullptr) {
    return Status::ResourceExhausted("allocator '" + std::string(raw->name()) +
                                     "' could not provide " + std::to_string(size) + " bytes");
  }
  auto block = std::make_shared<Block>(raw, ptr, size, std::move(allocator));
  return Buffer(std::move(block), static_cast<uint8_t*>(ptr), size);
}

Result<Buffer> Buffer::Allocate(size_t size, std::shared_ptr<Allocator> allocator,
                                size_t alignment) {
  void* ptr = allocator->Allocate(size, alignment);
  return Own(ptr, size, std::move(allocator));
}

Result<Buffer> Buffer::AllocateFinal(size_t size, std::shared_ptr<Allocator> allocator,
                                     size_t alignment) {
  void* ptr = allocator->AllocateFinal(size, alignment);
  return Own(ptr, size, std::move(allocator));
}

Result<Buffer> Buffer::Grow(Buffer buffer, size_t keep, size_t size,
                            std::shared_ptr<Allocator> allocator, size_t alignment) {
  keep = std::min(keep, buffer.size_);
  Block* block = buffer.owner_.get();
  // Only a whole block of this allocator, held by nobody else, may move.
  if (block != nullptr && buffer.owner_.use_count() == 1 && block->allocator == allocator.get() &&
      buffer.data_ == block->ptr && size > block->bytes) {
    if (void* grown = block->allocator->Reallocate(block->ptr, block->bytes, size, alignment)) {
      block->ptr = grown;
      block->bytes = size;
      return Buffer(std::move(buffer.owner_), static_cast<uint8_t*>(grown), size);
    }
  }
  HR_ASSIGN_OR_RETURN(Buffer out, Allocate(size, std::move(allocator), alignment));
  if (keep > 0) std::memcpy(out.mutable_data(), buffer.data_, keep);
  return out;
}

void Buffer::Settle(size_t used) {
  Block* block = owner_.get();
  if (block == nullptr || owner_.use_count() != 1 || data_ != block->ptr || used > size_) return;
  block->bytes = block->allocator->Settle(block->ptr, block->bytes, used);
  size_ = std::min(size_, block->bytes);
}

Result<Buffer> Buffer::CopyOf(const void* data, size_t size) {
  HR_ASSIGN_OR_RETURN(Buffer buffer, Allocate(size));
  if (size > 0) std::memcpy(buffer.mutable_data(), data, size);
  return buffer;
}

Buffer Buffer::Slice(size_t offset, size_t length) const {
  offset = std::min(offset, size_);
  length = std::min(length, size_ - offset);
  return Buffer(owner_, data_ + offset, length);
}

}  // namespace headrace
