// Delivery: which batches the driver starts, when one may be admitted, and how the
// consumer collects them. Two policies over one admission window and reorder window:
//
//   InOrderDelivery  (Schedule::kSequential): every batch of the run from start_batch
//                    on; Next() hands them to one consumer in order, counting their errors
//                    against the run's error budget and a blend entry's (exec/run_budget.h).
//   OnDemandDelivery (Schedule::kOnDemand, a Ray worker): only the batches Submit()
//                    names, in submission order; Take(k) collects batch k from any thread.
//                    The budget is not applied: the errors travel in the batch and its
//                    consumer owns the run's budget (a Ray rank: RunBudget::Tally).
//
// Admission (both): at most `prefetch_depth` batches admitted and not yet delivered, and
// their buffers within `batch_budget_bytes` (or nothing else admitted: progress). A
// delivered batch leaves the window. The first fatal error (Fail) stops the run: the
// driver's waits return, the consumer's calls return it.
//
// A batch is admitted with an estimate of its concatenated rows (the mean so far); a
// sample whose size pass tells more rows than that estimate leaves for it waits for them
// to fit the batch budget (HoldRows), before it decodes anything, on its pool thread.
// So that the run always progresses, a sample of the batch the consumer needs first
// never waits (in order: the oldest in production, unless an older one is ready and
// the consumer's taking it frees memory; on demand: the oldest in production), and when
// every pool thread waits while a sample of that batch is queued for one, one of the
// waits ends (its sample goes on past the budget, then its thread takes the queued
// one).
//
// Threads: the driver calls NextToStart/Admit; the chain's threads call Ready, Dropped
// and HoldRows; the consumer calls the rest (Submit/Take from any thread). Waits return
// when the run stops.
#pragma once

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stop_token>

#include "headrace/core/batch.h"
#include "headrace/core/clock.h"
#include "headrace/core/histogram.h"
#include "headrace/exec/budget_gauge.h"
#include "headrace/exec/error_budget.h"
#include "headrace/exec/run_budget.h"
#include "headrace/exec/stage.h"
#include "headrace/exec/thread_annotations.h"

namespace headrace {

// Which batches the driver admits, and how the consumer collects them.
enum class Schedule {
  // Every batch of the run from start_batch on, in order; Next() delivers them in order.
  kSequential,
  // Only the batches Submit() names, in submission order; Take(k) collects batch k.
  kOnDemand,
};

struct DeliveryOptions {
  int prefetch_depth = 4;
  int cpu_threads = 1;  // the pool's threads, which call HoldRows
  int64_t batch_budget_bytes = 1 << 30;
  int64_t start_batch = 0;     // counted from the start of the run
  int64_t total_batches = 0;   // EpochOrder::total_batches()
  int64_t batches_per_epoch = 1;  // this rank's
  bool deliver_empty_batches = false;
  // The error budget (exec/run_budget.h); its blend entries apply with entry_of.
  RunBudgetOptions budget;
  // EngineOptions::consumer_counts_losses: Next() leaves an epoch's end to CountLost.
  bool consumer_counts_losses = false;
  // Errors that belong to no sample: the source's shards or files skipped whole at open
  // (formats/source.h, BadShard), each one error of its own kind. Batch
  // `source_errors_batch` carries them, first in its errors with its epoch, so they are
  // counted once, in batch order, like any other: the run's first batch in order (its
  // start batch), batch 0 on demand (taken once in the whole run, whichever worker).
  std::vector<SampleError> source_errors;
  int64_t source_errors_batch = 0;
  // A blend (source.mix): each sample's entry (Source::EntryOf). Each entry's samples
  // and errors are then counted apart (budget.entries, entry_max_error_rate), in batch
  // order, and an entry past its own rate stops the run as the run's rate does.
  EntryOf entry_of;
};

// The delivery's counts, for the engine's metrics.
struct DeliveryMetrics {
  int64_t samples_attempted = 0;  // admitted
  ErrorCounts counts;             // delivered and failed
  int64_t batches_delivered = 0;
  int64_t batches_ready = 0;
  double admit_blocked_s = 0;  // admission waits while the consumer was not waiting
  double queue_fill = 0;       // ready batches over the depth, at each Next()
  HistogramSnapshot next_wait;
  std::map<std::string, int64_t> errors_by_kind;
  std::vector<SampleError> first_errors;
  std::vector<EntryCounts> entries;  // a blend's, per entry; empty otherwise
  // How shuffled the delivered batches are: the distance in dataset order between
  // neighbours in a batch (|index[r + 1] - index[r]|), summed, and the pairs counted.
  double neighbour_distance_sum = 0;
  int64_t neighbour_pairs = 0;
  // Samples whose told rows waited for room in the batch budget (HoldRows), and how long;
  // the threads waiting so now.
  int64_t rows_waits = 0;
  double rows_wait_s = 0;
  int rows_waiting = 0;
};

class Delivery {
 public:
  static std::unique_ptr<Delivery> Make(Schedule schedule, DeliveryOptions options,
                                        BudgetGauge& gauge, std::stop_source& stop);
  virtual ~Delivery() = default;

  // Driver: the next batch to start, waiting (on demand) for one to be submitted;
  // nullopt when there is none (the run's end, or it stopped).
  virtual std::optional<int64_t> NextToStart() = 0;
  // Driver: waits until batch `batch` of `bytes` (`samples` samples) fits the window;
  // false when the run stopped instead. The batch is in production until Ready or
  // Dropped.
  bool Admit(int64_t batch, int64_t bytes, int64_t samples);
  // A finished batch (any thread), admitted as `admitted` bytes and holding `bytes`,
  // which it is charged from now until delivered.
  void Ready(int64_t batch, Batch done, int64_t admitted, int64_t bytes);
  // A batch that will never be delivered (its run is stopping), its charge changed by
  // `delta` bytes.
  void Dropped(int64_t batch, int64_t delta);
  // A sample of batch `batch` in production (a pool thread, before the sample decodes
  // anything) will hold `bytes` more than its batch was admitted with: waits until they
  // fit the batch budget, unless the batch is the oldest in production or the queued
  // sample the others wait for needs this thread, then charges them to the batch. False
  // (nothing charged) when the run stopped instead.
  bool HoldRows(int64_t batch, int64_t bytes);
  // The batch of the sample queued first for a pool thread (nullopt: none), for
  // HoldRows, which reads it under the delivery's lock; set before the run starts. It
  // must not take a lock that is held while Queued is called.
  void set_first_queued(std::function<std::optional<int64_t>()> first_queued) {
    first_queued_ = std::move(first_queued);
  }
  // A task was queued for a pool thread (the pool, under its lock, after queueing it:
  // ThreadPool::set_on_queued).
  void Queued();
  // The charge of an admitted batch that will never be delivered (cancelled), or of
  // delivered bytes the consumer holds for the run (Engine::ChargeHeld), changed by
  // `delta` bytes.
  void Recharge(int64_t delta);
  // Stops the run with `status` as its failure, unless it failed already.
  void Fail(Status status);

  // Consumer: samples it lost after their batch was delivered (a packer's, in delivery
  // order), counted against the run's error budget and a blend entry's (RunBudget::
  // CountLost); the budget's verdict then (`at_end`: an epoch's end, the verdict point
  // with consumer_counts_losses), which stops the run as a spent budget at delivery does.
  Status CountLost(std::span<const LostSample> lost, bool at_end);

  // Consumer, in order (kInvalidArgument on the other policy).
  virtual Result<std::optional<Batch>> Next();
  virtual bool WaitReady(std::chrono::nanoseconds timeout);
  virtual int64_t next_batch() const;
  // Consumer, on demand (kInvalidArgument on the other policy).
  virtual Status Submit(int64_t batch);
  virtual Result<Batch> Take(int64_t batch);
  virtual bool WaitTakeable(int64_t batch, std::chrono::nanoseconds timeout);

  DeliveryMetrics Metrics() const;

 protected:
  Delivery(DeliveryOptions options, BudgetGauge& gauge, std::stop_source& stop);
  // Takes ready batch `batch` out of the window and counts it (errors into the budget).
  Batch DeliverLocked(int64_t batch) HR_REQUIRES(mu_);
  void FailLocked(Status status) HR_REQUIRES(mu_);
  void RechargeLocked(int64_t delta) HR_REQUIRES(mu_);
  // The batch in production whose samples never wait for memory (HoldRows), the one the
  // consumer needs first: the oldest in production (on demand: the consumer may take
  // any); nullopt when none is needed before the consumer frees memory.
  virtual std::optional<int64_t> NeededFirstLocked() const HR_REQUIRES(mu_);
  // The consumer's waits (inside Next/WaitReady: the consumer's wait time).
  template <typename Pred>
  bool ConsumerWaitLocked(MutexLock& lock, Pred ready,
                          std::optional<std::chrono::nanoseconds> timeout) HR_REQUIRES(mu_);
  int64_t ConsumerWaitNanosLocked() const HR_REQUIRES(mu_);

  const DeliveryOptions options_;
  BudgetGauge& gauge_;
  std::stop_source& stop_;
  mutable Mutex mu_;
  std::condition_variable_any driver_cv_;    // the window changed, or stop
  std::condition_variable_any consumer_cv_;  // a batch became ready, or stop / failure
  std::condition_variable_any rows_cv_;      // less charged, the oldest batch changed, or stop
  std::set<int64_t> producing_ HR_GUARDED_BY(mu_);  // admitted, not yet Ready or Dropped
  std::atomic<int> rows_waiting_{0};  // threads inside HoldRows' wait (changed under mu_)
  std::function<std::optional<int64_t>()> first_queued_;
  int64_t rows_waits_ HR_GUARDED_BY(mu_) = 0;
  int64_t rows_wait_ns_ HR_GUARDED_BY(mu_) = 0;
  Status failure_ HR_GUARDED_BY(mu_);        // the first fatal error
  int64_t admitted_ahead_ HR_GUARDED_BY(mu_) = 0;  // admitted, not delivered
  int64_t batch_bytes_ HR_GUARDED_BY(mu_) = 0;     // buffers of admitted batches
  struct ReadyBatch {
    Batch batch;
    int64_t bytes;  // charged to the batch budget until delivered
  };
  std::map<int64_t, ReadyBatch> ready_ HR_GUARDED_BY(mu_);  // the reorder window
  // The run's error budget and a blend's entries': counts errors as batches are delivered.
  RunBudget budget_ HR_GUARDED_BY(mu_);
  double neighbour_distance_sum_ HR_GUARDED_BY(mu_) = 0;
  int64_t neighbour_pairs_ HR_GUARDED_BY(mu_) = 0;
  int64_t samples_attempted_ HR_GUARDED_BY(mu_) = 0;
  int64_t batches_delivered_ HR_GUARDED_BY(mu_) = 0;
  // The consumer's wait accounting.
  struct ConsumerWait {
    bool waiting = false;
    Clock::time_point since;
    int64_t total_ns = 0;   // inside Next() waiting for a batch
    int64_t calls = 0;      // Next() and Take() calls
    double fill_sum = 0;    // ready batches over the depth, at each Next()
    int64_t admit_blocked_ns = 0;  // admission waits while the consumer was not waiting
  } wait_ HR_GUARDED_BY(mu_);
  LatencyHistogram next_wait_;  // per Next(): the consumer's wait for its batch
};

}  // namespace headrace
