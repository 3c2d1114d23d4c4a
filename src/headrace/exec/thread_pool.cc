#include "headrace/exec/thread_pool.h"

#include <sched.h>

#include <algorithm>

#include "headrace/core/clock.h"

namespace headrace {

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

ThreadPool::ThreadPool(int threads) {
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool ThreadPool::Submit(Task task, int64_t priority) {
  // Notify while holding the lock: once the task is queued it may run and let the
  // pool's owner destroy the pool, so Submit must not touch the pool after unlocking.
  MutexLock lock(mu_);
  if (stopping_) return false;
  queue_.push_back(Queued{priority, submitted_++, std::move(task)});
  std::push_heap(queue_.begin(), queue_.end(), RunsLater{});
  first_queued_.store(queue_.front().priority);
  cv_.notify_one();
  if (on_queued_) on_queued_();
  return true;
}

std::optional<int64_t> ThreadPool::FirstQueued() const {
  const int64_t first = first_queued_.load();
  if (first == kNoneQueued) return std::nullopt;
  return first;
}

void ThreadPool::WorkerLoop() {
  MutexLock lock(mu_);
  while (true) {
    const auto wait_start = Clock::now();
    cv_.wait(lock, [this]() HR_LOCKED_LAMBDA { return stopping_ || !queue_.empty(); });
    idle_ns_ += NanosSince(wait_start);
    if (queue_.empty()) return;  // stopping, and everything queued has run
    std::pop_heap(queue_.begin(), queue_.end(), RunsLater{});
    Task task = std::move(queue_.back().task);
    queue_.pop_back();
    first_queued_.store(queue_.empty() ? kNoneQueued : queue_.front().priority);
    lock.unlock();
    const auto run_start = Clock::now();
    task();
    const int64_t ran = NanosSince(run_start);
    task = nullptr;  // destroy captures outside the lock
    lock.lock();
    busy_ns_ += ran;
  }
}

double ThreadPool::busy_seconds() const {
  MutexLock lock(mu_);
  return busy_ns_ * 1e-9;
}

double ThreadPool::idle_seconds() const {
  MutexLock lock(mu_);
  return idle_ns_ * 1e-9;
}

}  // namespace headrace
