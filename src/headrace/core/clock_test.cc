#include "headrace/core/clock.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace headrace {
namespace {

TEST(MallocHeap, CountsAnAllocationWhileItIsHeld) {
  const MallocHeap before = MallocHeapBytes();
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer's allocator is not glibc's: no figure rather than glibc's idle arenas.
  EXPECT_EQ(before.system_bytes, -1);
  EXPECT_EQ(before.in_use_bytes, -1);
#else
  ASSERT_GE(before.in_use_bytes, 0);
  constexpr int64_t kBytes = int64_t{64} << 20;
  // Through a volatile pointer, so that the compiler keeps the allocation.
  void* volatile held = std::malloc(kBytes);
  ASSERT_NE(held, nullptr);
  std::memset(held, 1, kBytes);
  const MallocHeap during = MallocHeapBytes();
  std::free(held);
  const MallocHeap after = MallocHeapBytes();
  EXPECT_GE(during.in_use_bytes - before.in_use_bytes, kBytes);
  EXPECT_GE(during.system_bytes, during.in_use_bytes);
  EXPECT_LE(after.in_use_bytes, during.in_use_bytes - kBytes);
#endif
}

}  // namespace
}  // namespace headrace
