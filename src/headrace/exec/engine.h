// Engine: computes a rank's batches ahead of demand, in parallel, within a byte budget,
// and hands them to one consumer in batch order.
//
//   driver thread          storage threads          CPU pool (T threads)
//   admit batch j  ──read──▶ bytes of sample ──task──▶ op chain, start to finish,
//   (depth, budget)          (io_inflight,             last op writes the sample's
//                             io budget)               row of the batch buffer
//                                                            │ last sample done
//   consumer Next() ◀── reorder window (batches by index) ◀──┘
//
// Contract:
// - Batch j of the run is a pure function of (seed, epoch, batch index): its samples
//   come from EpochOrder, every random choice from the sample's key, and which thread
//   computed it changes nothing. Starting at batch k yields exactly the batches an
//   uninterrupted run yields from k on.
// - Admission is in batch order and bounded twice: at most `prefetch_depth` batches
//   are admitted and not yet delivered, and their buffers fit `batch_budget_bytes`.
//   Backpressure thus flows from the consumer up to the reads.
// - I/O budget: bytes are charged to `io_budget_bytes` before they exist, and the charge
//   never exceeds it unless one object alone does (then nothing else is charged):
//   a read is issued with a reservation (an estimate: the largest recent object, a
//   maximum that decays by 1/16 per read so that one outlier does not serialize the
//   run; before the first size is known, one read at a time) only when the charge plus
//   the reservation fits, or nothing else is charged or in flight (progress). The storage's size gate
//   (ReadGate) swaps the reservation for the object's size before the bytes are
//   allocated, and refuses the read if it does not fit while other bytes are charged;
//   a refused read is parked and re-issued, ahead of new reads, as soon as its size
//   fits or nothing else is charged. The charge is released when the chain is done
//   with the bytes. A storage that ignores the gate is charged on completion instead.
// - A failing sample is skipped: its batch is delivered without it (rows compacted),
//   the error is kept in Batch::errors and counted. A batch whose samples all fail is
//   not delivered (or delivered empty, with deliver_empty_batches). The run fails when errors exceed the error budget.
// - Next() is for one consumer thread. The destructor cancels: it stops admission,
//   lets in-flight reads and tasks finish (skipping their work), and joins every thread.
//   Reads already issued are told they are no longer wanted (the read gate answers
//   false to kReadStillWanted, io/storage.h): the storage ends them, retries and
//   first-byte waits included, within ~0.1 s.
// - Schedule::kOnDemand (a Ray worker, python/headrace/ray): the driver admits only the
//   batches Submit() names, in submission order, within the same two bounds, and each
//   is collected by Take(k), from any number of threads. An admitted batch holds its
//   place in the window until it is taken, so every submitted batch must be taken, and
//   a single thread taking more than prefetch_depth batches takes them in submission
//   order (a Ray worker takes each in the thread of the call that submitted it). Batch k is
//   the same bytes as batch k of a sequential run of the same options: the worker runs
//   with rank 0 of world size 1, so k is the run-wide batch index over all ranks
//   (epoch × batches per epoch + index in epoch). The error budget is not applied: the
//   batch's errors travel in it and the consumer owns the budget (the run's, not each
//   worker's).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "headrace/core/batch.h"
#include "headrace/core/buffer.h"
#include "headrace/core/clock.h"
#include "headrace/core/histogram.h"
#include "headrace/core/pooling_allocator.h"
#include "headrace/core/record_store.h"
#include "headrace/exec/epoch_order.h"
#include "headrace/exec/thread_pool.h"
#include "headrace/exec/trace.h"
#include "headrace/formats/source.h"
#include "headrace/io/storage.h"
#include "headrace/ops/chain_runner.h"
#include "headrace/ops/op.h"

namespace headrace {

struct EngineInputs {
  // The dataset (formats/source.h): its records per epoch, the storage its reads go
  // through, and how a sample's values are put in place once its media are read.
  std::shared_ptr<const Source> source;
  // The per-sample chain; Op::Run writes into the rows of `fields` (by position).
  std::vector<std::unique_ptr<Op>> ops;
  std::vector<FieldSpec> fields;
  // Slots of named values the chain uses (ops/value.h), and the source's values among
  // them, filled before the chain runs.
  int num_values = 0;
  std::vector<SourceValue> source_values;
  // Per-sample strings collected into Batch::strings, in this order: field -1 is the
  // record's id, else the Attribute values of that source field.
  struct StringField {
    std::string name;
    int field = -1;
    bool list = false;
  };
  std::vector<StringField> strings;
  // Per-batch steps, run in order on each complete batch before delivery.
  std::vector<std::unique_ptr<BatchOp>> batch_ops;
  // Whether samples need their media read before the chain runs (each item of
  // SampleRecord::media, whole objects or byte ranges): an op reads a media field, or
  // the source's values come with the reads (Source::values_need_reads).
  bool reads_media = true;
};

// Which batches the driver admits, and how the consumer collects them.
enum class Schedule {
  // Every batch of the run from start_batch on, in order; Next() delivers them in order.
  kSequential,
  // Only the batches Submit() names, in submission order; Take(k) collects batch k.
  kOnDemand,
};

struct EngineOptions {
  Schedule schedule = Schedule::kSequential;
  int cpu_threads = 1;
  int io_inflight = 32;
  int64_t io_budget_bytes = 64 << 20;
  int64_t batch_budget_bytes = 1 << 30;
  int prefetch_depth = 4;
  // Where to start: the rank-local batch `start_batch`, counted from the first batch of
  // epoch `start_epoch` (0: from the start of the run).
  int64_t start_epoch = 0;
  int64_t start_batch = 0;
  // A batch whose samples all failed is delivered with no rows (its errors inside)
  // instead of being skipped: for consumers that follow positions, such as a loader that
  // ends each epoch at its last batch. Skipping would make Next() run on into the next
  // epoch, and never return at all when every batch of an unbounded run fails.
  bool deliver_empty_batches = false;
  EpochOrderOptions order;
  // Error budget: fail once failed / attempted > max_error_rate, with at least
  // min_samples attempted (or at the end of each epoch).
  double max_error_rate = 0.05;
  int64_t min_samples = 100;
  int max_kept_errors = 20;  // errors kept in full in the metrics
  Allocator* allocator = DefaultAllocator();
  // Scratch memory (ops/op.h ScratchArena) each CPU thread keeps between samples; a
  // sample that needs more gets it, and it is freed when that sample ends. Outside
  // the two budgets above: the run report shows it (EngineMetrics::scratch_*).
  int64_t scratch_retain_bytes = int64_t{32} << 20;
  // Records reads and operator spans when set; must outlive the engine.
  TraceRecorder* trace = nullptr;
};

// Time split of one stage over the run, per unit of concurrency:
// busy + starved + blocked ~= elapsed (for "batch": the time until the last admission).
struct StageMetrics {
  std::string name;     // "read", "cpu", "batch"
  std::string kind;     // "io", "cpu", "assembly"
  int concurrency = 1;  // reads in flight allowed, CPU threads, ...
  int64_t items = 0;
  double busy_s = 0;     // doing its work
  double starved_s = 0;  // nothing to do: waiting for input
  double blocked_s = 0;  // work ready but output full: waiting for downstream
  // Mean occupancy of the stage's output queue, 0..1: for "read" undecoded bytes over
  // the io budget (sampled at each read), for "batch" ready batches over the prefetch
  // depth (sampled at each Next()); -1 where the stage has no queue of its own.
  double queue_fill = -1;
  // "read" only: the mean time from issuing a read to its bytes (or its failure), over
  // the reads done; -1 for other stages. With `items` and the run's time it gives the
  // reads in flight on average (Little's law: reads per second x latency).
  double mean_latency_ms = -1;
};

struct OpMetrics {
  std::string name;
  int64_t items = 0;
  double busy_s = 0;             // summed over threads
  HistogramSnapshot latency;     // per sample (a batch op: per batch)
  // An op that takes the Python GIL (a Python operator): the part of busy_s it spent
  // waiting to acquire it, summed over threads; -1 for ops that never take it.
  double gil_wait_s = -1;
};

struct EngineMetrics {
  double elapsed_s = 0;
  int64_t samples_attempted = 0;
  int64_t samples_delivered = 0;
  int64_t samples_failed = 0;
  int64_t batches_delivered = 0;
  int64_t bytes_read = 0;
  int64_t bytes_copied = 0;         // sample bytes copied between stages / into batches
  int64_t budget_peak_bytes = 0;    // peak of batches in flight plus undecoded bytes
  int64_t budget_used_bytes = 0;    // the same, now
  int64_t batches_ready = 0;        // batches done and waiting for the consumer
  int reads_inflight = 0;           // now
  // The two budgets (EngineOptions) and one full batch's buffers (BatchBytes of
  // order.batch_size): how many batches the batch budget holds ahead of the consumer.
  int64_t io_budget_bytes = 0;
  int64_t batch_budget_bytes = 0;
  int64_t full_batch_bytes = 0;
  int64_t batch_memory_reused = 0;  // batch buffers served from the pool
  int64_t batch_memory_fresh = 0;   // batch buffers newly allocated
  // Scratch memory of the CPU threads (intermediate images); each thread trims its
  // own to EngineOptions::scratch_retain_bytes after every sample:
  int64_t scratch_bytes = 0;              // held by all threads now
  int64_t scratch_peak_bytes = 0;         // most held by all threads at once
  int64_t scratch_sample_peak_bytes = 0;  // most one thread held for one sample
  int64_t scratch_retain_bytes = 0;       // the per-thread allowance kept between samples
  std::vector<StageMetrics> stages;
  std::vector<OpMetrics> ops;
  HistogramSnapshot read_latency;  // per media read: issue to bytes in (or failure)
  HistogramSnapshot next_wait;     // per Next(): the consumer's wait for its batch
  std::map<std::string, int64_t> errors_by_kind;
  std::vector<SampleError> first_errors;
};

class Engine {
 public:
  // Validates, allocates nothing large, and starts the driver thread. The inputs are
  // shared: a prepared pipeline runs many engines over one chain and source, one after
  // another or at once.
  static Result<std::unique_ptr<Engine>> Start(std::shared_ptr<const EngineInputs> inputs,
                                               EngineOptions options);
  static Result<std::unique_ptr<Engine>> Start(EngineInputs inputs, EngineOptions options) {
    return Start(std::make_shared<const EngineInputs>(std::move(inputs)), std::move(options));
  }
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The next batch in order; nullopt after the last one; an error when the run failed
  // (error budget) or was cancelled; kInvalidArgument on a Schedule::kOnDemand engine.
  Result<std::optional<Batch>> Next();
  // Waits up to `timeout` until Next() would return without blocking (a batch is ready,
  // the run ended or failed); true if so. Lets a consumer that must stay responsive (a
  // Python loop noticing Ctrl-C) wait in slices; the time counts as consumer wait.
  bool WaitReady(std::chrono::nanoseconds timeout);
  // Stops the run; Next() then returns kCancelled. Safe from any thread.
  void Cancel();

  // Schedule::kOnDemand only. Queues batch `batch` (a local index, see the contract) for
  // computing; kInvalidArgument outside the run, while it is queued or not yet taken,
  // or in sequential mode; the run's failure once it failed. Safe from any thread.
  Status Submit(int64_t batch);
  // Waits for submitted batch `batch` and hands it over (with no rows if every sample
  // failed: it holds the position); kInvalidArgument if it was not submitted or was
  // taken already, kCancelled once the engine is cancelled. Any number of threads may take
  // different batches at once.
  Result<Batch> Take(int64_t batch);
  // Waits up to `timeout` until Take(batch) would not block; true if so.
  bool WaitTakeable(int64_t batch, std::chrono::nanoseconds timeout);

  const EpochOrder& order() const { return order_; }
  // The local index of the batch Next() returns next.
  int64_t next_batch() const;
  EngineMetrics Metrics() const;

  // Bytes of one batch's buffers at `samples` rows.
  size_t BatchBytes(int64_t samples) const;

 private:
  struct BatchJob;
  Engine(std::shared_ptr<const EngineInputs> inputs, EngineOptions options, EpochOrder order);

  void DriverLoop();
  // Builds, admits and starts batch `j`; false when the run stopped instead.
  bool StartBatch(int64_t j);
  // Counts a delivered batch's samples and errors in the metrics.
  void CountDeliveredLocked(const Batch& batch);
  // Waits until batch `job` fits the prefetch depth and the batch budget; false when
  // the run stopped instead.
  bool Admit(const BatchJob& job);
  // Allocates the batch's tensors and points each sample's slots at its rows.
  Status AllocateRows(BatchJob& job);
  // Starts one sample: a read (within the read capacity) or straight to the CPU pool.
  void IssueSample(const std::shared_ptr<BatchJob>& job, int slot);
  // A run-unique id of a sample slot, for async trace events.
  int64_t TraceId(const BatchJob& job, int slot) const;
  // The media reads of one sample, one per record->media item, one after another: the
  // next item is read when the previous one is in, and the chain runs after the last.
  // So a sample holds at most one read in flight, and only its first read ever waits
  // for the I/O budget: the items after it are charged even past the budget (by at
  // most the rest of one sample), which a sample that already holds bytes could not
  // wait for without waiting for itself. Guarded by mu_ (`bytes`: written by the
  // completion of each item, in turn).
  struct SampleReads {
    std::vector<Buffer> bytes;
    int64_t charged = 0;  // this sample's share of the I/O budget's charge
  };
  // The I/O budget's charge of one read (see the contract), shared by its gate and
  // its completion; guarded by mu_.
  struct ReadCharge {
    std::shared_ptr<SampleReads> sample;
    int item = 0;           // which of the record's media items
    int64_t bytes = 0;      // charged now: the reservation, then the object's size
    int64_t refused = -1;   // >= 0: the gate refused this size; the read is parked
    bool sized = false;     // the gate ran (a storage may ignore it)
    Clock::time_point issued{};  // when StartRead issued it, for the read latency
  };
  struct ParkedRead {
    std::shared_ptr<BatchJob> job;
    int slot;
    std::shared_ptr<ReadCharge> charge;
  };
  // Whether a sample's first read, charging `bytes`, may be issued now (see the
  // contract).
  bool ReadFitsLocked(int64_t bytes) const;
  // Charges `charge` and counts it in flight.
  void ChargeReadLocked(ReadCharge& charge, int64_t bytes);
  void StartRead(const std::shared_ptr<BatchJob>& job, int slot,
                 std::shared_ptr<ReadCharge> charge);
  // Updates the reservation of new reads with an object's size.
  void NoteReadSizeLocked(int64_t size);
  // The gate of a read: swaps its reservation for the object's size, or refuses.
  bool OnReadSize(ReadCharge& charge, int64_t size);
  // Parked reads that may start now, already charged; all of them once the run stopped
  // (still refused: RestartParked finishes those as cancelled).
  std::vector<ParkedRead> TakeParkedLocked();
  void RestartParked(std::vector<ParkedRead> reads);
  void OnRead(const std::shared_ptr<BatchJob>& job, int slot,
              const std::shared_ptr<ReadCharge>& charge, Result<Buffer> bytes);
  // Releases `bytes` of the I/O budget's charge and restarts the parked reads that fit.
  void ReleaseReadBytes(int64_t bytes);
  // Runs the chain on a sample whose media (possibly none) are in `media`; `charged`
  // is their charge to the I/O budget, released when the chain is done with them.
  void RunChain(const std::shared_ptr<BatchJob>& job, int slot, std::vector<Buffer> media,
                int64_t charged);
  // Counts op `i`'s run on sample `index` in the metrics (and the trace).
  void CountOp(size_t i, Clock::time_point start, Clock::time_point end,
               const SampleContext& ctx, int64_t index);
  // After a sample: notes what this thread's scratch grew to, then trims it to the
  // per-thread allowance.
  void SettleScratch();
  void FinishSample(const std::shared_ptr<BatchJob>& job, int slot, Status status);
  void FinishBatch(BatchJob& job);
  // Looks up the record of each of the job's samples, once, for the batch's life.
  void ResolveRecords(BatchJob& job) const;
  // Runs the batch ops on a complete batch; on failure, empties it and records errors.
  void RunBatchOps(const BatchJob& job, Batch& batch);
  Status CheckErrorBudgetLocked(bool at_end) const;
  // Whether Next() would return without waiting.
  bool ReadyLocked() const;
  // Total consumer wait so far, the wait in progress included.
  int64_t ConsumerWaitNanosLocked() const;

  const std::shared_ptr<const EngineInputs> inputs_holder_;
  const EngineInputs& inputs_;
  const EngineOptions options_;
  const EpochOrder order_;
  const Clock::time_point start_time_;
  std::unique_ptr<ThreadPool> pool_;
  // Batch memory: options_.allocator behind a pool, so that steady-state batches reuse
  // the blocks of delivered ones instead of faulting in fresh pages.
  std::shared_ptr<PoolingAllocator> batch_memory_;

  mutable std::mutex mu_;
  std::condition_variable driver_cv_;    // admission / io capacity changed, or stop
  std::condition_variable consumer_cv_;  // a batch became ready, or stop / failure
  std::condition_variable drained_cv_;   // outstanding_ reached zero
  bool stop_ = false;                    // guarded by mu_
  // Cancel() was called: stop_ without the lock, for the storage's "still wanted?" asks.
  std::atomic<bool> cancelled_{false};
  Status failure_;                       // guarded by mu_: first fatal error
  int64_t next_ = 0;                     // guarded by mu_: next local batch to deliver
  int64_t admitted_ahead_ = 0;           // guarded by mu_: admitted, not delivered
  int64_t batch_bytes_ = 0;              // guarded by mu_: buffers of admitted batches
  // Guarded by mu_: the I/O budget's charge: reads in flight and fetched bytes the chain
  // has not finished with (see the contract).
  int64_t undecoded_bytes_ = 0;
  int64_t read_estimate_ = -1;           // guarded by mu_: -1 until a size is known
  std::deque<ParkedRead> parked_;        // guarded by mu_: reads refused by their gate
  int64_t budget_peak_ = 0;              // guarded by mu_
  int reads_inflight_ = 0;               // guarded by mu_
  int64_t outstanding_ = 0;              // guarded by mu_: samples not yet finished
  struct ReadyBatch {
    Batch batch;
    int64_t bytes;  // charged to the batch budget until delivered
  };
  std::map<int64_t, ReadyBatch> ready_;  // guarded by mu_: the reorder window
  // Guarded by mu_ (Schedule::kOnDemand): batches submitted and not yet admitted, in
  // submission order, and every batch submitted and not yet taken.
  std::deque<int64_t> submitted_;
  std::set<int64_t> untaken_;
  bool driver_done_ = false;             // guarded by mu_
  double driver_done_s_ = 0;             // guarded by mu_: when it became true

  // Metrics, guarded by mu_.
  Clock::time_point reads_busy_since_;
  int64_t read_busy_ns_ = 0;
  int64_t read_blocked_ns_ = 0;
  int64_t admit_blocked_ns_ = 0;  // admission waits while the consumer was not waiting
  int64_t consumer_wait_ns_ = 0;  // total time inside Next() waiting for a batch
  bool consumer_waiting_ = false;
  Clock::time_point consumer_waiting_since_;
  int64_t assemble_ns_ = 0;
  int64_t reads_done_ = 0;
  double read_fill_sum_ = 0;
  double batch_fill_sum_ = 0;
  int64_t next_calls_ = 0;
  int64_t bytes_read_ = 0;
  int64_t samples_attempted_ = 0;
  int64_t samples_delivered_ = 0;
  int64_t samples_failed_ = 0;
  int64_t batches_delivered_ = 0;
  int64_t bytes_copied_ = 0;
  std::map<std::string, int64_t> errors_by_kind_;
  std::vector<SampleError> first_errors_;

  std::vector<std::atomic<int64_t>> op_ns_;        // per op, summed over threads
  // Per op: GIL waits it reported (SampleContext::gil_wait_ns), and whether it ever did.
  std::vector<std::atomic<int64_t>> op_gil_wait_ns_;
  std::vector<std::atomic<bool>> op_takes_gil_;
  std::vector<std::atomic<int64_t>> batch_op_ns_;  // per batch op
  // Latency histograms (lock-free): per media read, per op and batch op (ops first),
  // per Next().
  LatencyHistogram read_latency_;
  std::unique_ptr<LatencyHistogram[]> op_latency_;
  LatencyHistogram next_wait_;
  std::atomic<int64_t> samples_run_{0};
  ScratchUsage scratch_usage_;                   // all CPU threads' arenas
  std::atomic<int64_t> scratch_sample_peak_{0};  // most one arena held after a sample

  const ChainRunner chain_;  // over inputs_'s ops
  std::thread driver_;
};

}  // namespace headrace
