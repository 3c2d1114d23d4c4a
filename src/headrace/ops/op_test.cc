#include "headrace/ops/op.h"

#include <gtest/gtest.h>

namespace headrace {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(ScratchArena, KeepsWhatFitsTheAllowance) {
  ScratchArena arena;
  ASSERT_NE(arena.Get(0, 1 * kMiB), nullptr);
  ASSERT_NE(arena.Get(1, 2 * kMiB), nullptr);
  const size_t held = arena.capacity();
  EXPECT_GE(held, 3 * kMiB);
  EXPECT_EQ(arena.Trim(held), 0u);
  EXPECT_EQ(arena.capacity(), held);
}

TEST(ScratchArena, TrimReturnsAHugeSlotAfterTheSampleThatNeededIt) {
  ScratchArena arena;
  ASSERT_NE(arena.Get(0, 1 * kMiB), nullptr);  // a decoded image of ordinary size
  ASSERT_NE(arena.Get(1, 256 * kMiB), nullptr);  // a 9000x9000-class decode
  ASSERT_NE(arena.Get(2, 1 * kMiB), nullptr);
  EXPECT_GE(arena.capacity(), 258 * kMiB);

  const size_t freed = arena.Trim(8 * kMiB);
  EXPECT_GE(freed, 256 * kMiB);
  EXPECT_LE(arena.capacity(), 8 * kMiB);
  // The small slots stay: the next ordinary sample allocates nothing.
  EXPECT_GE(arena.capacity(), 2 * kMiB);
}

TEST(ScratchArena, TrimToZeroFreesEverything) {
  ScratchArena arena;
  for (int slot = 0; slot < ScratchArena::kSlots; ++slot) {
    ASSERT_NE(arena.Get(slot, 4096), nullptr);
  }
  arena.Trim(0);
  EXPECT_EQ(arena.capacity(), 0u);
  EXPECT_NE(arena.Get(0, 4096), nullptr);  // usable again
}

TEST(ScratchUsage, CountsArenasHeldAtTheSameTimeAndWhatTheyFree) {
  ScratchUsage usage;
  {
    ScratchArena a, b;
    a.Account(&usage);
    b.Account(&usage);
    ASSERT_NE(a.Get(0, 8 * kMiB), nullptr);
    ASSERT_NE(b.Get(0, 8 * kMiB), nullptr);
    EXPECT_EQ(usage.held(), static_cast<int64_t>(a.capacity() + b.capacity()));
    a.Trim(0);
    EXPECT_EQ(usage.held(), static_cast<int64_t>(b.capacity()));
    EXPECT_GE(usage.peak(), static_cast<int64_t>(16 * kMiB));  // both at once
  }
  EXPECT_EQ(usage.held(), 0);  // an arena's destructor gives its bytes back
}

TEST(ScratchUsage, AccountMovesAnArenasBytesBetweenGroups) {
  ScratchUsage first, second;
  ScratchArena arena;
  ASSERT_NE(arena.Get(0, kMiB), nullptr);
  arena.Account(&first);
  EXPECT_EQ(first.held(), static_cast<int64_t>(arena.capacity()));
  arena.Account(&second);
  EXPECT_EQ(first.held(), 0);
  EXPECT_EQ(second.held(), static_cast<int64_t>(arena.capacity()));
  arena.Account(nullptr);
  EXPECT_EQ(second.held(), 0);
}

}  // namespace
}  // namespace headrace
