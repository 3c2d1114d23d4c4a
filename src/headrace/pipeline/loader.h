// Loader: the consumer's view of a pipeline — one run of a PreparedPipeline
// (pipeline/prepared.h), an iterator of batches that measures how long the consumer
// waits for them.
//
//   auto loader = Loader::Make(spec);          // prepares (validates, opens, plans), runs
//   while (auto batch = (*loader)->Next(); batch.ok() && batch->has_value()) { ... }
//   // or, to run one pipeline many times: PreparedPipeline::Make(spec), then Run(options)
//
// Time inside Next() is the consumer's wait; time between calls is its own work (the
// training step). The first batch's wait is the cold start, reported apart.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "headrace/core/clock.h"
#include "headrace/exec/consumer_clock.h"
#include "headrace/exec/engine.h"
#include "headrace/exec/thread_annotations.h"
#include "headrace/exec/batch_former.h"
#include "headrace/formats/parquet_row_groups.h"
#include "headrace/io/block_cache.h"
#include "headrace/pipeline/prepared.h"
#include "headrace/pipeline/spec.h"

namespace headrace {

struct LoaderOptions {
  // Where to start (resume): the rank-local batch `start_batch`, counted from the first
  // batch of epoch `start_epoch` (0: from the start of the run).
  int64_t start_epoch = 0;
  int64_t start_batch = 0;
  int rank = 0;
  int world_size = 1;
  // See EngineOptions::deliver_empty_batches.
  bool deliver_empty_batches = false;
  // Schedule::kOnDemand: batches are computed as Submit() names them and collected with
  // Take() (a Ray worker; use rank 0 of world size 1 so that batch k is the run-wide
  // index over all ranks; see EngineOptions::schedule). Next() is then refused.
  Schedule schedule = Schedule::kSequential;
  Allocator* allocator = nullptr;    // batch memory; null: the heap
  // Loader::Make only (a PreparedPipeline has its storage): null: OpenStorage(spec.storage):
  // local, s3://, http(s)://.
  std::shared_ptr<Storage> storage;
  // Records a timeline of the run (reads, operators, the consumer) when set; must
  // outlive the loader.
  TraceRecorder* trace = nullptr;
  // With batch.pack: continue from a packer's saved state (Loader::pack_state()) instead
  // of start_epoch / start_batch. Without it, a start_batch > 0 with a pack window
  // replays the epoch up to it (each batch packed and dropped: the cost grows with it).
  std::optional<PackState> pack_state;
  // With batch.pack: decide the rows before the samples run, from the sizes their size
  // pass tells (exec/pack_planner.h), where the chain can tell them (ChainTellsTokens) and
  // batches leave in order; false: pack after they ran (the Packer's window).
  bool plan_packing = true;
  // An elastic resume (python/headrace/loader.py, merge_state_dicts): the run is the rest
  // of one epoch, dealt to this run's ranks (EpochRemainder, exec/epoch_order.h);
  // start_epoch must be its epoch and start_batch counts within it.
  std::optional<EpochRemainder> remainder;
  // A blend resumed with other weights: the picks each entry had made in the epoch
  // (EpochOrder::BlendPicks); the rest of the epoch continues each entry there.
  std::vector<int64_t> blend_start;
  // batch.balance on an on-demand run (a Ray worker): the trainers' world size, which
  // each step is dealt over (BalanceOptions::ranks). 0 elsewhere.
  int balance_ranks = 0;
};

// execution.io_inflight as the engine runs it: the configured value, or for 0
// (automatic) max(kMinAutoIoInflight, kAutoIoInflightPerThread × cpu_threads), at most
// kMaxAutoIoInflight. The measurement behind these numbers is in spec.h, beside the key.
inline constexpr int kMinAutoIoInflight = 32;
inline constexpr int kAutoIoInflightPerThread = 16;
inline constexpr int kMaxAutoIoInflight = 16384;  // 16 per thread at 1024 threads
int ResolveIoInflight(const ExecutionSpec& execution, int cpu_threads);

class Loader {
 public:
  // PreparedPipeline::Make(spec, options.storage), then Run(options).
  static Result<std::unique_ptr<Loader>> Make(const PipelineSpec& spec,
                                              const LoaderOptions& options = {});
  ~Loader();

  // The next batch; nullopt at the end of the run.
  Result<std::optional<Batch>> Next();
  // Waits up to `timeout` until Next() would not block; true if so. A consumer that must
  // notice interrupts calls this in slices before Next(); the time counts as its wait.
  bool WaitReady(std::chrono::nanoseconds timeout);
  // Schedule::kOnDemand: see Engine::Submit / Take / WaitTakeable. A taken batch gets
  // what its former adds to a batch no Next() forms (BatchFormer::FinishTaken).
  Status Submit(int64_t batch) { return engine_->Submit(batch); }
  Result<Batch> Take(int64_t batch) {
    HR_ASSIGN_OR_RETURN(Batch taken, engine_->Take(batch));
    HR_RETURN_IF_ERROR(former_->FinishTaken(taken));
    return taken;
  }
  bool WaitTakeable(int64_t batch, std::chrono::nanoseconds timeout) {
    return engine_->WaitTakeable(batch, timeout);
  }
  // Stops the run: a Next() waiting now, and every later one, returns kCancelled. Safe
  // from any thread while the loader lives (a signal watcher's, say).
  void Cancel() { engine_->Cancel(); }

  const PipelineSpec& spec() const { return prepared_->spec(); }
  // The pipeline this loader runs: its source, plan and budgets, shared by every run.
  const PreparedPipeline& prepared() const { return *prepared_; }
  // Every record of the dataset, by index, however the source keeps them.
  const RecordStore& records() const { return prepared_->source().records(0); }
  int64_t num_samples() const { return prepared_->source().size(); }
  // The source's index in this process's heap (parsed records, or a manifest's line
  // offsets), held for the whole run outside memory.budget_bytes; measured once, after
  // loading.
  int64_t manifest_bytes() const { return prepared_->source().info().heap_bytes; }
  // The manifest's bytes mapped read-only from the page cache (a manifest kept as lines
  // from a local file): shared with every process that maps it, reclaimable; else 0.
  int64_t manifest_mapped_bytes() const { return prepared_->source().info().mapped_bytes; }
  int64_t batches_per_epoch() const { return engine_->order().batches_per_rank_epoch(); }
  // EpochOrder::kUnboundedBatches when the run's epochs are unbounded.
  int64_t total_batches() const { return engine_->order().total_batches(); }
  // With batch.max_tokens, the input batch whose token batches are being delivered
  // while some of them wait.
  int64_t next_batch() const { return engine_->next_batch() - former_->inputs_held(); }
  // The epoch order the engine runs (its options: shards, shuffle window, seed).
  const EpochOrder& order() const { return engine_->order(); }
  int64_t memory_budget_bytes() const { return spec().memory.budget_bytes; }
  int cpu_threads() const { return prepared_->cpu_threads(); }
  int io_inflight() const { return prepared_->io_inflight(); }  // resolved (ResolveIoInflight)
  // What each storage backend did so far (requests, retries, bytes, ...).
  std::vector<StorageStats> storage_stats() const {
    return prepared_->source().storage()->Stats();
  }
  // What the source is, for the run report: "manifest PATH" or "shards PATTERN (N shards,
  // ...)".
  const std::string& source() const { return prepared_->source().info().description; }
  // The shard source's block cache (io/block_cache.h); null for a manifest.
  const BlockCache* block_cache() const { return prepared_->source().block_cache(); }
  // The Parquet source's row-group cache; null for other sources.
  const ParquetRowGroupCache* row_group_cache() const {
    return prepared_->source().row_group_cache();
  }
  // Both safe from any thread while the loader lives (a metrics endpoint's, say).
  ConsumerStats consumer_stats() const;
  // With batch.pack (else nullopt): what packing did so far, and where the packer stands
  // after the last batch Next() returned (for a state dict). Safe from any thread.
  std::optional<PackStats> pack_stats() const { return former_->stats(); }
  std::optional<PackState> pack_state() const { return former_->state(); }
  // With batch.balance (else nullopt): what the deal of the steps so far did.
  std::optional<BalanceSeen> balance_stats() const { return former_->balance(); }
  EngineMetrics engine_metrics() const { return engine_->Metrics(); }

 private:
  friend class PreparedPipeline;
  Loader(std::shared_ptr<const PreparedPipeline> prepared, std::unique_ptr<Engine> engine,
         std::shared_ptr<BatchFormer> former, TraceRecorder* trace, Clock::time_point created);

  std::shared_ptr<const PreparedPipeline> prepared_;
  std::unique_ptr<Engine> engine_;
  // How the consumer's batches are formed from the engine's (exec/batch_formers.h).
  std::shared_ptr<BatchFormer> former_;

  TraceRecorder* trace_ = nullptr;
  const Clock::time_point created_;
  Clock::time_point last_return_at_;  // for the trace's step spans
  std::optional<Clock::time_point> wait_started_;  // the first WaitReady() before Next()
  mutable Mutex stats_mu_;
  ConsumerClock clock_ HR_GUARDED_BY(stats_mu_);  // consumer_stats() is safe from any thread
};

}  // namespace headrace
