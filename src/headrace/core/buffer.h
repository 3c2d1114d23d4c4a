// Buffer: a ref-counted, aligned, sliceable byte range.
//
// A Buffer is written by the stage that allocated it and is immutable once it is
// published (handed to another stage or to the consumer): slices and copies of the
// handle share the same memory, which is freed through the allocator that produced it
// when the last handle goes away. Allocators are pluggable so that batch memory can be
// plain, pinned for GPU copies, or shared with another process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "headrace/core/status.h"

namespace headrace {

// Where buffer memory comes from. Implementations must be thread-safe and must outlive
// every buffer they allocated.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory of at least `bytes` aligned to `alignment` (a power of two), or null.
  virtual void* Allocate(size_t bytes, size_t alignment) = 0;
  // Returns memory obtained from Allocate with the same `bytes`.
  virtual void Free(void* ptr, size_t bytes) = 0;
  // Optional: `ptr` (from Allocate, or an earlier Reallocate, of `old_bytes`) holding at
  // least `new_bytes` with its first `old_bytes` unchanged, without copying them (a
  // mapping grown in place); null when the allocator cannot, and `ptr` is then as it was.
  virtual void* Reallocate(void* /*ptr*/, size_t /*old_bytes*/, size_t /*new_bytes*/,
                           size_t /*alignment*/) {
    return nullptr;
  }
  // Optional: the block's contents are its first `used` bytes from now on (nothing is
  // written past them). An allocator may give back what lies past every byte ever
  // written in the block (pages never touched); returns the block's size after (at most
  // `bytes`, at least `used`).
  virtual size_t Settle(void* /*ptr*/, size_t bytes, size_t /*used*/) { return bytes; }
  // Optional: Allocate for a block whose size is final (it will not grow). An allocator
  // that places blocks where they can grow (RegionAllocator::Fit::kLargest) places this
  // one by best fit instead.
  virtual void* AllocateFinal(size_t bytes, size_t alignment) { return Allocate(bytes, alignment); }
  virtual const char* name() const = 0;
};

// Process-wide heap allocator (aligned_alloc). Never null.
Allocator* DefaultAllocator();

inline constexpr size_t kBufferAlignment = 64;

class Buffer {
 public:
  Buffer() = default;

  // Allocates `size` uninitialized bytes. Fails with kResourceExhausted when the
  // allocator returns null.
  static Result<Buffer> Allocate(size_t size, Allocator* allocator = DefaultAllocator(),
                                 size_t alignment = kBufferAlignment);
  // The same from an allocator that the buffer keeps alive until its memory is freed
  // (a pool owned by an engine that may be gone before the consumer's last view).
  static Result<Buffer> Allocate(size_t size, std::shared_ptr<Allocator> allocator,
                                 size_t alignment = kBufferAlignment);
  // The same for a block that will not grow (Allocator::AllocateFinal).
  static Result<Buffer> AllocateFinal(size_t size, std::shared_ptr<Allocator> allocator,
                                      size_t alignment = kBufferAlignment);
  // This buffer's contents are its first `used` bytes from now on: when it is its block's
  // only handle, whole, the allocator may give back the rest (Allocator::Settle); the
  // buffer is then at most the block's new size (at least `used`).
  void Settle(size_t used);
  // Allocates and copies `size` bytes from `data`.
  static Result<Buffer> CopyOf(const void* data, size_t size);
  // `buffer` (its first `keep` bytes) in a buffer of `size` bytes from `allocator`: its own
  // block grown in place when this is its only handle and the allocator can
  // (Allocator::Reallocate: no copy), else a new block with the `keep` bytes copied.
  static Result<Buffer> Grow(Buffer buffer, size_t keep, size_t size,
                             std::shared_ptr<Allocator> allocator,
                             size_t alignment = kBufferAlignment);

  const uint8_t* data() const { return data_; }
  // Writable access, for the owner before the buffer is published.
  uint8_t* mutable_data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // A view of [offset, offset + length) sharing this buffer's memory. Clamped to the
  // buffer's bounds.
  Buffer Slice(size_t offset, size_t length) const;
  // Number of handles sharing the underlying memory (for tests and diagnostics).
  long use_count() const { return owner_.use_count(); }

 private:
  struct Block;
  // A Block of `ptr` (null: kResourceExhausted naming the allocator) kept by its handle.
  static Result<Buffer> Own(void* ptr, size_t size, std::shared_ptr<Allocator> allocator);
  Buffer(std::shared_ptr<Block> owner, uint8_t* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}

  std::shared_ptr<Block> owner_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace headrace
