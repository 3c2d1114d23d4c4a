// ConsumerClock: the consumer's wait accounting, one rule for every consumer: the C++
// Loader, a Ray rank's stream and the PyTorch adapter (through the bindings).
//
// A consumer asks for a batch at `call` and gets it (or the end of the run) at `now`.
// The first batch's wait is the cold start (time_to_first_batch_s, from the clock's
// creation), reported apart; after it, time inside the call is the consumer's wait and
// time between calls its own work (the training step). Times are seconds on any
// monotonic axis the caller keeps (steady_clock, Python's perf_counter). Not
// thread-safe: its owner guards it.
#pragma once

#include <cstdint>

namespace headrace {

// Wait accounting of the consumer, in seconds.
struct ConsumerStats {
  int64_t batches = 0;
  int64_t samples = 0;
  double time_to_first_batch_s = 0;  // from the clock's start to the first batch returned
  double wait_s = 0;                 // inside Next(), after the first batch
  double busy_s = 0;                 // between Next() calls, after the first batch
  double steady_s = 0;               // from the first batch returned to the last Next()
  double elapsed_s = 0;              // from the clock's start to the last Next()
  // wait_s / steady_s: the share of the loop spent waiting for data, cold start apart.
  double wait_time_ratio() const { return steady_s > 0 ? wait_s / steady_s : 0.0; }
};

class ConsumerClock {
 public:
  explicit ConsumerClock(double created_s) : created_s_(created_s) {}

  // A call that began at `call_s` returned at `now_s`: a batch of `samples` rows when
  // `got` (a batch with no rows holds a position and is not counted), else nothing
  // (the end of the run, an error).
  void Returned(double call_s, double now_s, bool got, int64_t samples);

  const ConsumerStats& stats() const { return stats_; }
  // Whether the first batch was returned (the cold start is over).
  bool started() const { return started_; }

 private:
  double created_s_;
  double first_batch_s_ = 0;
  double last_return_s_ = 0;
  bool started_ = false;
  ConsumerStats stats_;
};

}  // namespace headrace
