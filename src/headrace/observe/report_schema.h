// The run report's schema: each field of RunReport once, in the JSON's key order, with
// what the walks over it need to know. Internal to observe/: the API is report.h and
// prometheus.h; how to add a field is in README.md ("Adding a report field").
//
// The JSON writer and reader (report_json.cc) and the Prometheus exposition
// (prometheus.cc) walk these lists; the text summary (report.cc) takes the caches from
// Caches(). A walk `f` offers:
//   f.Field(key, value, options...)  a number, a string, a map of counts, a list of
//                                    strings, a latency histogram, the timeline
//   f.Section(key, present, body)    a nested object, written when `present`; a `bool&`
//                                    (r.packed) is set by the reader when the key is there
//   f.List(key, items, options...)   an array of objects, each item through its Fields()
//   f.Keyed(key, items, &T::name, label)      an object of objects keyed by a member
//   f.KeyedBy(key, flagged_key, flag, value)  one number, under flagged_key when flag
// A value the schema computes (p.fill(), "partial") or passes const is written, not read.
#pragma once

#include <iterator>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "headrace/observe/report.h"

namespace headrace::report_internal {

template <typename T, typename U>
concept ReportOf = std::is_same_v<std::remove_const_t<T>, U>;

// The Prometheus families, in the exposition's order (README.md, "The metrics").
enum class Family {
  kNone = -1,  // not exported
  kSamplesTotal, kBatchesTotal, kErrorsTotal, kPackSamplesTotal, kPackTokensTotal,
  kPackFillRatio, kBalanceStepsTotal, kBalanceRankCostTotal, kBalanceIdleRatio,
  kSourceSamplesTotal, kSourceErrorsTotal, kSourceReadBytesTotal,
  kElapsedSeconds, kWaitTimeRatio, kConsumerWaitSecondsTotal, kTimeToFirstBatchSeconds,
  kStageItemsTotal, kStageSecondsTotal, kStageUtilization, kStageConcurrency, kStageQueueFill,
  kOpSecondsTotal, kOpFramesDecodedTotal, kOpFramesTakenTotal, kOpLatencySeconds,
  kReadLatencySeconds, kNextWaitSeconds, kReadsInFlight, kBatchesReady, kMemoryBudgetBytes,
  kMemoryInFlightBytes, kMemoryInFlightPeakBytes, kScratchBytes, kRssPeakBytes, kMallocHeapBytes,
  kStorageRequestsTotal, kStorageBytesTotal, kStorageRetriesTotal, kStorageErrorsTotal,
};
using enum Family;

struct FamilyInfo {
  std::string_view name;
  std::string_view type;  // "counter", "gauge", "histogram"
  std::string_view help;
  bool always = true;  // announced with no samples too; false: only with samples
};
// Indexed by Family.
inline constexpr FamilyInfo kFamilies[] = {
    {"headrace_samples_total", "counter", "Samples delivered to the consumer."},
    {"headrace_batches_total", "counter", "Batches delivered to the consumer."},
    {"headrace_errors_total", "counter", "Samples skipped, by kind (corrupt, not_found, ...)."},
    // What packing did; its samples left out or cut are in headrace_errors_total too
    // (kinds pack_skipped, pack_truncated): data lost.
    {"headrace_pack_samples_total", "counter",
     "Samples the packer handled, by outcome (packed, truncated, skipped, failed).", false},
    {"headrace_pack_tokens_total", "counter",
     "Tokens in packed rows (batch.max_tokens: batches), by kind (real, padding, vision).", false},
    {"headrace_pack_fill_ratio", "gauge", "Real tokens / row capacity so far.", false},
    // batch.balance: the data-parallel steps this rank dealt by cost.
    {"headrace_balance_steps_total", "counter", "Steps dealt over the ranks by cost.", false},
    {"headrace_balance_rank_cost_total", "counter",
     "Step cost summed over the steps dealt, by rank (slowest_order: the slowest as the "
     "order deals the step, slowest: as balanced, mean).", false},
    {"headrace_balance_idle_ratio", "gauge",
     "Share of a step the ranks wait at its barrier for the slowest, 1 - mean / slowest, "
     "by deal (order, balanced).", false},
    // A blend (source.mix): each entry's share, labelled by its name.
    {"headrace_source_samples_total", "counter", "Samples delivered, per blend entry.", false},
    {"headrace_source_errors_total", "counter", "Samples skipped, per blend entry.", false},
    {"headrace_source_read_bytes_total", "counter", "Media bytes read, per blend entry.", false},
    {"headrace_elapsed_seconds", "gauge", "Seconds since the loader started."},
    {"headrace_wait_time_ratio", "gauge",
     "Share of the consumer's loop spent waiting for data, cold start apart."},
    {"headrace_consumer_wait_seconds_total", "counter",
     "Seconds the consumer waited for batches, cold start apart."},
    {"headrace_time_to_first_batch_seconds", "gauge", "Cold start."},
    {"headrace_stage_items_total", "counter", "Items each stage finished."},
    {"headrace_stage_seconds_total", "counter",
     "Seconds per unit of a stage's concurrency spent busy, starved (no input) or blocked "
     "(output full)."},
    {"headrace_stage_utilization", "gauge", "Busy share of a stage over the run so far."},
    {"headrace_stage_concurrency", "gauge",
     "Reads in flight allowed, CPU threads, prefetch depth."},
    {"headrace_stage_queue_fill", "gauge", "Mean occupancy of a stage's output queue, 0..1."},
    {"headrace_op_seconds_total", "counter", "Seconds each operator ran, over threads."},
    // Only when an op decodes video frames (video.decode).
    {"headrace_op_frames_decoded_total", "counter",
     "Video frames an operator's decoders produced; over headrace_op_frames_taken_total: "
     "frames decoded per frame taken.",
     false},
    {"headrace_op_frames_taken_total", "counter", "Video frames an operator took into batches.",
     false},
    {"headrace_op_latency_seconds", "histogram",
     "Time of one operator on one sample (a batch op: on one batch)."},
    {"headrace_read_latency_seconds", "histogram",
     "Time of one media read, from issue to its bytes (retries included)."},
    {"headrace_next_wait_seconds", "histogram", "The consumer's wait for one batch inside Next()."},
    {"headrace_reads_in_flight", "gauge", "Media reads in flight now."},
    {"headrace_batches_ready", "gauge", "Batches computed and waiting for the consumer."},
    {"headrace_memory_budget_bytes", "gauge", "memory.budget_bytes."},
    {"headrace_memory_in_flight_bytes", "gauge",
     "Batches in flight plus undecoded bytes, against memory.budget_bytes."},
    {"headrace_memory_in_flight_peak_bytes", "gauge", "Peak of the in-flight bytes."},
    {"headrace_scratch_bytes", "gauge", "CPU threads' scratch held now."},
    {"headrace_rss_peak_bytes", "gauge", "Peak resident memory of the process."},
    {"headrace_malloc_heap_bytes", "gauge",
     "glibc malloc's memory: taken from the system, and in allocated chunks (state).", false},
    {"headrace_storage_requests_total", "counter", "Storage requests (local: files read)."},
    {"headrace_storage_bytes_total", "counter", "Bytes read from storage."},
    {"headrace_storage_retries_total", "counter", "Storage retries, by reason."},
    {"headrace_storage_errors_total", "counter", "Reads that failed for good."},
};
static_assert(std::size(kFamilies) == static_cast<size_t>(kStorageErrorsTotal) + 1);

// A field's options, any of them in any order after its value:
struct Required {};  // JSON-in: every report has it; a report without it is refused
inline constexpr Required kRequired;
struct Live {};  // a value now, for the metrics only: not in the JSON
inline constexpr Live kLive;
struct When {  // false: left out of the JSON and the metrics (a sentinel value: -1, "")
  bool written;
};
struct Blank {  // true: the JSON writes "" (a failed run's advice)
  bool blank;
};
struct Label {  // the value labels its item's samples: Label{"stage"} gives stage="read"
  std::string_view name;
};
// The field is a sample of `family` (a Family alone: with no label of its own); its
// `label`="value" tells it from the family's other samples of its item (state="busy"). A
// map's samples are labelled `label`=its key.
struct Metric {
  constexpr Metric(Family family, std::string_view label = {}, std::string_view value = {})
      : family(family), label(label), value(value) {}
  Family family;
  std::string_view label;
  std::string_view value;
};

// The options of one field, gathered for a walk.
struct FieldOptions {
  bool required = false;
  bool live = false;
  bool written = true;
  bool blank = false;
  std::string_view label;
  Metric metric = kNone;
};
inline void Apply(FieldOptions& o, Required) { o.required = true; }
inline void Apply(FieldOptions& o, Live) { o.live = true; }
inline void Apply(FieldOptions& o, When w) { o.written = w.written; }
inline void Apply(FieldOptions& o, Blank b) { o.blank = b.blank; }
inline void Apply(FieldOptions& o, Label l) { o.label = l.name; }
inline void Apply(FieldOptions& o, Metric m) { o.metric = m; }
FieldOptions Options(const auto&... options) {
  FieldOptions o;
  (Apply(o, options), ...);
  return o;
}

// The timeline, as the JSON writes it: columns, one array per series and per stage.
struct TimelineColumns {
  const std::vector<TimelinePoint>& points;
  const std::vector<StageReport>& stages;
};

void Fields(ReportOf<StageReport> auto& s, auto& f) {
  f.Field("name", s.metrics.name, kRequired, Label{"stage"});
  f.Field("kind", s.metrics.kind);
  f.Field("concurrency", s.metrics.concurrency, kRequired, kStageConcurrency);
  f.Field("items", s.metrics.items, kRequired, kStageItemsTotal);
  f.Field("busy_s", s.metrics.busy_s, kRequired, Metric(kStageSecondsTotal, "state", "busy"));
  f.Field("starved_s", s.metrics.starved_s, Metric(kStageSecondsTotal, "state", "starved"));
  f.Field("blocked_s", s.metrics.blocked_s, Metric(kStageSecondsTotal, "state", "blocked"));
  f.Field("utilization", s.utilization, kStageUtilization);
  f.Field("queue_fill", s.metrics.queue_fill, When{s.metrics.queue_fill >= 0}, kStageQueueFill);
  f.Field("mean_latency_ms", s.metrics.mean_latency_ms, When{s.metrics.mean_latency_ms >= 0});
  f.Field("verdict", s.verdict);
}

void Fields(ReportOf<OpReport> auto& op, auto& f) {
  const bool video = op.frames_decoded >= 0;
  f.Field("name", op.name, Label{"op"});
  f.Field("entry", op.entry, When{!op.entry.empty()}, Label{"entry"});
  f.Field("busy_s", op.busy_s, kOpSecondsTotal);
  f.Field("ms_per_sample", op.ms_per_sample);
  f.Field("latency_ms", op.latency, kOpLatencySeconds);
  f.Field("gil_wait_ms_per_sample", op.gil_wait_ms_per_sample,
          When{op.gil_wait_ms_per_sample >= 0});
  f.Field("frames_decoded", op.frames_decoded, When{video}, kOpFramesDecodedTotal);
  f.Field("frames_taken", op.frames_taken, When{video}, kOpFramesTakenTotal);
  f.Field("frames_decoded_per_taken", op.frames_decoded_per_taken,
          When{video && op.frames_decoded_per_taken >= 0});
}

void Fields(ReportOf<SampleError> auto& e, auto& f) {
  f.Field("epoch", e.epoch);
  f.Field("index", e.index);
  f.Field("uri", e.uri);
  f.Field("kind", StatusCodeName(e.status.code()));
  f.Field("reason", e.status.message());
}

void Fields(ReportOf<EngineMetrics::Entry> auto& e, auto& f) {
  f.Field("name", e.name, Label{"source"});
  f.Field("samples", e.samples_delivered, kSourceSamplesTotal);
  f.Field("errors", e.samples_failed, kSourceErrorsTotal);
  f.Field("bytes_read", e.bytes_read, kSourceReadBytesTotal);
}

// Keyed by backend: {"local": {"reads": ...}, "s3": {"endpoint": ..., "requests": ...}}.
void Fields(ReportOf<StorageStats> auto& s, auto& f) {
  const bool remote = s.backend != "local";
  f.Field("reads", s.requests, When{!remote}, kStorageRequestsTotal);
  f.Field("endpoint", s.endpoint, When{remote});
  f.Field("requests", s.requests, When{remote}, kStorageRequestsTotal);
  f.Field("retries", s.retries, When{remote});
  f.Field("retries_by_reason", s.retries_by_reason, When{remote},
          Metric(kStorageRetriesTotal, "reason"));
  f.Field("throttles", s.throttles, When{remote});
  f.Field("connections", s.connections, When{remote});
  f.Field("bytes_copied", s.bytes_copied, When{remote});
  f.Field("bytes", s.bytes, kStorageBytesTotal);
  f.Field("errors", s.errors, kStorageErrorsTotal);
}

void Fields(ReportOf<BlockCacheStats> auto& c, auto& f) {
  f.Field("block_bytes", c.block_bytes);
  f.Field("capacity_bytes", c.capacity_bytes);
  f.Field("block_reads", c.block_reads);
  f.Field("block_hits", c.block_hits);
  f.Field("block_waits", c.block_waits);
  f.Field("evictions", c.evictions);
  f.Field("drops", c.drops);
  f.Field("bytes_held", c.bytes_held);
  f.Field("peak_bytes", c.peak_bytes);
  f.Field("bytes_copied", c.bytes_copied);
}

void Fields(ReportOf<RowGroupCacheStats> auto& c, auto& f) {
  f.Field("capacity_bytes", c.capacity_bytes);
  f.Field("fetches", c.fetches);
  f.Field("fetch_waits", c.fetch_waits);
  f.Field("fetch_hits", c.fetch_hits);
  f.Field("decodes", c.decodes);
  f.Field("decode_waits", c.decode_waits);
  f.Field("refetches", c.refetches);
  f.Field("evictions", c.evictions);
  f.Field("bytes_held", c.bytes_held);
  f.Field("peak_bytes", c.peak_bytes);
}

// The caches a source may keep in front of its storage, one entry each: its JSON key,
// whether the run had one, its stats (each with Fields() above and a text line).
void Caches(ReportOf<RunReport> auto& r, auto&& each) {
  each("block_cache", r.has_block_cache, r.block_cache);
  each("row_group_cache", r.has_row_group_cache, r.row_group_cache);
}

// batch.pack: what the packer did (a token budget, batch.max_tokens, keys "max_tokens").
void PackFields(ReportOf<RunReport> auto& r, auto& f) {
  auto& p = r.pack;
  f.KeyedBy("seq_len", "max_tokens", r.pack_budget, r.pack_seq_len);
  f.Field("rows", p.rows);
  f.Field("samples", p.samples, Metric(kPackSamplesTotal, "outcome", "packed"));
  f.Field("tokens", p.tokens, Metric(kPackTokensTotal, "kind", "real"));
  f.Field("padding_tokens", p.padding_tokens, Metric(kPackTokensTotal, "kind", "padding"));
  f.Field("fill", p.fill(), kPackFillRatio);
  f.Field("vision_tokens", p.vision_tokens, Metric(kPackTokensTotal, "kind", "vision"));
  f.Field("truncated", p.truncated, Metric(kPackSamplesTotal, "outcome", "truncated"));
  f.Field("skipped", p.skipped, Metric(kPackSamplesTotal, "outcome", "skipped"));
  f.Field("failed", p.failed, Metric(kPackSamplesTotal, "outcome", "failed"));
  f.Field("window_samples", p.window_samples);
  f.Field("window_bytes", p.window_bytes);
  f.Field("max_window_bytes", p.max_window_bytes);
  f.Field("bytes_copied", p.bytes_copied);
  // Not read back: its total, p.batches, is not written.
  f.Field("planned_batches", std::as_const(p.planned_batches));
  f.Section("memory", true, [&] {
    f.Field("reused", p.memory_reused);
    f.Field("fresh", p.memory_fresh);
  });
}

// batch.balance: the steps dealt by cost and the ranks' costs in them.
void BalanceFields(ReportOf<RunReport> auto& r, auto& f) {
  auto& b = r.balance;
  f.Field("steps", b.steps, kBalanceStepsTotal);
  f.Field("untold", b.untold);
  f.Field("slowest_rank_cost_order", b.max_before,
          Metric(kBalanceRankCostTotal, "rank", "slowest_order"));
  f.Field("slowest_rank_cost", b.max_after, Metric(kBalanceRankCostTotal, "rank", "slowest"));
  f.Field("mean_rank_cost", b.mean, Metric(kBalanceRankCostTotal, "rank", "mean"));
  f.Field("idle_ratio_order", IdleShare(b.mean, b.max_before),
          Metric(kBalanceIdleRatio, "deal", "order"));
  f.Field("idle_ratio", IdleShare(b.mean, b.max_after), Metric(kBalanceIdleRatio, "deal", "balanced"));
  f.Field("short_ranks", b.short_ranks);
}

void Fields(ReportOf<RunReport> auto& r, auto& f) {
  f.Field("samples", r.samples, kRequired, kSamplesTotal);
  f.Field("batches", r.batches, kRequired, kBatchesTotal);
  f.Field("elapsed_s", r.elapsed_s, kRequired, kElapsedSeconds);
  f.Field("samples_per_s", r.samples_per_s, kRequired);
  f.Field("mb_per_s", r.mb_per_s);
  f.Field("wait_time_ratio", r.wait_time_ratio, kRequired, kWaitTimeRatio);
  f.Field("wait_time_ratio_with_cold_start", r.wait_time_ratio_with_cold_start);
  f.Field("time_to_first_batch_s", r.time_to_first_batch_s, kTimeToFirstBatchSeconds);
  f.Field("consumer_wait_s", r.consumer_wait_s, kConsumerWaitSecondsTotal);
  f.Field("consumer_busy_s", r.consumer_busy_s);
  f.Field("peak_rss_bytes", r.peak_rss_bytes, kRssPeakBytes);
  f.Field("baseline_rss_bytes", r.baseline_rss_bytes);
  f.Field("memory_budget_bytes", r.memory_budget_bytes, kRequired, kMemoryBudgetBytes);
  f.Field("budget_peak_bytes", r.budget_peak_bytes, kRequired, kMemoryInFlightPeakBytes);
  f.Field("io_budget_bytes", r.io_budget_bytes);
  f.Field("batch_budget_bytes", r.batch_budget_bytes);
  f.Field("full_batch_bytes", r.full_batch_bytes);
  f.Section("batch_memory", true, [&] {
    f.Field("reused", r.batch_memory_reused);
    f.Field("fresh", r.batch_memory_fresh);
    f.Field("rows_waits", r.rows_waits);
    f.Field("rows_wait_s", r.rows_wait_s);
  });
  f.Section("memory", true, [&] {  // outside memory.budget_bytes
    f.Field("manifest_bytes", r.manifest_bytes);
    f.Field("manifest_mapped_bytes", r.manifest_mapped_bytes);
    f.Field("scratch_bytes", r.scratch_bytes, kScratchBytes);
    f.Field("scratch_peak_bytes", r.scratch_peak_bytes);
    f.Field("scratch_sample_peak_bytes", r.scratch_sample_peak_bytes);
    f.Field("scratch_bytes_per_thread", r.scratch_bytes_per_thread);
    f.Field("decode_bytes_per_thread", r.decode_bytes_per_thread);
    // Now, when the report was made: RSS, and what malloc holds of it (core/clock.h).
    f.Field("rss_bytes", r.rss_bytes, When{r.rss_bytes > 0});
    f.Field("heap_system_bytes", r.heap.system_bytes, When{r.heap.system_bytes >= 0},
            Metric(kMallocHeapBytes, "state", "system"));
    f.Field("heap_in_use_bytes", r.heap.in_use_bytes, When{r.heap.in_use_bytes >= 0},
            Metric(kMallocHeapBytes, "state", "in_use"));
    f.Field("regions_mapped_bytes", r.regions_mapped_bytes, When{r.regions_mapped_bytes > 0});
  });
  f.Section("pack", r.packed, [&] { PackFields(r, f); });
  f.Section("balance", r.balanced, [&] { BalanceFields(r, f); });
  f.Field("bytes_copied_per_sample", r.bytes_copied_per_sample);
  f.Section("size_index", r.stale_entries.checked, [&] {
    f.Field("stale", r.stale_entries.count);
    f.Field("first_stale", r.stale_entries.first);
  });
  f.Section("ranged_reads", r.ranged_reads.requests > 0, [&] {
    f.Field("requests", r.ranged_reads.requests);
    f.Field("bytes", r.ranged_reads.bytes);
    f.Field("unplanned", r.ranged_reads.unplanned);
  });
  f.Field("cpu_threads", r.cpu_threads, kRequired);
  f.Field("batch_size", r.batch_size, kRequired);
  f.Field("trainer_step_ms", r.trainer_step_ms, kRequired);
  f.Section("shuffle", true, [&] {
    f.Field("neighbour_distance", r.neighbour_distance);
    f.Field("uniform_neighbour_distance", r.uniform_neighbour_distance);
    f.Field("quality", r.shuffle_quality);
  });
  f.List("sources", r.entries, When{!r.entries.empty()});
  f.Section("errors", true, [&] {
    f.Field("total", r.errors_total, Metric(kErrorsTotal, "kind", "all"));
    f.Field("by_kind", r.errors_by_kind, Metric(kErrorsTotal, "kind"));
    f.List("first", std::as_const(r.first_errors));  // a Status is not read back
  });
  f.List("stages", r.stages, kRequired);
  f.List("ops", r.ops);
  // Quantiles from the histograms (core/histogram.h: exact to a bucket's width).
  f.Section("latency_ms", true, [&] {
    f.Field("read", r.read_latency, kReadLatencySeconds);
    f.Field("next", r.next_wait, kNextWaitSeconds);
  });
  f.Field("timeline", TimelineColumns{r.timeline, r.stages}, When{!r.timeline.empty()});
  f.Keyed("storage", r.storage, &StorageStats::backend, "backend");
  f.Field("source", r.source);
  Caches(r, [&](std::string_view key, auto& has, auto& stats) {
    f.Section(key, has, [&] { Fields(stats, f); });
  });
  f.Field("bottleneck", r.bottleneck);
  f.Field("advice", r.advice, Blank{!r.failure.empty()});
  f.Field("failure", r.failure, When{!r.failure.empty()});
  f.Field("partial", !r.interrupted_by.empty());
  f.Field("interrupted_by", r.interrupted_by, When{!r.interrupted_by.empty()});
  f.Field("batch_digests", r.batch_digests, When{!r.batch_digests.empty()});
  // Now, for live views.
  f.Field("reads_inflight", r.reads_inflight, kLive, kReadsInFlight);
  f.Field("batches_ready", r.batches_ready, kLive, kBatchesReady);
  f.Field("budget_used_bytes", r.budget_used_bytes, kLive, kMemoryInFlightBytes);
}


}  // namespace headrace::report_internal
