// Helpers shared by the fuzz targets in this folder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
