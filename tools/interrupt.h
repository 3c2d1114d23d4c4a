// InterruptWatcher: SIGINT and SIGTERM as a clean stop of a command's run.
//
// For its lifetime it handles SIGINT and SIGTERM. The handler only writes the signal's
// number to a pipe (async-signal-safe); the watcher's own thread reads it and does the
// rest, where locking and allocating are allowed:
// - the first signal is recorded (signal()), wakes every WaitFor(), and runs the stop
//   function when one is set (e.g. Loader::Cancel, which gets a blocked Next() out);
// - a second signal ends the process at once with 128 + its number: the way out of a
//   stop that takes too long.
// A signal the process ignores when the watcher starts (a shell's background job) stays
// ignored. The destructor restores the previous handlers and joins the thread. One
// watcher at a time per process.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "headrace/core/clock.h"

namespace headrace::tools {

class InterruptWatcher {
 public:
  InterruptWatcher();
  ~InterruptWatcher();
  InterruptWatcher(const InterruptWatcher&) = delete;
  InterruptWatcher& operator=(const InterruptWatcher&) = delete;

  // What the first signal runs, on the watcher's thread; runs it at once when a signal
  // came already. Clear it (nullptr) before what it refers to goes away.
  void SetStop(std::function<void()> stop);
  // 0 until a signal came, then SIGINT or SIGTERM (the first).
  int signal() const { return signal_.load(); }
  // Waits `duration`, or less when a signal comes; true when one came.
  bool WaitFor(Clock::duration duration);

 private:
  void Loop();

  int pipe_[2] = {-1, -1};
  std::atomic<int> signal_{0};
  std::mutex mu_;
  std::condition_variable cv_;  // a signal came
  std::function<void()> stop_;  // guarded by mu_
  std::thread thread_;
};

// "SIGINT", "SIGTERM", or "signal N".
const char* SignalName(int signal);

}  // namespace headrace::tools
