// Engine: computes a rank's batches ahead of demand, in parallel, within a byte budget,
// and hands them to one consumer in batch order. A scheduler over stages that own their
// state and counters (exec/README.md):
//
//   driver thread           storage threads        CPU pool (T threads)
//   Delivery: admit j ─▶ ReadStage: bytes ─▶ ChainStage: Source::Fill, op chain, start
//   AssembleStage: rows    (io_inflight,          to finish; the last op writes the
//   (depth, budget)         io budget)            sample's row of the batch buffer
//                                                            │ last sample done
//   consumer Next() ◀── Delivery: reorder window ◀── AssembleStage: compact, batch ops
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
//   never exceeds it (media that cannot fit in the whole budget fail their sample with
//   kResourceExhausted as soon as their size is seen; exec/read_stage.h): a read is
//   issued with a reservation (an estimate: the largest recent object, a maximum that
//   decays by 1/16 per read so that one outlier does not serialize the run; before the
//   first size is known, one read at a time) only when the charge plus the reservation
//   fits, or nothing else is charged or in flight (progress). The storage's size gate
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
// - Stopping is one std::stop_source: Cancel(), the first fatal error and the error
//   budget request it; every wait (admission, read capacity, a submitted batch) and every
//   stage checks its token.
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
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "headrace/core/batch.h"
#include "headrace/core/clock.h"
#include "headrace/core/histogram.h"
#include "headrace/core/pooling_allocator.h"
#include "headrace/exec/assemble_stage.h"
#include "headrace/exec/batch_former.h"
#include "headrace/exec/batch_job.h"
#include "headrace/exec/budget_gauge.h"
#include "headrace/exec/chain_stage.h"
#include "headrace/exec/delivery.h"
#include "headrace/exec/epoch_order.h"
#include "headrace/exec/read_stage.h"
#include "headrace/exec/stage.h"
#include "headrace/exec/thread_annotations.h"
#include "headrace/exec/trace.h"
#include "headrace/formats/source.h"
#include "headrace/ops/op.h"

namespace headrace {

struct EngineInputs {
  // The dataset (formats/source.h): its records per epoch, the storage its reads go
  // through, and how a sample's values are put in place once its media are read.
  std::shared_ptr<const Source> source;
  // The per-sample chain (ops/chain_runner.h): its ops, the slots of named values they use
  // (ops/value.h) and the source's values among them, filled before it runs. Op::Run
  // writes into the rows of `fields` (by position). One chain, or one per entry of a
  // blend whose entries have ops of their own (in entry order: Source::EntryOf picks).
  std::vector<OpChain> chains;
  // The first chain, made when there is none: for builders of a one-chain engine.
  OpChain& chain() {
    if (chains.empty()) chains.emplace_back();
    return chains.front();
  }
  std::vector<FieldSpec> fields;
  // Per-sample strings collected into Batch::strings (exec/assemble_stage.h).
  using StringField = headrace::StringField;
  std::vector<StringField> strings;
  // Per-batch steps, run in order on each complete batch before delivery.
  std::vector<std::unique_ptr<BatchOp>> batch_ops;
  // Whether samples need their media read before the chain runs (each item of
  // SampleRecord::media, whole objects or byte ranges): an op reads a media field, or
  // the source's values come with the reads (Source::values_need_reads).
  bool reads_media = true;
  // Per source field: its items are not read before the chain runs; the chain's op gets
  // a MediaReader (Sample::Item::reader) and reads the ranges it needs. Applies to whole
  // objects (MediaRef offset 0, length -1) of a record whose every item is such; others
  // are read as usual (the op then gets the bytes).
  std::vector<bool> ranged_fields;
};

// Whether `ref` is read in ranges by its op rather than before the chain runs
// (EngineInputs::ranged_fields: a whole object of such a field), and whether every media
// item of `record` is.
bool RangedItem(const EngineInputs& inputs, const MediaRef& ref);
bool RangedRecord(const EngineInputs& inputs, const SampleRecord& record);

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
  // How the run forms its batches (exec/batch_former.h): which samples each batch
  // computes, media its composing read, whether batches leave with their samples' rows
  // unjoined (ignored with batch ops) and whether the consumer counts losses. Null: plain.
  std::shared_ptr<BatchFormer> former;
  EpochOrderOptions order;
  // The error budget (exec/run_budget.h): fail once failed / attempted > max_error_rate,
  // with at least min_samples attempted (or at the end of each epoch), and a blend
  // entry past its own rate; the entries' names are the source's (the engine sets them).
  RunBudgetOptions budget;
  Allocator* allocator = DefaultAllocator();
  // Scratch memory (ops/op.h ScratchArena) each CPU thread keeps between samples; a
  // sample that needs more gets it, and it is freed when that sample ends. Outside
  // the two budgets above: the run report shows it (EngineMetrics::scratch_*).
  int64_t scratch_retain_bytes = int64_t{32} << 20;
  // Records reads and operator spans when set; must outlive the engine.
  TraceRecorder* trace = nullptr;
  // The run's size index (batch.balance.index, batch.pack.index) and the batch field its
  // tokens are: each sample's tokens are checked against its entry as it runs
  // (EngineMetrics::stale_entries). Null: none.
  std::shared_ptr<const SizeIndex> sizes;
  int sizes_token_field = -1;
};

struct EngineMetrics {
  double elapsed_s = 0;
  int64_t samples_attempted = 0;
  int64_t samples_delivered = 0;
  int64_t samples_failed = 0;
  int64_t batches_delivered = 0;
  int64_t bytes_read = 0;           // the read stage's, and the ranges below
  // Media read in ranges by their ops (EngineInputs::ranged_fields): requests, bytes,
  // and the requests no plan covered (MediaReader::Stats).
  MediaReader::Stats ranged_reads;
  // With a size index: the samples whose tokens differed from their entries.
  StaleEntries stale_entries;
  int64_t bytes_copied = 0;         // sample bytes copied between stages / into batches
  int64_t budget_peak_bytes = 0;    // peak of batches in flight plus undecoded bytes
  int64_t budget_used_bytes = 0;    // the same, now
  int64_t batches_ready = 0;        // batches done and waiting for the consumer
  int reads_inflight = 0;           // now
  // The two budgets (EngineOptions) and one full batch's buffers (BatchBytes of
  // order.batch_size, plus, with concatenated fields, order.batch_size times their mean
  // bytes per sample so far): how many batches the batch budget holds ahead of the
  // consumer.
  int64_t io_budget_bytes = 0;
  int64_t batch_budget_bytes = 0;
  int64_t full_batch_bytes = 0;
  // Batch buffers served from the pool, and newly allocated (RegionAllocator with ragged
  // fields: buffers of 1 MiB or more).
  int64_t batch_memory_reused = 0;
  int64_t batch_memory_fresh = 0;
  // Samples whose told rows waited for room in the batch budget (Delivery::HoldRows),
  // and the seconds they waited; the CPU threads waiting so now.
  int64_t rows_waits = 0;
  double rows_wait_s = 0;
  int rows_waiting = 0;
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
  // A blend's entries (source.mix), in order: samples delivered and failed (in batch
  // order, as the run's) and media bytes read (as they complete).
  struct Entry {
    std::string name;
    int64_t samples_delivered = 0;
    int64_t samples_failed = 0;
    int64_t bytes_read = 0;
  };
  std::vector<Entry> entries;
  // Shuffle quality: the mean distance in dataset order between neighbours in the
  // delivered batches (0 before two samples were delivered in one batch).
  double neighbour_distance = 0;
};

class Engine final : public BatchInput {
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
  Result<std::optional<Batch>> Next() override { return delivery_->Next(); }
  // Waits up to `timeout` until Next() would return without blocking (a batch is ready,
  // the run ended or failed); true if so. Lets a consumer that must stay responsive (a
  // Python loop noticing Ctrl-C) wait in slices; the time counts as consumer wait.
  bool WaitReady(std::chrono::nanoseconds timeout) override {
    return delivery_->WaitReady(timeout);
  }
  // Stops the run; Next() then returns kCancelled. Safe from any thread.
  void Cancel();
  // Bytes of delivered batches the consumer holds for the run changed by `delta` (a
  // packer's window): charged to the batch budget like batches admitted and not yet
  // delivered, so that fewer are admitted while it holds more. Safe from any thread.
  void ChargeHeld(int64_t delta) override { delivery_->Recharge(delta); }
  // Samples the consumer lost after delivery (a packer's skips, cuts and failures), in
  // delivery order: counted in the run's error budget and metrics like the samples that
  // failed in the engine (Delivery::CountLost); the budget's verdict, which stops the run
  // when spent. The in-order consumer's thread.
  Status CountLost(std::span<const LostSample> lost, bool at_end) override {
    return delivery_->CountLost(lost, at_end);
  }

  // Schedule::kOnDemand only. Queues batch `batch` (a local index, see the contract) for
  // computing; kInvalidArgument outside the run, while it is queued or not yet taken,
  // or in sequential mode; the run's failure once it failed. Safe from any thread.
  Status Submit(int64_t batch) { return delivery_->Submit(batch); }
  // Waits for submitted batch `batch` and hands it over (with no rows if every sample
  // failed: it holds the position); kInvalidArgument if it was not submitted or was
  // taken already, kCancelled once the engine is cancelled. Any number of threads may take
  // different batches at once.
  Result<Batch> Take(int64_t batch) { return delivery_->Take(batch); }
  // Waits up to `timeout` until Take(batch) would not block; true if so.
  bool WaitTakeable(int64_t batch, std::chrono::nanoseconds timeout) {
    return delivery_->WaitTakeable(batch, timeout);
  }

  const EpochOrder& order() const { return order_; }
  int64_t batches_per_epoch() const override { return order_.batches_per_rank_epoch(); }
  // The local index of the batch Next() returns next.
  int64_t next_batch() const { return delivery_->next_batch(); }
  EngineMetrics Metrics() const;

  // Bytes of one batch's buffers at `samples` rows.
  size_t BatchBytes(int64_t samples) const { return assemble_->BatchBytes(samples); }

 private:
  Engine(std::shared_ptr<const EngineInputs> inputs, EngineOptions options, EpochOrder order);

  void DriverLoop();
  // Admits and starts batch `j`; false when the run stopped instead.
  bool StartBatch(int64_t j);
  // Looks up the record of each of the job's samples, once, for the batch's life.
  void ResolveRecords(BatchJob& job) const;
  // Starts one sample: its reads, or straight to the chain.
  void IssueSample(const std::shared_ptr<BatchJob>& job, int slot);
  // A sample whose media are read in ranges (RangedRecord): opens their readers, then
  // submits it to the chain (or finishes it with the first item's error).
  void OpenReaders(const std::shared_ptr<BatchJob>& job, int slot);
  void FinishSample(const std::shared_ptr<BatchJob>& job, int slot, Status status);
  // Assembles a batch whose samples are all done and hands it to the delivery.
  void FinishBatch(BatchJob& job);
  void AddOutstanding(int64_t delta);

  const std::shared_ptr<const EngineInputs> inputs_;
  const EngineOptions options_;
  const EpochOrder order_;
  const Clock::time_point start_time_;
  std::stop_source stop_;
  BudgetGauge gauge_;
  std::unique_ptr<Delivery> delivery_;
  // A blend's media bytes read per entry (EngineMetrics::entries); null otherwise.
  std::unique_ptr<std::atomic<int64_t>[]> entry_bytes_;
  std::unique_ptr<AssembleStage> assemble_;
  std::unique_ptr<ReadStage> read_;
  std::unique_ptr<ChainStage> chain_;
  // Samples admitted and not yet finished: the destructor waits until none is, since
  // every read callback and task refers to this engine. Changed without a lock, except
  // to zero: that change is made under drain_mu_, so that the destructor, which waits
  // under it, cannot see zero and free the engine while the thread that made it still
  // has the lock and the condition variable to touch (AddOutstanding).
  Mutex drain_mu_;
  std::condition_variable_any drained_cv_;
  std::atomic<int64_t> outstanding_{0};
  std::atomic<int64_t> driver_done_ns_{-1};  // when the driver admitted its last batch
  std::atomic<int64_t> media_handed_bytes_{0};  // media taken from EngineOptions::media_of
  std::thread driver_;
};

}  // namespace headrace
