// Test helpers for the allocator interface (core/buffer.h).
#pragma once

#include <cstddef>
#include <vector>

#include "headrace/core/buffer.h"

namespace headrace::testing {

// The heap's memory, with the sizes of the blocks asked for by Allocate (blocks that may
// grow) and by AllocateFinal (blocks sized before they are written) kept apart.
class FitCountingAllocator final : public Allocator {
 public:
  void* Allocate(size_t bytes, size_t alignment) override {
    growing.push_back(bytes);
    return DefaultAllocator()->Allocate(bytes, alignment);
  }
  void* AllocateFinal(size_t bytes, size_t alignment) override {
    final.push_back(bytes);
    return DefaultAllocator()->Allocate(bytes, alignment);
  }
  void Free(void* p, size_t bytes) override { DefaultAllocator()->Free(p, bytes); }
  const char* name() const override { return "fit-counting"; }

  std::vector<size_t> growing;
  std::vector<size_t> final;
};

}  // namespace headrace::testing
