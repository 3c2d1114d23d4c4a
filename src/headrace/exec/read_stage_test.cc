#include "headrace/exec/read_stage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <latch>
#include <mutex>
#include <thread>

#include "headrace/formats/source.h"

namespace headrace {
namespace read_stage_test {

// A storage whose objects are `size` bytes, answered by a thread of its own in arrival
// order; records the most reads it ever held at once (issued, completion not yet called).
class QueuedStorage final : public Storage {
 public:
  // `honour_gate` false: the storage reads the object whole without asking the gate, as
  // a backend that cannot know a size in advance may.
  explicit QueuedStorage(int64_t size, bool honour_gate = true)
      : size_(size), honour_gate_(honour_gate), thread_([this] { Serve(); }) {}
  ~QueuedStorage() override {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void ReadAsync(std::string uri, ReadCallback done) override {
    ReadAsyncGated(std::move(uri), std::move(done), nullptr);
  }
  void ReadAsyncGated(std::string, ReadCallback done, ReadGate gate) override {
    std::lock_guard lock(mu_);
    queue_.push_back({std::move(done), std::move(gate)});
    most_ = std::max<int>(most_, static_cast<int>(queue_.size()) + serving_);
    cv_.notify_all();
  }
  std::string_view name() const override { return "queued"; }
  int most() const {
    std::lock_guard lock(mu_);
    return most_;
  }

 private:
  void Serve() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return done_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto [done, gate] = std::move(queue_.front());
      queue_.pop_front();
      ++serving_;
      lock.unlock();
      const bool refused = honour_gate_ && gate && !gate(size_);
      // A read is in flight until its completion is called (which may issue the next).
      lock.lock();
      --serving_;
      lock.unlock();
      if (refused) {
        done(Status::Cancelled("refused"));
      } else {
        done(*Buffer::Allocate(static_cast<size_t>(size_)));
      }
      lock.lock();
    }
  }

  const int64_t size_;
  const bool honour_gate_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<ReadCallback, ReadGate>> queue_;
  int serving_ = 0;
  int most_ = 0;
  bool done_ = false;
  std::thread thread_;
};

// A job of `n` samples with one media item each.
std::shared_ptr<BatchJob> Job(int n, std::vector<SampleRecord>& records) {
  auto job = std::make_shared<BatchJob>();
  records.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    records[i].media = {MediaRef{0, "object" + std::to_string(i)}};
    job->records.push_back(&records[i]);
    job->sample_indices.push_back(i);
  }
  return job;
}

// What the stage handed on: each sample's status and charge, the charges held until the
// test releases them.
struct Received {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Status> statuses;
  std::deque<int64_t> held;
  int64_t most_used = 0;
};

// Waits for each of `n` samples the stage hands on, in order, and releases its charge as
// the chain stage would; returns the charges.
std::vector<int64_t> ReleaseEach(Received& got, ReadStage& stage, int n) {
  std::vector<int64_t> charges;
  for (int released = 0; released < n; ++released) {
    {
      std::unique_lock lock(got.mu);
      got.cv.wait(lock, [&] { return !got.held.empty(); });
      charges.push_back(got.held.front());
      got.held.pop_front();
    }
    stage.Release(charges.back());
  }
  return charges;
}

TEST(ReadStage, NeverHoldsMoreThanIoInflightReads) {
  std::vector<SampleRecord> records;
  auto job = Job(40, records);
  auto storage = std::make_shared<QueuedStorage>(10);
  BudgetGauge gauge;
  std::stop_source stop;
  Received got;
  ReadStage* stage_ptr = nullptr;
  ReadStage stage(storage, ReadStageOptions{.io_inflight = 3, .io_budget_bytes = 1 << 20}, gauge,
                  stop.get_token(),
                  [&](const std::shared_ptr<BatchJob>&, int, Result<std::vector<Buffer>> bytes,
                      int64_t charged) {
                    stage_ptr->Release(charged);
                    std::lock_guard lock(got.mu);
                    got.statuses.push_back(bytes.status());
                    got.cv.notify_all();
                  });
  stage_ptr = &stage;
  for (int s = 0; s < 40; ++s) stage.Issue(job, s);
  std::unique_lock lock(got.mu);
  got.cv.wait(lock, [&] { return got.statuses.size() == 40; });
  for (const Status& s : got.statuses) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_LE(storage->most(), 3);
  EXPECT_EQ(stage.bytes_read(), 400);
}

TEST(ReadStage, TheChargeStaysWithinTheIoBudgetWhileTheConsumerHoldsBytes) {
  std::vector<SampleRecord> records;
  auto job = Job(6, records);
  auto storage = std::make_shared<QueuedStorage>(60);
  BudgetGauge gauge;
  std::stop_source stop;
  Received got;
  ReadStage stage(storage, ReadStageOptions{.io_inflight = 8, .io_budget_bytes = 100}, gauge,
                  stop.get_token(),
                  [&](const std::shared_ptr<BatchJob>&, int, Result<std::vector<Buffer>> bytes,
                      int64_t charged) {
                    std::lock_guard lock(got.mu);
                    got.statuses.push_back(bytes.status());
                    got.held.push_back(charged);
                    got.most_used = std::max(got.most_used, gauge.used());
                    got.cv.notify_all();
                  });
  // The driver issues every sample; only one 60-byte object fits the 100-byte budget at
  // a time, so each Issue after the first waits until the test releases the one held.
  std::thread driver([&] {
    for (int s = 0; s < 6; ++s) stage.Issue(job, s);
  });
  EXPECT_EQ(ReleaseEach(got, stage, 6), std::vector<int64_t>(6, 60));
  driver.join();
  EXPECT_EQ(got.statuses.size(), 6u);
  EXPECT_LE(got.most_used, 100);
  EXPECT_LE(gauge.peak(), 100);
  EXPECT_EQ(gauge.used(), 0);
}

TEST(ReadStage, AStoppedRunIssuesNothingAndCancelsTheSample) {
  std::vector<SampleRecord> records;
  auto job = Job(1, records);
  auto storage = std::make_shared<QueuedStorage>(10);
  BudgetGauge gauge;
  std::stop_source stop;
  std::vector<Status> statuses;
  ReadStage stage(storage, ReadStageOptions{}, gauge, stop.get_token(),
                  [&](const std::shared_ptr<BatchJob>&, int, Result<std::vector<Buffer>> bytes,
                      int64_t) { statuses.push_back(bytes.status()); });
  stop.request_stop();
  stage.Issue(job, 0);
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_EQ(statuses[0].code(), StatusCode::kCancelled);
  EXPECT_EQ(storage->most(), 0);
  EXPECT_EQ(stage.reads_inflight(), 0);
}

// An object larger than the whole I/O budget can never be admitted: its sample fails at
// the size gate, naming the object, its size and the budget, with nothing allocated and
// the charge never past the budget; the samples after it are read as before.
TEST(ReadStage, MediaLargerThanTheWholeBudgetFailTheirSampleAtTheGate) {
  for (const bool honour_gate : {true, false}) {
    SCOPED_TRACE(honour_gate ? "the storage asks the gate" : "the storage ignores the gate");
    std::vector<SampleRecord> records;
    auto job = Job(3, records);
    auto storage = std::make_shared<QueuedStorage>(150, honour_gate);
    BudgetGauge gauge;
    std::stop_source stop;
    std::vector<Status> statuses;  // written by the storage's one thread, read after `ended`
    std::latch ended(3);
    ReadStage stage(storage, ReadStageOptions{.io_inflight = 1, .io_budget_bytes = 100}, gauge,
                    stop.get_token(),
                    [&](const std::shared_ptr<BatchJob>&, int, Result<std::vector<Buffer>> bytes,
                        int64_t) {
                      statuses.push_back(bytes.status());
                      ended.count_down();
                    });
    for (int s = 0; s < 3; ++s) stage.Issue(job, s);
    ended.wait();
    ASSERT_EQ(statuses.size(), 3u);
    for (const Status& st : statuses) {
      EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
      EXPECT_THAT(st.message(), ::testing::HasSubstr("'object"));
      EXPECT_THAT(st.message(), ::testing::HasSubstr("150 bytes"));
      EXPECT_THAT(st.message(), ::testing::HasSubstr("I/O budget of 100 bytes"));
    }
    if (honour_gate) EXPECT_LE(gauge.peak(), 100);  // refused before any byte was charged
    EXPECT_EQ(gauge.used(), 0);
    EXPECT_EQ(stage.reads_inflight(), 0);
  }
  // A storage whose objects are bounded elsewhere (the Parquet row-group cache): read alone.
  std::vector<SampleRecord> records;
  auto job = Job(2, records);
  auto storage = std::make_shared<QueuedStorage>(150);
  BudgetGauge gauge;
  std::stop_source stop;
  Received got;
  ReadStage stage(storage,
                  ReadStageOptions{.io_inflight = 1, .io_budget_bytes = 100, .fail_past_budget = false},
                  gauge, stop.get_token(),
                  [&](const std::shared_ptr<BatchJob>&, int, Result<std::vector<Buffer>> bytes,
                      int64_t charged) {
                    std::lock_guard lock(got.mu);
                    got.statuses.push_back(bytes.status());
                    got.held.push_back(charged);
                    got.cv.notify_all();
                  });
  std::thread driver([&] {
    for (int s = 0; s < 2; ++s) stage.Issue(job, s);
  });
  EXPECT_EQ(ReleaseEach(got, stage, 2), std::vector<int64_t>(2, 150));
  driver.join();
  for (const Status& st : got.statuses) EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_LE(gauge.peak(), 150);  // alone: never two at once
}

// A sample whose items fit one by one but not together fails at the item that passes the
// budget; a sample that fits is read whole.
TEST(ReadStage, ASampleWhoseItemsTogetherPassTheBudgetFails) {
  std::vector<SampleRecord> records(2);
  auto job = std::make_shared<BatchJob>();
  for (int i = 0; i < 2; ++i) {
    for (int item = 0; item < 2 + 2 * i; ++item) {  // 2 items of 40 bytes, then 4
      records[i].media.push_back(MediaRef{item, "s" + std::to_string(i) + "-" + std::to_string(item)});
    }
    job->records.push_back(&records[i]);
    job->sample_indices.push_back(i);
  }
  auto storage = std::make_shared<QueuedStorage>(40);
  BudgetGauge gauge;
  std::stop_source stop;
  Received got;
  std::vector<Status>& statuses = got.statuses;  // guarded by got.mu until read below
  std::vector<int64_t> charges;
  ReadStage stage(storage, ReadStageOptions{.io_inflight = 1, .io_budget_bytes = 100}, gauge,
                  stop.get_token(),
                  [&](const std::shared_ptr<BatchJob>&, int, Result<std::vector<Buffer>> bytes,
                      int64_t charged) {
                    std::lock_guard lock(got.mu);
                    statuses.push_back(bytes.status());
                    charges.push_back(charged);
                    got.cv.notify_all();
                  });
  const auto wait_for = [&](size_t n) {
    std::unique_lock lock(got.mu);
    got.cv.wait(lock, [&] { return statuses.size() >= n; });
  };
  stage.Issue(job, 0);
  wait_for(1);
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_TRUE(statuses[0].ok()) << statuses[0].ToString();
  EXPECT_EQ(charges[0], 80);
  stage.Release(charges[0]);
  stage.Issue(job, 1);
  wait_for(2);
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_EQ(statuses[1].code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(statuses[1].message(), ::testing::HasSubstr("media up to 's1-2' (120 bytes"));
  EXPECT_LE(gauge.peak(), 100);
  EXPECT_EQ(gauge.used(), 0);
}

}  // namespace read_stage_test
}  // namespace headrace
