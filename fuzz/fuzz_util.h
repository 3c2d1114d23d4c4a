// Helpers shared by the fuzz targets in this folder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "headrace/core/buffer.h"

namespace headrace::fuzz {

// Allocates exactly the bytes asked for (Buffer's default allocator rounds up to the
// alignment), so that AddressSanitizer reports a read one byte past a Buffer's end.
class ExactAllocator final : public Allocator {
 public:
  void* Allocate(size_t bytes, size_t alignment) override {
    void* ptr = nullptr;
    return posix_memalign(&ptr, alignment, bytes) == 0 ? ptr : nullptr;
  }
  void Free(void* ptr, size_t) override { std::free(ptr); }
  const char* name() const override { return "fuzz-exact"; }
};

// A Buffer holding a copy of the fuzzer's input and not one byte more.
inline Buffer ExactCopy(const uint8_t* data, size_t size) {
  static ExactAllocator allocator;
  Buffer buffer = *Buffer::Allocate(size, &allocator);
  if (size > 0) std::memcpy(buffer.mutable_data(), data, size);
  return buffer;
}

// Reads values one at a time from the fuzzer's bytes: a byte below 0x80 is that small
// value, 0x80..0xFE the next 8 bytes as an int64 (little-endian), 0xFF its negation - 1
// (so that every int64, 0, the limits and small sizes are all reachable). Past the end,
// zeros.
class ValueReader {
 public:
  ValueReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  int64_t Next() {
    if (pos_ >= size_) return 0;
    const uint8_t tag = data_[pos_++];
    if (tag < 0x80) return tag;
    uint64_t bits = 0;
    for (int i = 0; i < 8 && pos_ < size_; ++i) bits |= uint64_t{data_[pos_++]} << (8 * i);
    int64_t v;
    std::memcpy(&v, &bits, sizeof v);
    return tag == 0xFF ? -(v & 0x7FFFFFFFFFFFFFFF) - 1 : v;
  }
  // A double: a small value in eighths (0..15.875), or the 8 escaped bytes' bits as
  // they are (NaN, infinities, denormals and 1e300 included).
  double NextDouble() {
    if (pos_ < size_ && data_[pos_] < 0x80) return static_cast<double>(Next()) / 8;
    const int64_t bits = Next();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  // Up to 15 values.
  std::vector<int64_t> List() {
    const int64_t n = Next() % 16;
    std::vector<int64_t> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(Next());
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Stops the fuzzer with a report when a property of the code under test fails; the
// crash (an abort) is what libFuzzer and the replay driver catch.
#define HR_FUZZ_CHECK(condition, ...)                                                    \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
      std::fprintf(stderr, __VA_ARGS__);                                                 \
      std::fprintf(stderr, "\n");                                                        \
      std::abort();                                                                      \
    }                                                                                    \
  } while (false)

}  // namespace headrace::fuzz
