// RunReport: what a run measured, with verdicts, as JSON for machines and text for people.
//
// Definitions (DESIGN.md, "Measuring, first class"):
// - wait_time_ratio: time the consumer spent inside Next() / time from the first batch
//   to the end of the loop. The first batch's wait is time_to_first_batch_s.
// - per stage: busy, starved (no input) and blocked (output full) seconds, per unit of
//   concurrency, and a verdict: "io-bound" / "cpu-bound" when busy at least 75% of the
//   time, else "blocked" or "starved", whichever took longer.
// - storage: per backend used (local, s3, http), what it did: requests (local: files
//   read), retries by reason, throttles, reads failed for good, bytes; object stores
//   also their endpoint's origin and connections opened. No credential ever appears.
// - bottleneck: "trainer" when the consumer barely waits (the pipeline keeps up),
//   otherwise the stage that limits throughput, with advice on what to change.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/clock.h"
#include "headrace/core/histogram.h"
#include "headrace/exec/engine.h"
#include "headrace/pipeline/loader.h"

namespace headrace {

struct StageReport {
  StageMetrics metrics;
  double utilization = 0;  // busy / elapsed
  std::string verdict;
};

struct OpReport {
  std::string name;
  double busy_s = 0;
  double ms_per_sample = 0;  // busy_s / items: single-thread cost of the op
  HistogramSnapshot latency;  // per sample (a batch op: per batch)
  // A Python op: the part of ms_per_sample spent waiting for the GIL; -1 for the others.
  double gil_wait_ms_per_sample = -1;
  // An op that decodes video (video.decode): frames its decoders produced and frames it
  // took into batches, and their ratio, the frames decoded per frame taken (1: none
  // decoded in vain); -1 for the other ops.
  int64_t frames_decoded = -1;
  int64_t frames_taken = 0;
  double frames_decoded_per_taken = -1;
  // The blend entry whose own chain the op is in (source.mix[i].ops and the shared ops
  // after them, one chain per entry); "": the chain of every sample.
  std::string entry;
};

// One interval of a run, sampled while it runs (observe/run_monitor.h): what the
// report's totals were doing then, for a picture over time.
struct TimelinePoint {
  double t_s = 0;            // the interval's end, seconds since the loader started
  double dt_s = 0;           // the interval's length
  double samples_per_s = 0;  // delivered during the interval
  double wait_ratio = 0;     // the consumer's wait / its loop time during the interval
  std::vector<double> utilization;  // per stage, RunReport::stages' order: busy share
  double budget_used = 0;    // batches in flight + undecoded bytes / memory budget, at t_s
  // At t_s: the process's RSS and what glibc's malloc holds (-1: not known; core/clock.h).
  double rss_bytes = 0;
  double heap_system_bytes = -1;
  double heap_in_use_bytes = -1;
  double regions_mapped_bytes = 0;  // core/region_allocator.h RegionBytesMapped
};

struct RunReport {
  int64_t samples = 0;
  int64_t batches = 0;
  double elapsed_s = 0;
  double samples_per_s = 0;
  double mb_per_s = 0;  // encoded bytes read per second
  double wait_time_ratio = 0;
  double wait_time_ratio_with_cold_start = 0;
  double time_to_first_batch_s = 0;
  double consumer_wait_s = 0;
  double consumer_busy_s = 0;
  int64_t peak_rss_bytes = 0;
  int64_t baseline_rss_bytes = 0;
  int64_t memory_budget_bytes = 0;
  int64_t budget_peak_bytes = 0;
  // memory.budget_bytes split (EngineMetrics): undecoded reads, and batches ahead of the
  // consumer, each full batch's buffers taking full_batch_bytes.
  int64_t io_budget_bytes = 0;
  int64_t batch_budget_bytes = 0;
  int64_t full_batch_bytes = 0;
  // Batch buffers served from the engine's pool, and newly allocated (with ragged fields:
  // the pool's regions, buffers of 1 MiB or more; smaller ones are the heap's).
  int64_t batch_memory_reused = 0;
  int64_t batch_memory_fresh = 0;
  int64_t rows_waits = 0;  // samples whose told rows waited for the batch budget
  double rows_wait_s = 0;
  // Memory outside memory.budget_bytes (JSON "memory": {...}):
  int64_t manifest_bytes = 0;  // the source's index in the heap, held all run
  int64_t manifest_mapped_bytes = 0;  // a manifest kept as lines, mapped: shared page cache
  int64_t scratch_bytes = 0;   // CPU threads' scratch held now (EngineMetrics::scratch_*)
  int64_t scratch_peak_bytes = 0;
  int64_t scratch_sample_peak_bytes = 0;
  int64_t scratch_bytes_per_thread = 0;  // memory.scratch_bytes_per_thread
  // memory.decode_bytes_per_thread, resolved: what each thread's decoder may hold for one
  // sample beyond the budget (a sample needing more fails).
  int64_t decode_bytes_per_thread = 0;
  // When the report was made: RSS, and glibc malloc's figures (-1 each where unknown).
  int64_t rss_bytes = 0;
  MallocHeap heap;
  // ... and the bytes the batch and row pools have mapped (RegionBytesMapped): most of
  // what RSS holds beyond malloc's heap.
  int64_t regions_mapped_bytes = 0;
  double bytes_copied_per_sample = 0;
  // Media read in ranges by their ops (video.decode read: ranges): EngineMetrics's.
  MediaReader::Stats ranged_reads;
  // With a size index: the samples whose tokens differed from their entries (EngineMetrics's).
  StaleEntries stale_entries;
  int cpu_threads = 0;
  int64_t batch_size = 0;
  double trainer_step_ms = 0;
  int64_t errors_total = 0;
  std::map<std::string, int64_t> errors_by_kind;
  std::vector<SampleError> first_errors;
  std::vector<StageReport> stages;
  std::vector<OpReport> ops;
  HistogramSnapshot read_latency;  // per media read
  HistogramSnapshot next_wait;     // per batch: the consumer's wait inside Next()
  // Now, for live views (the metrics endpoint, the progress line):
  int64_t budget_used_bytes = 0;  // batches in flight plus undecoded bytes
  int64_t batches_ready = 0;      // computed, waiting for the consumer
  int reads_inflight = 0;
  int64_t total_batches = -1;     // the run's batches for this rank; -1 when unbounded
  // Filled by the caller that sampled the run (observe/run_monitor.h); empty otherwise.
  std::vector<TimelinePoint> timeline;
  std::vector<StorageStats> storage;  // one entry per backend used
  std::string source;                 // Loader::source(): "manifest ..." or "shards ..."
  // Shuffle quality: the mean distance in dataset (storage) order between neighbours in
  // a batch, that of a uniform shuffle of the dataset ((N² − 1) / 3N), and their ratio
  // (1: as mixed as a uniform shuffle; near 0: batches of neighbours, as a small shard
  // window or shuffle: false gives).
  double neighbour_distance = 0;
  double uniform_neighbour_distance = 0;
  double shuffle_quality = 0;
  // A blend (source.mix): each entry's samples, errors and media bytes, in order.
  std::vector<EngineMetrics::Entry> entries;
  // The shard source's block cache (io/block_cache.h); has_block_cache false otherwise.
  bool has_block_cache = false;
  BlockCacheStats block_cache;
  // The Parquet source's row-group cache (formats/parquet_row_groups.h).
  bool has_row_group_cache = false;
  RowGroupCacheStats row_group_cache;
  std::string bottleneck;
  std::string advice;
  std::vector<std::string> batch_digests;  // filled by the caller when asked for
  // Set by the caller ("SIGINT", "SIGTERM") when a signal stopped the run early: the
  // report is then partial, covering what ran until the stop.
  std::string interrupted_by;
  // Set by the caller when the run failed (its Status, "resource_exhausted: too many bad
  // samples ..."): the report then gives no advice (a failed run is not a tuning result).
  std::string failure;
  // batch.pack (JSON "pack": {...}, only when packing): what the packer did, its seq_len.
  bool packed = false;
  int64_t pack_seq_len = 0;  // or batch.max_tokens (pack_budget)
  bool pack_budget = false;
  PackStats pack;
  // batch.balance (JSON "balance": {...}, only when balancing): the steps this rank dealt,
  // each rank's cost as the order deals the step and as balanced.
  bool balanced = false;
  BalanceSeen balance;
};

// The share of a data-parallel step the ranks wait at its barrier for the slowest:
// 1 - mean / slowest (0 when nothing was dealt).
inline double IdleShare(double mean, double slowest) {
  return slowest > 0 ? 1 - mean / slowest : 0;
}

// Builds the report of a loader after (or during) its run. `baseline_rss_bytes` is the
// process's RSS before the pipeline started.
RunReport BuildRunReport(const Loader& loader, int64_t baseline_rss_bytes);

std::string RunReportToJson(const RunReport& report);
// Reads back what RunReportToJson wrote (a saved `headrace run --report`, of this version
// or an older one): every field but the latency histograms (written as quantiles), the
// timeline, the first errors and the pack's planned batches. kInvalidArgument
// naming what is missing when the text is not such a report. Both walk the report's
// schema (report_schema.h), as PrometheusText does.
Result<RunReport> RunReportFromJson(std::string_view json_text);
std::string RunReportToText(const RunReport& report);

// Hex digest (64-bit FNV-1a per tensor, combined in field order) of a batch's bytes.
std::string BatchDigest(const Batch& batch);

}  // namespace headrace
