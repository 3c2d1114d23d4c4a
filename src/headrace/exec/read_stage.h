// ReadStage: a sample's media from storage, within the read capacity and the I/O budget.
//
//   driver: Issue(job, slot)  ── waits for capacity ──▶ storage->Read*AsyncGated(item 0)
//   storage thread: gate(size) (OnReadSize) ── swaps the reservation for the size, or
//                   refuses: the read is parked and issued again when it fits
//   storage thread: completion (OnRead) ── next item of the sample, or done(...)
//   chain stage, when done with the bytes: Release(charged)
//
// Contract (exec/engine.h states it for the whole engine):
// - At most `io_inflight` reads in flight. Bytes are charged to `io_budget_bytes` before
//   they exist, and the charge never exceeds it: a sample whose media cannot fit in the
//   whole budget (an object larger than it, a body of unknown length that grows past it,
//   items that together pass it) fails with kResourceExhausted naming the object, its
//   size so far and the budget, as soon as the gate sees that size (on completion, from
//   a storage that ignores the gate); unless `fail_past_budget` is false (a Parquet
//   source: its row groups are bounded by the row-group cache), then such an object is
//   read alone, with nothing else charged. A sample's first read is issued with a reservation (the
//   largest recent object, a maximum that decays by 1/16 per read so that one outlier
//   does not serialize the run; before the first size is known, one read at a time) only
//   when the charge plus the reservation fits, or nothing else is charged or in flight.
//   The storage's size gate swaps the reservation for the object's size before its bytes
//   are allocated, and refuses a first read that does not fit while other bytes are
//   charged; a refused read is parked and re-issued, ahead of new reads, as soon as its
//   size fits or nothing else is charged. A storage that ignores the gate is charged on
//   completion instead.
// - A sample's items are read one after another (the next when the previous is in), so a
//   sample holds at most one read in flight and only its first read ever waits for the
//   budget: the items after it are charged even past what the other samples leave (by at
//   most the rest of one sample, itself within the budget), which a sample that already
//   holds bytes could not wait for.
// - `done(job, slot, bytes, charged)` runs once per issued sample, on a storage thread (or
//   the caller's): with every item's bytes and their charge, which the receiver releases
//   (Release) when it is done with them; or with the sample's error (a failed read, or
//   kCancelled once the run stops), its charge already released.
// - Stop (the engine's stop token): Issue returns at once, parked reads end as
//   kCancelled, and the gate tells the storage that reads in flight are no longer wanted
//   (kReadStillWanted, io/storage.h), which ends them within ~0.1 s.
//
// Threads: Issue from the driver thread; the rest from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/clock.h"
#include "headrace/core/histogram.h"
#include "headrace/exec/batch_job.h"
#include "headrace/exec/budget_gauge.h"
#include "headrace/exec/stage.h"
#include "headrace/exec/thread_annotations.h"
#include "headrace/exec/trace.h"
#include "headrace/io/storage.h"

namespace headrace {

struct ReadStageOptions {
  int io_inflight = 32;
  int64_t io_budget_bytes = 64 << 20;
  int batch_size = 1;               // for the trace's per-sample ids
  TraceRecorder* trace = nullptr;   // read spans when set
  // true: media that cannot fit in the whole budget fail their sample (below). false: such
  // an object is read alone, nothing else charged (for a storage whose objects are
  // bounded by limits of their own: the Parquet row-group cache's groups).
  bool fail_past_budget = true;
  // The storage a sample's reads go through, by its dataset index (a blend's entries
  // each have their own: formats/source_mix.h); null, or a null answer: the stage's.
  std::function<Storage*(int64_t index)> route;
};

class ReadStage {
 public:
  using Done = std::function<void(const std::shared_ptr<BatchJob>& job, int slot,
                                  Result<std::vector<Buffer>> bytes, int64_t charged)>;

  ReadStage(std::shared_ptr<Storage> storage, ReadStageOptions options, BudgetGauge& gauge,
            std::stop_token stop, Done done);

  // Reads every media item of sample `slot` of `job` (its record has at least one).
  // Blocks until the first read may be issued, or the run stops (then done gets
  // kCancelled).
  void Issue(const std::shared_ptr<BatchJob>& job, int slot);
  // Releases `bytes` of the charge (a sample's, given to done) and issues the parked
  // reads that fit now.
  void Release(int64_t bytes);

  int reads_inflight() const;
  int64_t bytes_read() const;
  HistogramSnapshot latency() const { return latency_.Snapshot(); }
  // The stage's time split; `admit_blocked_s`: how long admission waited on the consumer
  // (counted as blocked, capped by the stage's idle time).
  StageMetrics Metrics(double elapsed_s, double admit_blocked_s) const;

 private:
  struct SampleReads;
  struct ReadCharge;
  struct ParkedRead {
    std::shared_ptr<BatchJob> job;
    int slot;
    std::shared_ptr<ReadCharge> charge;
  };

  // Whether a sample's first read, charging `bytes`, may be issued now.
  bool FitsLocked(int64_t bytes) const HR_REQUIRES(mu_);
  // Whether Issue may go on now; `waited_on_budget` set when the budget holds it.
  bool CanIssueLocked(bool& waited_on_budget) const HR_REQUIRES(mu_);
  void ChargeLocked(ReadCharge& charge, int64_t bytes) HR_REQUIRES(mu_);
  void AddUndecodedLocked(int64_t delta) HR_REQUIRES(mu_);
  void NoteSizeLocked(int64_t size) HR_REQUIRES(mu_);
  std::vector<ParkedRead> TakeParkedLocked() HR_REQUIRES(mu_);
  void RestartParked(std::vector<ParkedRead> reads);
  void Start(const std::shared_ptr<BatchJob>& job, int slot, std::shared_ptr<ReadCharge> charge);
  bool OnReadSize(ReadCharge& charge, int64_t size);
  void OnRead(const std::shared_ptr<BatchJob>& job, int slot,
              const std::shared_ptr<ReadCharge>& charge, Result<Buffer> bytes);
  int64_t TraceId(const BatchJob& job, int slot) const;
  // The error of a sample whose media cannot fit in the I/O budget (charge.too_large).
  Status TooLarge(const SampleRecord& record, const ReadCharge& charge) const;

  const std::shared_ptr<Storage> storage_;
  const ReadStageOptions options_;
  BudgetGauge& gauge_;
  const std::stop_token stop_;
  const Done done_;

  mutable Mutex mu_;
  std::condition_variable_any capacity_cv_;  // a read ended, a charge changed
  int reads_inflight_ HR_GUARDED_BY(mu_) = 0;
  // The I/O budget's charge: reads in flight and fetched bytes not yet released.
  int64_t undecoded_bytes_ HR_GUARDED_BY(mu_) = 0;
  int64_t read_estimate_ HR_GUARDED_BY(mu_) = -1;  // -1 until a size is known
  std::deque<ParkedRead> parked_ HR_GUARDED_BY(mu_);  // reads refused by their gate
  // Metrics.
  Clock::time_point busy_since_ HR_GUARDED_BY(mu_);
  int64_t busy_ns_ HR_GUARDED_BY(mu_) = 0;
  int64_t blocked_ns_ HR_GUARDED_BY(mu_) = 0;  // Issue waiting on the I/O budget
  int64_t reads_done_ HR_GUARDED_BY(mu_) = 0;
  double fill_sum_ HR_GUARDED_BY(mu_) = 0;
  int64_t bytes_read_ HR_GUARDED_BY(mu_) = 0;
  LatencyHistogram latency_;  // per media read: issue to bytes in (or failure)
};

}  // namespace headrace
