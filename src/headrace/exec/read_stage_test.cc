#include "headrace/exec/read_stage.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "headrace/formats/source.h"

namespace headrace {
namespace read_stage_test {

// A storage whose objects are `size` bytes, answered by a thread of its own in arrival
// order; records the most reads it ever held at once (issued, completion not yet called).
class QueuedStorage final : public Storage {
 public:
  explicit QueuedStorage(int64_t size) : size_(size), thread_([this] { Serve(); }) {}
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
      const bool refused = gate && !gate(size_);
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
  for (int released = 0; released < 6; ++released) {
    int64_t charged = 0;
    {
      std::unique_lock lock(got.mu);
      got.cv.wait(lock, [&] { return !got.held.empty(); });
      charged = got.held.front();
      got.held.pop_front();
    }
    EXPECT_EQ(charged, 60);
    stage.Release(charged);
  }
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

}  // namespace read_stage_test
}  // namespace headrace
