#include "headrace/exec/delivery.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace headrace {
namespace delivery_test {

// A batch of `rows` rows (an int64 "index" field) and `errors` failed samples.
Batch MakeBatch(int64_t index, int64_t rows, int errors = 0) {
  Batch b;
  b.global_index = index;
  auto tensor = Tensor::Allocate(DType::kI64, {rows});
  b.fields.emplace_back("index", *std::move(tensor));
  for (int e = 0; e < errors; ++e) {
    b.errors.push_back(SampleError{0, e, "x", Status::CorruptData("bad")});
  }
  return b;
}

DeliveryOptions Options(int64_t total, int depth = 2) {
  DeliveryOptions o;
  o.prefetch_depth = depth;
  o.total_batches = total;
  o.batches_per_epoch = total;
  o.budget.max_error_rate = 0.25;
  o.budget.min_samples = 1;
  return o;
}

TEST(InOrderDelivery, BatchesReadyInAnyOrderAreDeliveredInOrderThenTheEnd) {
  BudgetGauge gauge;
  std::stop_source stop;
  auto d = Delivery::Make(Schedule::kSequential, Options(3, 3), gauge, stop);
  for (int64_t j = 0; j < 3; ++j) {
    ASSERT_EQ(d->NextToStart(), j);
    ASSERT_TRUE(d->Admit(j, 100, 4));
  }
  EXPECT_EQ(d->NextToStart(), std::nullopt);
  EXPECT_EQ(gauge.used(), 300);
  d->Ready(2, MakeBatch(2, 4), 100, 100);
  d->Ready(0, MakeBatch(0, 4), 100, 100);
  d->Ready(1, MakeBatch(1, 4), 100, 100);
  for (int64_t j = 0; j < 3; ++j) {
    auto batch = d->Next();
    ASSERT_TRUE(batch.ok() && batch->has_value());
    EXPECT_EQ((*batch)->global_index, j);
  }
  auto end = d->Next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
  EXPECT_EQ(gauge.used(), 0);
  EXPECT_EQ(gauge.peak(), 300);
}

TEST(InOrderDelivery, AdmissionPastTheDepthWaitsAndAFailureReleasesIt) {
  BudgetGauge gauge;
  std::stop_source stop;
  auto d = Delivery::Make(Schedule::kSequential, Options(10, 2), gauge, stop);
  ASSERT_TRUE(d->Admit(0, 1, 1));
  ASSERT_TRUE(d->Admit(1, 1, 1));
  bool admitted = true;
  std::thread driver([&] { admitted = d->Admit(2, 1, 1); });  // a third: the window is full
  d->Fail(Status::Internal("stop"));
  driver.join();
  EXPECT_FALSE(admitted);  // it waited, and the failure ended the wait
  EXPECT_TRUE(stop.stop_requested());
  EXPECT_EQ(d->Next().status().code(), StatusCode::kInternal);
}

// Spins (no sleep) until `ready`: a thread observed to have reached a wait.
template <typename Pred>
void Until(Pred ready) {
  while (!ready()) std::this_thread::yield();
}

// A delivery of a 1000-byte batch budget and `cpu_threads` threads, batches 0-2 admitted
// at 300 bytes each.
std::unique_ptr<Delivery> ThreeBatchesOf300(BudgetGauge& gauge, std::stop_source& stop,
                                            int cpu_threads) {
  DeliveryOptions o = Options(3, 3);
  o.batch_budget_bytes = 1000;
  o.cpu_threads = cpu_threads;
  auto d = Delivery::Make(Schedule::kSequential, o, gauge, stop);
  for (int64_t j = 0; j < 3; ++j) {
    EXPECT_EQ(d->NextToStart(), j);
    EXPECT_TRUE(d->Admit(j, 300, 4));
  }
  return d;
}

TEST(InOrderDelivery, RowsPastTheBudgetWaitUnlessTheirBatchIsTheOldestOrTheOldestNeedsTheirThread) {
  BudgetGauge gauge;
  std::stop_source stop;
  auto d = ThreeBatchesOf300(gauge, stop, /*cpu_threads=*/1);
  std::atomic<int64_t> queued{-1};  // the batch of the sample queued first (-1: none)
  d->set_first_queued([&]() -> std::optional<int64_t> {
    const int64_t q = queued.load();
    return q < 0 ? std::nullopt : std::optional<int64_t>(q);
  });
  EXPECT_TRUE(d->HoldRows(1, 50));  // fits: charged at once
  EXPECT_EQ(gauge.used(), 950);
  EXPECT_TRUE(d->HoldRows(0, 500));  // past the budget, but batch 0 is the oldest
  EXPECT_EQ(gauge.used(), 1450);
  EXPECT_EQ(d->Metrics().rows_waits, 0);

  std::atomic<bool> held{false};
  std::thread pool_thread([&] { held = d->HoldRows(1, 200); });
  Until([&] { return d->Metrics().rows_waits == 1; });  // over the budget, not the oldest
  queued = 2;  // a later batch's sample queued: it would wait too
  d->Queued();
  EXPECT_FALSE(held.load());
  queued = 0;  // the oldest batch's sample waits for the pool's only thread
  d->Queued();
  pool_thread.join();
  EXPECT_TRUE(held.load());
  EXPECT_EQ(gauge.used(), 1650);
  queued = -1;

  held = false;
  std::thread second([&] { held = d->HoldRows(2, 900); });
  Until([&] { return d->Metrics().rows_waits == 2; });
  d->Ready(0, MakeBatch(0, 4), 800, 800);
  d->Ready(1, MakeBatch(1, 4), 550, 550);
  // Batch 2 is the oldest in production, but the consumer takes 0 and 1 first: their
  // memory goes then, and batch 2's rows wait for it.
  ASSERT_TRUE(d->Next().ok());
  EXPECT_EQ(gauge.used(), 850);
  EXPECT_FALSE(held.load());
  ASSERT_TRUE(d->Next().ok());  // 300 charged: 900 more do not fit, but 2 is needed now
  second.join();
  EXPECT_TRUE(held.load());
  EXPECT_EQ(gauge.used(), 1200);
  EXPECT_GT(d->Metrics().rows_wait_s, 0.0);
}

TEST(InOrderDelivery, RowsWaitingForTheBudgetGoOnWhenTheConsumerTakesABatchAndStopWithTheRun) {
  BudgetGauge gauge;
  std::stop_source stop;
  auto d = ThreeBatchesOf300(gauge, stop, /*cpu_threads=*/4);
  d->Ready(0, MakeBatch(0, 4), 300, 600);  // assembled past its estimate: 1200 charged
  bool held = false;
  std::thread first([&] { held = d->HoldRows(2, 300); });
  Until([&] { return d->Metrics().rows_waits == 1; });
  ASSERT_TRUE(d->Next().ok());  // batch 0 delivered: 600 charged, 300 more fit
  first.join();
  EXPECT_TRUE(held);
  EXPECT_EQ(gauge.used(), 900);
  bool stopped_held = true;
  std::thread second([&] { stopped_held = d->HoldRows(2, 500); });
  Until([&] { return d->Metrics().rows_waits == 2; });
  d->Fail(Status::Cancelled("the run was cancelled"));
  second.join();
  EXPECT_FALSE(stopped_held);  // the wait ended with the run, nothing charged
  EXPECT_EQ(gauge.used(), 900);
}

TEST(InOrderDelivery, TheErrorBudgetStopsTheRunAtTheBatchThatPassesIt) {
  BudgetGauge gauge;
  std::stop_source stop;
  auto d = Delivery::Make(Schedule::kSequential, Options(3, 3), gauge, stop);
  for (int64_t j = 0; j < 3; ++j) ASSERT_TRUE(d->Admit(j, 1, 4));
  d->Ready(0, MakeBatch(0, 4), 1, 1);
  d->Ready(1, MakeBatch(1, 2, 2), 1, 1);  // 2 of 8 failed: 25%, at the limit
  d->Ready(2, MakeBatch(2, 2, 2), 1, 1);  // 4 of 12: over it
  EXPECT_TRUE(d->Next().ok());
  EXPECT_TRUE(d->Next().ok());
  const auto third = d->Next();
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(stop.stop_requested());
  EXPECT_EQ(d->Metrics().counts.failed, 4);
}

TEST(InOrderDelivery, TheSourcesSkippedShardsAreCountedOnceWithTheFirstBatch) {
  BudgetGauge gauge;
  std::stop_source stop;
  DeliveryOptions o = Options(4, 4);
  o.batches_per_epoch = 2;
  o.start_batch = 1;  // a resumed run: its first batch carries them
  o.source_errors_batch = 1;
  o.budget.max_error_rate = 0.5;
  o.source_errors = {SampleError{0, 3, "/d/s-3.tar", Status::ShardError("shard 3 skipped")},
                     SampleError{0, 7, "/d/s-7.tar", Status::ShardError("shard 7 skipped")}};
  auto d = Delivery::Make(Schedule::kSequential, o, gauge, stop);
  for (int64_t j = 1; j < 4; ++j) {
    ASSERT_EQ(d->NextToStart(), j);
    ASSERT_TRUE(d->Admit(j, 1, 4));
    Batch b = MakeBatch(j, 4, j == 1 ? 1 : 0);
    b.epoch = j / 2;
    d->Ready(j, std::move(b), 1, 1);
  }
  auto first = d->Next();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status().ToString();
  ASSERT_EQ((*first)->errors.size(), 3u);  // the two shards, then the batch's own
  EXPECT_EQ((*first)->errors[0].uri, "/d/s-3.tar");
  EXPECT_EQ((*first)->errors[0].index, 3);
  EXPECT_EQ((*first)->errors[0].epoch, 0);
  EXPECT_EQ((*first)->errors[1].status.code(), StatusCode::kShardError);
  EXPECT_EQ((*first)->errors[2].status.code(), StatusCode::kCorruptData);
  for (int k = 0; k < 2; ++k) {
    auto next = d->Next();
    ASSERT_TRUE(next.ok() && next->has_value());
    EXPECT_TRUE((*next)->errors.empty());
  }
  const DeliveryMetrics m = d->Metrics();
  EXPECT_EQ(m.counts.failed, 3);
  EXPECT_EQ(m.counts.delivered, 12);
  EXPECT_EQ(m.errors_by_kind.at("shard_error"), 2);
}

TEST(InOrderDelivery, SkippedShardsCountAgainstTheErrorBudget) {
  BudgetGauge gauge;
  std::stop_source stop;
  DeliveryOptions o = Options(2, 2);
  o.budget.max_error_rate = 0.1;
  o.source_errors = {SampleError{0, 0, "/d/s-0.tar", Status::ShardError("shard 0 skipped")}};
  auto d = Delivery::Make(Schedule::kSequential, o, gauge, stop);
  ASSERT_TRUE(d->Admit(0, 1, 4));
  d->Ready(0, MakeBatch(0, 4), 1, 1);  // 1 of 5 failed: 20%
  const auto first = d->Next();
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(first.status().message().find("shard_error=1"), std::string::npos)
      << first.status().ToString();
  EXPECT_NE(first.status().message().find("/d/s-0.tar"), std::string::npos)
      << first.status().ToString();
}

TEST(InOrderDelivery, SamplesLostAfterDeliveryCountAgainstTheBudgetAndStopTheRun) {
  BudgetGauge gauge;
  std::stop_source stop;
  DeliveryOptions o = Options(3, 3);
  o.budget.max_error_rate = 0.1;
  o.budget.min_samples = 100;  // only an epoch's end decides
  auto d = Delivery::Make(Schedule::kSequential, o, gauge, stop);
  for (int64_t j = 0; j < 3; ++j) {
    ASSERT_TRUE(d->Admit(j, 1, 10));
    d->Ready(j, MakeBatch(j, 10), 1, 1);
  }
  ASSERT_TRUE(d->Next().ok());
  // A packer left one sample of batch 0 out and cut another; a plan left a third out.
  const std::vector<LostSample> lost = {
      {SampleError{0, 1, "a", Status::PackSkipped("too long")}, true},
      {SampleError{0, 2, "b", Status::PackTruncated("cut")}, true},
      {SampleError{0, 40, "c", Status::PackSkipped("too long")}, false}};
  EXPECT_TRUE(d->CountLost(lost, /*at_end=*/false).ok()) << "under min_samples";
  DeliveryMetrics m = d->Metrics();
  EXPECT_EQ(m.counts.delivered, 8);
  EXPECT_EQ(m.counts.failed, 3);
  EXPECT_EQ(m.errors_by_kind.at("pack_skipped"), 2);
  EXPECT_EQ(m.errors_by_kind.at("pack_truncated"), 1);
  ASSERT_EQ(m.first_errors.size(), 3u);
  // At the epoch's end: 3 of 31 (9.7%) passes; one more lost sample does not.
  ASSERT_TRUE(d->Next().ok());
  ASSERT_TRUE(d->Next().ok());
  EXPECT_TRUE(d->CountLost({}, /*at_end=*/true).ok());
  const std::vector<LostSample> more = {
      {SampleError{0, 25, "d", Status::PackTruncated("cut")}, true}};
  const Status spent = d->CountLost(more, /*at_end=*/true);
  EXPECT_EQ(spent.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(spent.message().find("4 of 31 samples failed"), std::string::npos) << spent.ToString();
  EXPECT_NE(spent.message().find("pack_skipped=2 pack_truncated=2"), std::string::npos);
  EXPECT_TRUE(stop.stop_requested());
  EXPECT_EQ(d->Next().status().code(), StatusCode::kResourceExhausted) << "the run stopped";
}

TEST(InOrderDelivery, WithTheConsumerCountingLossesAnEpochsEndIsItsVerdict) {
  // A packer's losses of the epoch's last batch are counted after its delivery: the
  // verdict waits for them, so that the message counts every one.
  BudgetGauge gauge;
  std::stop_source stop;
  DeliveryOptions o = Options(1, 1);
  o.budget.max_error_rate = 0.1;
  o.budget.min_samples = 100;
  o.consumer_counts_losses = true;
  auto d = Delivery::Make(Schedule::kSequential, o, gauge, stop);
  ASSERT_TRUE(d->Admit(0, 1, 4));
  d->Ready(0, MakeBatch(0, 3, 1), 1, 1);  // 1 of 4 failed: over the rate
  ASSERT_TRUE(d->Next().ok()) << "not the delivery's verdict";
  const std::vector<LostSample> lost = {
      {SampleError{0, 1, "a", Status::PackSkipped("too long")}, true}};
  const Status spent = d->CountLost(lost, /*at_end=*/true);
  EXPECT_EQ(spent.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(spent.message().find("2 of 4 samples failed"), std::string::npos) << spent.ToString();
}

TEST(OnDemandDelivery, BatchZeroCarriesTheSkippedShardsWhoeverTakesIt) {
  BudgetGauge gauge;
  std::stop_source stop;
  DeliveryOptions o = Options(3, 3);
  o.source_errors = {SampleError{0, 1, "/d/p-1.parquet", Status::ShardError("file 1 skipped")}};
  auto d = Delivery::Make(Schedule::kOnDemand, o, gauge, stop);
  for (const int64_t j : {2, 0}) {
    ASSERT_TRUE(d->Submit(j).ok());
    ASSERT_EQ(d->NextToStart(), j);
    ASSERT_TRUE(d->Admit(j, 1, 4));
    d->Ready(j, MakeBatch(j, 4), 1, 1);
  }
  const auto two = d->Take(2);
  ASSERT_TRUE(two.ok());
  EXPECT_TRUE(two->errors.empty());
  const auto zero = d->Take(0);
  ASSERT_TRUE(zero.ok());
  ASSERT_EQ(zero->errors.size(), 1u);
  EXPECT_EQ(zero->errors[0].uri, "/d/p-1.parquet");
}

TEST(OnDemandDelivery, OnlySubmittedBatchesStartAndEachIsTakenOnce) {
  BudgetGauge gauge;
  std::stop_source stop;
  auto d = Delivery::Make(Schedule::kOnDemand, Options(10, 4), gauge, stop);
  EXPECT_EQ(d->Next().status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(d->Submit(10).code(), StatusCode::kInvalidArgument);  // outside the run
  ASSERT_TRUE(d->Submit(7).ok());
  EXPECT_EQ(d->Submit(7).code(), StatusCode::kInvalidArgument);  // not yet taken
  ASSERT_TRUE(d->Submit(3).ok());
  EXPECT_EQ(d->NextToStart(), 7);
  EXPECT_EQ(d->NextToStart(), 3);
  ASSERT_TRUE(d->Admit(7, 1, 1));
  ASSERT_TRUE(d->Admit(3, 1, 1));
  d->Ready(3, MakeBatch(3, 1), 1, 1);
  d->Ready(7, MakeBatch(7, 1), 1, 1);
  EXPECT_EQ(d->Take(3)->global_index, 3);
  EXPECT_EQ(d->Take(3).status().code(), StatusCode::kInvalidArgument);  // taken already
  EXPECT_EQ(d->Take(7)->global_index, 7);
  std::optional<int64_t> after_stop = 0;
  std::thread driver([&] { after_stop = d->NextToStart(); });  // waits for a submission
  d->Fail(Status::Cancelled("the run was cancelled"));
  driver.join();
  EXPECT_EQ(after_stop, std::nullopt);
}

}  // namespace delivery_test
}  // namespace headrace
