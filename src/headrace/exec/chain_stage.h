// ChainStage: a sample's values put in place by its source (Source::Fill) and its operator
// chain run (ops/chain_runner.h), start to finish on one thread of the CPU pool; the last
// op writes the sample's row of the batch.
//
// Contract:
// - Submit hands a sample (its media bytes, read by the read stage, and their charge on
//   the I/O budget) to the pool. The bytes are released (`release(charged)`) as soon as
//   the chain is done with them, before `done(job, slot, status)` runs on the same thread.
// - Once the run stops (the engine's stop token), samples not started yet end as
//   kCancelled without running.
// - Each CPU thread keeps a scratch arena (ops/op.h) and its value slots between samples,
//   trimming the arena to `scratch_retain_bytes` after each; the metrics report what
//   the arenas held (outside the byte budgets: exec/README.md says why).
//
// Threads: Submit from any thread; the chain runs on the pool's threads.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/histogram.h"
#include "headrace/exec/batch_job.h"
#include "headrace/exec/stage.h"
#include "headrace/exec/thread_annotations.h"
#include "headrace/exec/thread_pool.h"
#include "headrace/exec/trace.h"
#include "headrace/formats/source.h"
#include "headrace/ops/chain_runner.h"

namespace headrace {

struct OpMetrics {
  std::string name;
  // The blend entry whose chain the op is in (OpChain::entry); "": the chain of every
  // sample. An entry's op runs on that entry's samples only, and `items` still counts
  // every sample, so that the ops' costs per sample add up to the chain's.
  std::string entry;
  int64_t items = 0;
  double busy_s = 0;             // summed over threads
  HistogramSnapshot latency;     // per sample (a batch op: per batch)
  // An op that takes the Python GIL (a Python operator): the part of busy_s it spent
  // waiting to acquire it, summed over threads; -1 for ops that never take it.
  double gil_wait_s = -1;
  // An op that decodes video (SampleContext::frames_decoded): frames its decoders
  // produced and frames it took, summed; -1 for ops that decode none.
  int64_t frames_decoded = -1;
  int64_t frames_taken = 0;
};

class SizeIndex;

struct ChainStageOptions {
  int threads = 1;
  uint64_t seed = 0;
  int64_t scratch_retain_bytes = int64_t{32} << 20;
  TraceRecorder* trace = nullptr;  // op spans when set
  // The run's size index (exec/size_index.h) and the batch field whose rows are its
  // tokens: each sample's tokens, once its chain ran, are compared with its entry
  // (StaleEntries). Null: none.
  std::shared_ptr<const SizeIndex> sizes;
  int sizes_token_field = -1;
};

// The samples whose tokens differed from their size index entry (the data changed since
// the index was built: it still plans the run, and the batch holds the real tokens).
struct StaleEntries {
  bool checked = false;  // whether the run has a size index to check against
  int64_t count = 0;
  std::string first;  // "epoch E, index I, URI: N tokens, its entry M" of the first seen
};

// What the CPU threads' scratch arenas held.
struct ScratchMetrics {
  int64_t bytes = 0;              // held by all threads now
  int64_t peak_bytes = 0;         // most held by all threads at once
  int64_t sample_peak_bytes = 0;  // most one thread held for one sample
};

class ChainStage {
 public:
  using Done = std::function<void(const std::shared_ptr<BatchJob>& job, int slot, Status)>;
  using Release = std::function<void(int64_t charged)>;

  // `source` and `chains` live as long as the stage (the engine's inputs). A sample runs
  // chains[0], or with several (a blend's entries' own) chains[source.EntryOf(index)].
  ChainStage(const Source& source, const std::vector<OpChain>& chains,
             ChainStageOptions options, std::stop_token stop, Release release, Done done);
  ~ChainStage();

  // `readers`, when not empty, one per media item: the items read in ranges by their op
  // (EngineInputs::ranged_fields), whose `media` buffers are empty.
  void Submit(const std::shared_ptr<BatchJob>& job, int slot, std::vector<Buffer> media,
              int64_t charged, std::vector<std::shared_ptr<MediaReader>> readers = {});

  int threads() const { return pool_->size(); }
  // The batch (its local index) of the sample that runs next, nullopt when no sample
  // waits for a thread; a queued task that is not a sample's run (its read plan) counts
  // as the oldest batch's.
  std::optional<int64_t> FirstQueuedBatch() const;
  // Called after each task is queued for a thread, under the pool's lock (ThreadPool::
  // set_on_queued): a sample waiting for memory may have to let it run
  // (Delivery::HoldRows). Set before the first Submit.
  void set_on_queued(std::function<void()> on_queued) {
    pool_->set_on_queued(std::move(on_queued));
  }
  int64_t samples_run() const { return samples_run_.load(std::memory_order_relaxed); }
  // What the samples' MediaReaders read (ChainStageOptions::ranged), summed as each
  // sample's chain ends.
  MediaReader::Stats ranged_reads() const {
    return {ranged_requests_.load(std::memory_order_relaxed),
            ranged_bytes_.load(std::memory_order_relaxed),
            ranged_unplanned_.load(std::memory_order_relaxed)};
  }
  StageMetrics Metrics(double elapsed_s, double admit_blocked_s) const;
  std::vector<OpMetrics> OpsMetrics() const;
  ScratchMetrics Scratch() const;
  StaleEntries stale_entries() const;

 private:
  void Run(const std::shared_ptr<BatchJob>& job, int slot, std::vector<Buffer> media,
           int64_t charged, std::vector<std::shared_ptr<MediaReader>> readers);
  // Counts sample `sample` (its chain ran) whose `tokens` differ from its size index entry.
  void CheckEntry(const Sample& sample, int64_t tokens);
  // The chain's Op::PlanReads for a sample whose media are `readers`, ahead of its Run.
  void PlanReads(const std::shared_ptr<BatchJob>& job, int slot,
                 const std::vector<std::shared_ptr<MediaReader>>& readers);
  void CountOp(size_t i, Clock::time_point start, Clock::time_point end,
               const SampleContext& ctx, int64_t index);
  // After a sample: notes what this thread's scratch grew to, then trims it.
  void SettleScratch();
  // The op of counter index `i` (first_op_).
  const Op& OpAt(size_t i) const;

  const Source& source_;
  const std::vector<OpChain>& chains_;
  std::vector<ChainRunner> runners_;  // per chain
  // Per chain, the index of its first op in the per-op counters below, which list every
  // chain's ops one chain after another.
  std::vector<size_t> first_op_;
  const ChainStageOptions options_;
  const std::stop_token stop_;
  const Release release_;
  const Done done_;
  std::unique_ptr<ThreadPool> pool_;
  // What each op did, summed over threads (CountOp), lock-free.
  struct OpCounters {
    std::atomic<int64_t> ns{0};
    LatencyHistogram latency;
    // GIL waits it reported (SampleContext::gil_wait_ns), and whether it ever did.
    std::atomic<int64_t> gil_wait_ns{0};
    std::atomic<bool> takes_gil{false};
    // Frames decoded and taken it reported, and whether it ever did.
    std::atomic<int64_t> frames_decoded{0};
    std::atomic<int64_t> frames_taken{0};
    std::atomic<bool> decodes_frames{false};
  };
  std::unique_ptr<OpCounters[]> ops_;  // per op, every chain's one chain after another
  std::atomic<int64_t> samples_run_{0};
  std::atomic<int64_t> ranged_requests_{0};
  std::atomic<int64_t> ranged_bytes_{0};
  std::atomic<int64_t> ranged_unplanned_{0};
  std::atomic<int64_t> stale_{0};
  mutable Mutex stale_mu_;
  std::string first_stale_ HR_GUARDED_BY(stale_mu_);
  ScratchUsage scratch_usage_;                   // all CPU threads' arenas
  std::atomic<int64_t> scratch_sample_peak_{0};  // most one arena held after a sample
};

}  // namespace headrace
