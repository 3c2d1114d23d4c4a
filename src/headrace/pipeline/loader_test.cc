#include "headrace/pipeline/loader.h"

#include <gtest/gtest.h>

namespace headrace {
namespace {

TEST(ResolveIoInflight, KeepsAnExplicitValue) {
  ExecutionSpec ex;
  ex.io_inflight = 7;
  EXPECT_EQ(ResolveIoInflight(ex, 64), 7);
}

TEST(ResolveIoInflight, AutomaticIsSixteenPerCpuThreadButAtLeastThirtyTwo) {
  ExecutionSpec ex;
  EXPECT_EQ(ex.io_inflight, 0);  // the default is automatic
  EXPECT_EQ(ResolveIoInflight(ex, 1), 32);
  EXPECT_EQ(ResolveIoInflight(ex, 2), 32);
  EXPECT_EQ(ResolveIoInflight(ex, 3), 48);
  EXPECT_EQ(ResolveIoInflight(ex, 16), 256);
  EXPECT_EQ(ResolveIoInflight(ex, 0), 32);
}

TEST(ResolveIoInflight, AutomaticIsCappedWithoutOverflow) {
  ExecutionSpec ex;
  EXPECT_EQ(ResolveIoInflight(ex, 1024), kMaxAutoIoInflight);
  EXPECT_EQ(ResolveIoInflight(ex, 2'000'000'000), kMaxAutoIoInflight);  // 16 x 2e9 > INT_MAX
}

}  // namespace
}  // namespace headrace
