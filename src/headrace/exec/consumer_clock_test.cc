#include "headrace/exec/consumer_clock.h"

#include <gtest/gtest.h>

namespace headrace {
namespace consumer_clock_test {

TEST(ConsumerClock, TheFirstBatchIsTheColdStartThenWaitsAndStepsSplitTheLoop) {
  ConsumerClock clock(10.0);
  clock.Returned(10.5, 12.0, true, 32);  // cold start: 2 s from the clock's start
  EXPECT_TRUE(clock.started());
  EXPECT_DOUBLE_EQ(clock.stats().time_to_first_batch_s, 2.0);
  EXPECT_DOUBLE_EQ(clock.stats().wait_s, 0.0);
  clock.Returned(13.0, 13.5, true, 32);  // a 1 s step, then a 0.5 s wait
  clock.Returned(14.5, 14.5, true, 0);   // an empty batch: holds a position, not counted
  const ConsumerStats& s = clock.stats();
  EXPECT_EQ(s.batches, 2);
  EXPECT_EQ(s.samples, 64);
  EXPECT_DOUBLE_EQ(s.busy_s, 2.0);
  EXPECT_DOUBLE_EQ(s.wait_s, 0.5);
  EXPECT_DOUBLE_EQ(s.steady_s, 2.5);
  EXPECT_DOUBLE_EQ(s.elapsed_s, 4.5);
  EXPECT_DOUBLE_EQ(s.wait_time_ratio(), 0.2);
}

TEST(ConsumerClock, NothingBeforeTheFirstBatchCountsAsWait) {
  ConsumerClock clock(0.0);
  clock.Returned(0.0, 1.0, false, 0);  // the run ended (or failed) before any batch
  EXPECT_FALSE(clock.started());
  EXPECT_DOUBLE_EQ(clock.stats().wait_s, 0.0);
  EXPECT_DOUBLE_EQ(clock.stats().elapsed_s, 1.0);
  EXPECT_EQ(clock.stats().batches, 0);
}

}  // namespace consumer_clock_test
}  // namespace headrace
