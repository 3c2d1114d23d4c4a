// ThreadPool: a fixed set of CPU worker threads draining one queue of tasks, lowest
// priority value first, in submission order among equal priorities (a FIFO when every
// task has the default).
//
// The pool owns its threads; operators never do. Tasks run start to finish on one
// thread and must not block on other tasks of the same pool (a sample that waits for
// memory, Delivery::HoldRows, stops waiting when every thread waits and the task queued
// first must run for the others to go on). Each worker accounts the
// time it spends running tasks (busy) and waiting for one (idle), which the executor
// reports as the CPU stage's busy and starved time.
//
// Shutdown (the destructor) stops accepting tasks, lets the workers finish the tasks
// already queued, and joins them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "headrace/exec/thread_annotations.h"

namespace headrace {

class ThreadPool {
 public:
  using Task = std::function<void()>;

  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task`. Returns false (and drops the task) once shutdown has begun.
  bool Submit(Task task, int64_t priority = 0);

  int size() const { return static_cast<int>(threads_.size()); }
  // The priority of the task that runs next (nullopt: none is queued), read without the
  // pool's lock (as of the last Submit or the last task taken).
  std::optional<int64_t> FirstQueued() const;
  // Called after each task is queued, under the pool's lock (so before any worker can
  // run it and let the pool's owner go): quick, and it must not call into the pool. Who
  // waits for a task to be queued locks its own mutex in it, and reads FirstQueued under
  // that mutex. Set before the first Submit.
  void set_on_queued(std::function<void()> on_queued) { on_queued_ = std::move(on_queued); }
  // Seconds all workers together spent running tasks / waiting for tasks.
  double busy_seconds() const;
  double idle_seconds() const;

 private:
  void WorkerLoop();

  struct Queued {
    int64_t priority;
    uint64_t sequence;  // submission order among equal priorities
    Task task;
  };
  // std::push_heap's order: the top is the lowest (priority, sequence).
  struct RunsLater {
    bool operator()(const Queued& a, const Queued& b) const {
      return a.priority != b.priority ? a.priority > b.priority : a.sequence > b.sequence;
    }
  };

  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::vector<Queued> queue_ HR_GUARDED_BY(mu_);  // a heap (RunsLater)
  // queue_'s top priority (kNoneQueued: empty), written under mu_.
  static constexpr int64_t kNoneQueued = INT64_MAX;
  std::atomic<int64_t> first_queued_{kNoneQueued};
  std::function<void()> on_queued_;
  uint64_t submitted_ HR_GUARDED_BY(mu_) = 0;
  bool stopping_ HR_GUARDED_BY(mu_) = false;
  int64_t busy_ns_ HR_GUARDED_BY(mu_) = 0;
  int64_t idle_ns_ HR_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

// Number of CPUs this process may run on (sched_getaffinity), at least 1.
int AvailableCores();

}  // namespace headrace
