#include "headrace/exec/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

namespace headrace {
namespace {

TEST(ThreadPool, RunsEveryTaskOnItsWorkers) {
  std::atomic<int> ran{0};
  std::mutex mu;
  std::set<std::thread::id> ids;
  {
    ThreadPool pool(3);
    EXPECT_EQ(pool.size(), 3);
    std::latch all_started(3);
    // Three tasks that wait for each other can only finish on three distinct threads.
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(pool.Submit([&] {
        all_started.arrive_and_wait();
        std::lock_guard lock(mu);
        ids.insert(std::this_thread::get_id());
        ++ran;
      }));
    }
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(pool.Submit([&] { ++ran; }));
  }  // the destructor finishes queued tasks
  EXPECT_EQ(ran.load(), 103);
  EXPECT_EQ(ids.size(), 3u);
}

TEST(ThreadPool, RunsTheLowestPriorityFirstAndEqualOnesInSubmissionOrder) {
  ThreadPool pool(1);
  std::latch started(1);
  std::latch release(1);
  std::mutex mu;
  std::vector<int> order;
  // The one worker is held while the rest are queued, so the queue alone orders them.
  ASSERT_TRUE(pool.Submit([&] {
    started.count_down();
    release.wait();
  }));
  started.wait();
  const std::vector<std::pair<int, int64_t>> tasks = {{0, 5}, {1, 2}, {2, 5}, {3, 0},
                                                      {4, 2}, {5, 9}, {6, 0}};
  for (const auto& [id, priority] : tasks) {
    ASSERT_TRUE(pool.Submit(
        [&, id = id] {
          std::lock_guard lock(mu);
          order.push_back(id);
        },
        priority));
  }
  std::latch done(1);
  ASSERT_TRUE(pool.Submit([&] { done.count_down(); }, 100));
  release.count_down();
  done.wait();
  EXPECT_EQ(order, (std::vector<int>{3, 6, 1, 4, 0, 2, 5}));
}

TEST(ThreadPool, AccountsBusyAndIdleTime) {
  ThreadPool pool(1);
  std::latch done(1);
  ASSERT_TRUE(pool.Submit([&] {
    volatile double x = 0;
    for (int i = 0; i < 2000000; ++i) x = x + i;
    done.count_down();
  }));
  done.wait();
  // busy is added after the task returns: wait for the worker to get back to the queue.
  std::latch second(1);
  ASSERT_TRUE(pool.Submit([&] { second.count_down(); }));
  second.wait();
  EXPECT_GT(pool.busy_seconds(), 0.0);
  EXPECT_GE(pool.idle_seconds(), 0.0);
}

TEST(ThreadPool, ReportsAtLeastOneCore) { EXPECT_GE(AvailableCores(), 1); }

}  // namespace
}  // namespace headrace
