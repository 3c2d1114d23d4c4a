#include "headrace/core/histogram.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace headrace {
namespace {

TEST(LatencyHistogram, PutsEachDurationInTheBucketOfItsUpperBound) {
  LatencyHistogram h;
  h.Record(30'000);         // 30 us: <= 50 us
  h.Record(50'000);         // exactly on a bound: that bucket (le = less or equal)
  h.Record(2'000'000);      // 2 ms: (1 ms, 2.5 ms]
  h.Record(120'000'000'000);  // 120 s: +Inf
  const HistogramSnapshot s = h.Snapshot();
  ASSERT_EQ(s.counts.size(), s.bounds.size() + 1);
  EXPECT_EQ(s.count, 4);
  EXPECT_EQ(s.counts[0], 2);
  EXPECT_EQ(s.counts[5], 1);  // bounds[5] = 2.5 ms
  EXPECT_EQ(s.counts.back(), 1);
  EXPECT_NEAR(s.sum_s, 120.00208, 1e-9);
}

TEST(LatencyHistogram, QuantilesInterpolateInsideTheirBucket) {
  LatencyHistogram h;
  // 100 observations of 7 ms: all in (5 ms, 10 ms].
  for (int i = 0; i < 100; ++i) h.Record(7'000'000);
  const HistogramSnapshot s = h.Snapshot();
  EXPECT_NEAR(s.Quantile(0.5), 0.0075, 1e-12);
  EXPECT_NEAR(s.Quantile(1.0), 0.010, 1e-12);
  EXPECT_NEAR(s.Mean(), 0.007, 1e-12);
  EXPECT_EQ(HistogramSnapshot{}.Quantile(0.5), 0.0);
}

TEST(LatencyHistogram, SnapshotsMergeAcrossWorkers) {
  LatencyHistogram a, b;
  a.Record(1'000'000);
  b.Record(1'000'000);
  b.Record(200'000'000);
  HistogramSnapshot merged;
  merged.Merge(a.Snapshot());
  merged.Merge(b.Snapshot());
  EXPECT_EQ(merged.count, 3);
  EXPECT_EQ(merged.counts[4], 2);  // (500 us, 1 ms]
  EXPECT_NEAR(merged.sum_s, 0.202, 1e-12);
  // Two thirds at 1 ms: the median is in the 1 ms bucket, the p99 in (100, 250] ms.
  EXPECT_LE(merged.Quantile(0.5), 0.001);
  EXPECT_GT(merged.Quantile(0.99), 0.1);
}

TEST(LatencyHistogram, CountsEveryRecordFromConcurrentThreads) {
  LatencyHistogram h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 10'000; ++i) h.Record((t + 1) * 1'000'000LL);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.Snapshot().count, 40'000);
}

}  // namespace
}  // namespace headrace
