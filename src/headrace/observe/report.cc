#include "headrace/observe/report.h"

#include <algorithm>
#include <simdjson.h>

#include <cstdio>
#include <type_traits>

#include "headrace/core/json_writer.h"
#include "headrace/core/rng.h"
#include "headrace/core/strings.h"

namespace headrace {
namespace {

// Below this share of its loop waiting for data, the consumer is the bottleneck.
constexpr double kTrainerBoundWaitRatio = 0.05;

// A stage busy at least this share of the time limits throughput.
constexpr double kBoundUtilization = 0.75;

std::string Verdict(const StageMetrics& s, double utilization) {
  if (utilization >= kBoundUtilization) return s.kind == "io" ? "io-bound" : "cpu-bound";
  return s.blocked_s >= s.starved_s ? "blocked" : "starved";
}

// {"count": n, "mean": .., "p50": .., "p90": .., "p99": ..} in units of seconds × scale.
void LatencyJson(JsonWriter& w, const HistogramSnapshot& h, double scale) {
  w.Key("count").Int(h.count);
  w.Key("mean").Double(h.Mean() * scale);
  w.Key("p50").Double(h.Quantile(0.5) * scale);
  w.Key("p90").Double(h.Quantile(0.9) * scale);
  w.Key("p99").Double(h.Quantile(0.99) * scale);
}

void Diagnose(RunReport& r, const Loader& loader) {
  const StageReport* read = nullptr;
  const StageReport* cpu = nullptr;
  for (const auto& s : r.stages) {
    if (s.metrics.name == "read") read = &s;
    if (s.metrics.name == "cpu") cpu = &s;
  }
  if (r.batches > 1 && r.wait_time_ratio <= kTrainerBoundWaitRatio) {
    r.bottleneck = "trainer";
    r.advice = "the pipeline keeps up: the trainer waits " +
               StrFormat("%.1f%%", 100 * r.wait_time_ratio) + " of its loop" +
               (cpu ? ", CPU stage " + StrFormat("%.0f%%", 100 * cpu->utilization) + " busy" : "") +
               "; nothing to change";
    return;
  }
  if (cpu != nullptr && cpu->utilization >= kBoundUtilization) {
    const OpReport* costly = nullptr;
    for (const auto& op : r.ops) {
      if (costly == nullptr || op.ms_per_sample > costly->ms_per_sample) costly = &op;
    }
    r.bottleneck = "cpu";
    r.advice = "CPU-bound: " + std::to_string(r.cpu_threads) +
               " threads are busy; raise execution.cpu_threads (this machine has " +
               std::to_string(AvailableCores()) + " cores) or add CPU workers on other nodes" +
               (costly ? "; costliest op " + costly->name + " at " +
                             StrFormat("%.2f ms/sample", costly->ms_per_sample)
                       : "");
    return;
  }
  if (read != nullptr && read->utilization >= kBoundUtilization) {
    r.bottleneck = "read";
    r.advice =
        "I/O-bound: reads are in flight most of the time and the CPU stage starves; "
        "raise execution.io_inflight (now " +
        std::to_string(loader.io_inflight()) + ")";
    return;
  }
  r.bottleneck = "batch";
  r.advice =
      "neither reads nor CPUs are saturated while the trainer waits: raise "
      "prefetch.depth (now " +
      std::to_string(loader.spec().prefetch.depth) +
      ") or memory.budget_bytes so more batches are computed ahead";
}

}  // namespace

RunReport BuildRunReport(const Loader& loader, int64_t baseline_rss_bytes) {
  const ConsumerStats c = loader.consumer_stats();
  const EngineMetrics m = loader.engine_metrics();
  RunReport r;
  r.samples = c.samples;
  r.batches = c.batches;
  r.elapsed_s = c.elapsed_s;
  r.samples_per_s = c.elapsed_s > 0 ? c.samples / c.elapsed_s : 0;
  r.mb_per_s = m.elapsed_s > 0 ? m.bytes_read / 1e6 / m.elapsed_s : 0;
  r.ranged_reads = m.ranged_reads;
  r.wait_time_ratio = c.wait_time_ratio();
  r.wait_time_ratio_with_cold_start =
      c.elapsed_s > 0 ? (c.wait_s + c.time_to_first_batch_s) / c.elapsed_s : 0;
  r.time_to_first_batch_s = c.time_to_first_batch_s;
  r.consumer_wait_s = c.wait_s;
  r.consumer_busy_s = c.busy_s;
  r.peak_rss_bytes = PeakRssBytes();
  r.baseline_rss_bytes = baseline_rss_bytes;
  r.memory_budget_bytes = loader.memory_budget_bytes();
  if (const std::optional<PackStats> pack = loader.pack_stats(); pack.has_value()) {
    r.packed = true;
    r.pack = *pack;
    r.pack_seq_len = loader.spec().batch.pack_options().seq_len;
    r.pack_budget = loader.spec().batch.max_tokens > 0;
  } else if (loader.spec().batch.regroups()) {
    r.packed = true;  // nothing delivered yet
    r.pack_seq_len = loader.spec().batch.pack_options().seq_len;
    r.pack_budget = loader.spec().batch.max_tokens > 0;
  }
  r.budget_peak_bytes = m.budget_peak_bytes;
  r.io_budget_bytes = m.io_budget_bytes;
  r.batch_budget_bytes = m.batch_budget_bytes;
  r.full_batch_bytes = m.full_batch_bytes;
  r.batch_memory_reused = m.batch_memory_reused;
  r.batch_memory_fresh = m.batch_memory_fresh;
  r.manifest_bytes = loader.manifest_bytes();
  r.manifest_mapped_bytes = loader.manifest_mapped_bytes();
  r.scratch_bytes = m.scratch_bytes;
  r.scratch_peak_bytes = m.scratch_peak_bytes;
  r.scratch_sample_peak_bytes = m.scratch_sample_peak_bytes;
  r.scratch_bytes_per_thread = m.scratch_retain_bytes;
  r.decode_bytes_per_thread = DecodeBytesPerThread(loader.spec().memory);
  // With packing, the packer's copies too (its batches are what the consumer gets).
  const int64_t copied = m.bytes_copied + (r.packed ? r.pack.bytes_copied : 0);
  r.bytes_copied_per_sample =
      m.samples_delivered > 0 ? static_cast<double>(copied) / m.samples_delivered : 0;
  r.cpu_threads = loader.cpu_threads();
  r.batch_size = loader.spec().batch.size;
  r.trainer_step_ms = loader.spec().trainer.step_ms;
  r.errors_total = m.samples_failed;
  r.errors_by_kind = m.errors_by_kind;
  r.entries = m.entries;
  r.neighbour_distance = m.neighbour_distance;
  if (const auto n = static_cast<double>(loader.num_samples()); n > 0) {
    r.uniform_neighbour_distance = (n * n - 1) / (3 * n);
    r.shuffle_quality = r.uniform_neighbour_distance > 0
                            ? r.neighbour_distance / r.uniform_neighbour_distance
                            : 0;
  }
  r.first_errors = m.first_errors;
  for (const StageMetrics& s : m.stages) {
    StageReport sr;
    sr.metrics = s;
    sr.utilization = m.elapsed_s > 0 ? std::min(1.0, s.busy_s / m.elapsed_s) : 0;
    sr.verdict = Verdict(s, sr.utilization);
    r.stages.push_back(std::move(sr));
  }
  for (const OpMetrics& op : m.ops) {
    const double per_item_ms = op.items > 0 ? 1e3 / op.items : 0.0;
    r.ops.push_back(OpReport{op.name, op.busy_s, op.busy_s * per_item_ms, op.latency,
                             op.gil_wait_s >= 0 ? op.gil_wait_s * per_item_ms : -1.0,
                             op.frames_decoded, op.frames_taken,
                             op.frames_decoded >= 0 && op.frames_taken > 0
                                 ? static_cast<double>(op.frames_decoded) / op.frames_taken
                                 : -1.0,
                             op.entry});
  }
  r.read_latency = m.read_latency;
  r.next_wait = m.next_wait;
  r.budget_used_bytes = m.budget_used_bytes;
  r.batches_ready = m.batches_ready;
  r.reads_inflight = m.reads_inflight;
  r.total_batches =
      loader.total_batches() == EpochOrder::kUnboundedBatches ? -1 : loader.total_batches();
  r.storage = loader.storage_stats();
  r.source = loader.source();
  if (const BlockCache* cache = loader.block_cache(); cache != nullptr) {
    r.has_block_cache = true;
    r.block_cache = cache->CacheStats();
  }
  if (const ParquetRowGroupCache* cache = loader.row_group_cache(); cache != nullptr) {
    r.has_row_group_cache = true;
    r.row_group_cache = cache->CacheStats();
  }
  Diagnose(r, loader);
  return r;
}

std::string RunReportToJson(const RunReport& r) {
  JsonWriter w;
  w.BeginObject();
  w.Key("samples").Int(r.samples);
  w.Key("batches").Int(r.batches);
  w.Key("elapsed_s").Double(r.elapsed_s);
  w.Key("samples_per_s").Double(r.samples_per_s);
  w.Key("mb_per_s").Double(r.mb_per_s);
  w.Key("wait_time_ratio").Double(r.wait_time_ratio);
  w.Key("wait_time_ratio_with_cold_start").Double(r.wait_time_ratio_with_cold_start);
  w.Key("time_to_first_batch_s").Double(r.time_to_first_batch_s);
  w.Key("consumer_wait_s").Double(r.consumer_wait_s);
  w.Key("consumer_busy_s").Double(r.consumer_busy_s);
  w.Key("peak_rss_bytes").Int(r.peak_rss_bytes);
  w.Key("baseline_rss_bytes").Int(r.baseline_rss_bytes);
  w.Key("memory_budget_bytes").Int(r.memory_budget_bytes);
  w.Key("budget_peak_bytes").Int(r.budget_peak_bytes);
  w.Key("io_budget_bytes").Int(r.io_budget_bytes);
  w.Key("batch_budget_bytes").Int(r.batch_budget_bytes);
  w.Key("full_batch_bytes").Int(r.full_batch_bytes);
  w.Key("batch_memory").BeginObject().Key("reused").Int(r.batch_memory_reused);
  w.Key("fresh").Int(r.batch_memory_fresh).EndObject();
  w.Key("memory").BeginObject();
  w.Key("manifest_bytes").Int(r.manifest_bytes);
  w.Key("manifest_mapped_bytes").Int(r.manifest_mapped_bytes);
  w.Key("scratch_bytes").Int(r.scratch_bytes);
  w.Key("scratch_peak_bytes").Int(r.scratch_peak_bytes);
  w.Key("scratch_sample_peak_bytes").Int(r.scratch_sample_peak_bytes);
  w.Key("scratch_bytes_per_thread").Int(r.scratch_bytes_per_thread);
  w.Key("decode_bytes_per_thread").Int(r.decode_bytes_per_thread);
  w.EndObject();
  if (r.packed) {
    const PackStats& p = r.pack;
    w.Key("pack").BeginObject();
    w.Key(r.pack_budget ? "max_tokens" : "seq_len").Int(r.pack_seq_len);
    w.Key("rows").Int(p.rows).Key("samples").Int(p.samples);
    w.Key("tokens").Int(p.tokens).Key("padding_tokens").Int(p.padding_tokens);
    w.Key("fill").Double(p.fill()).Key("vision_tokens").Int(p.vision_tokens);
    w.Key("truncated").Int(p.truncated).Key("skipped").Int(p.skipped).Key("failed").Int(p.failed);
    w.Key("window_samples").Int(p.window_samples).Key("window_bytes").Int(p.window_bytes);
    w.Key("max_window_bytes").Int(p.max_window_bytes).Key("bytes_copied").Int(p.bytes_copied);
    w.Key("planned_batches").Int(p.planned_batches);
    w.Key("memory").BeginObject().Key("reused").Int(p.memory_reused);
    w.Key("fresh").Int(p.memory_fresh).EndObject();
    w.EndObject();
  }
  w.Key("bytes_copied_per_sample").Double(r.bytes_copied_per_sample);
  if (r.ranged_reads.requests > 0) {
    w.Key("ranged_reads").BeginObject().Key("requests").Int(r.ranged_reads.requests);
    w.Key("bytes").Int(r.ranged_reads.bytes).Key("unplanned").Int(r.ranged_reads.unplanned);
    w.EndObject();
  }
  w.Key("cpu_threads").Int(r.cpu_threads);
  w.Key("batch_size").Int(r.batch_size);
  w.Key("trainer_step_ms").Double(r.trainer_step_ms);
  w.Key("shuffle").BeginObject();
  w.Key("neighbour_distance").Double(r.neighbour_distance);
  w.Key("uniform_neighbour_distance").Double(r.uniform_neighbour_distance);
  w.Key("quality").Double(r.shuffle_quality).EndObject();
  if (!r.entries.empty()) {
    w.Key("sources").BeginArray();
    for (const EngineMetrics::Entry& e : r.entries) {
      w.BeginObject().Key("name").String(e.name);
      w.Key("samples").Int(e.samples_delivered).Key("errors").Int(e.samples_failed);
      w.Key("bytes_read").Int(e.bytes_read).EndObject();
    }
    w.EndArray();
  }
  w.Key("errors").BeginObject();
  w.Key("total").Int(r.errors_total);
  w.Key("by_kind").BeginObject();
  for (const auto& [kind, n] : r.errors_by_kind) w.Key(kind).Int(n);
  w.EndObject();
  w.Key("first").BeginArray();
  for (const SampleError& e : r.first_errors) {
    w.BeginObject();
    w.Key("epoch").Int(e.epoch).Key("index").Int(e.index).Key("uri").String(e.uri);
    w.Key("kind").String(StatusCodeName(e.status.code()));
    w.Key("reason").String(e.status.message());
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.Key("stages").BeginArray();
  for (const StageReport& s : r.stages) {
    w.BeginObject();
    w.Key("name").String(s.metrics.name);
    w.Key("kind").String(s.metrics.kind);
    w.Key("concurrency").Int(s.metrics.concurrency);
    w.Key("items").Int(s.metrics.items);
    w.Key("busy_s").Double(s.metrics.busy_s);
    w.Key("starved_s").Double(s.metrics.starved_s);
    w.Key("blocked_s").Double(s.metrics.blocked_s);
    w.Key("utilization").Double(s.utilization);
    if (s.metrics.queue_fill >= 0) w.Key("queue_fill").Double(s.metrics.queue_fill);
    if (s.metrics.mean_latency_ms >= 0) w.Key("mean_latency_ms").Double(s.metrics.mean_latency_ms);
    w.Key("verdict").String(s.verdict);
    w.EndObject();
  }
  w.EndArray();
  w.Key("ops").BeginArray();
  for (const OpReport& op : r.ops) {
    w.BeginObject();
    w.Key("name").String(op.name);
    if (!op.entry.empty()) w.Key("entry").String(op.entry);
    w.Key("busy_s").Double(op.busy_s);
    w.Key("ms_per_sample").Double(op.ms_per_sample);
    w.Key("latency_ms").BeginObject();
    LatencyJson(w, op.latency, 1e3);
    w.EndObject();
    if (op.gil_wait_ms_per_sample >= 0) {
      w.Key("gil_wait_ms_per_sample").Double(op.gil_wait_ms_per_sample);
    }
    if (op.frames_decoded >= 0) {
      w.Key("frames_decoded").Int(op.frames_decoded).Key("frames_taken").Int(op.frames_taken);
      if (op.frames_decoded_per_taken >= 0) {
        w.Key("frames_decoded_per_taken").Double(op.frames_decoded_per_taken);
      }
    }
    w.EndObject();
  }
  w.EndArray();
  // Quantiles from the histograms (core/histogram.h: exact to a bucket's width).
  w.Key("latency_ms").BeginObject();
  w.Key("read").BeginObject();
  LatencyJson(w, r.read_latency, 1e3);
  w.EndObject();
  w.Key("next").BeginObject();
  LatencyJson(w, r.next_wait, 1e3);
  w.EndObject();
  w.EndObject();
  if (!r.timeline.empty()) {
    // Columns, not one object per point: a long run's timeline stays small.
    w.Key("timeline").BeginObject();
    w.Key("stages").BeginArray();
    for (const StageReport& s : r.stages) w.String(s.metrics.name);
    w.EndArray();
    w.Key("t_s").BeginArray();
    for (const TimelinePoint& p : r.timeline) w.Double(p.t_s);
    w.EndArray();
    w.Key("samples_per_s").BeginArray();
    for (const TimelinePoint& p : r.timeline) w.Double(p.samples_per_s);
    w.EndArray();
    w.Key("wait_ratio").BeginArray();
    for (const TimelinePoint& p : r.timeline) w.Double(p.wait_ratio);
    w.EndArray();
    w.Key("budget_used").BeginArray();
    for (const TimelinePoint& p : r.timeline) w.Double(p.budget_used);
    w.EndArray();
    w.Key("utilization").BeginArray();  // one array per stage
    for (size_t i = 0; i < r.stages.size(); ++i) {
      w.BeginArray();
      for (const TimelinePoint& p : r.timeline) {
        w.Double(i < p.utilization.size() ? p.utilization[i] : 0.0);
      }
      w.EndArray();
    }
    w.EndArray();
    w.EndObject();
  }
  // Keyed by backend: {"local": {...}, "s3": {"endpoint": ..., "requests": ...}}.
  w.Key("storage").BeginObject();
  for (const StorageStats& s : r.storage) {
    w.Key(s.backend).BeginObject();
    if (s.backend == "local") {
      w.Key("reads").Int(s.requests);
    } else {
      w.Key("endpoint").String(s.endpoint);
      w.Key("requests").Int(s.requests);
      w.Key("retries").Int(s.retries);
      w.Key("retries_by_reason").BeginObject();
      for (const auto& [reason, n] : s.retries_by_reason) w.Key(reason).Int(n);
      w.EndObject();
      w.Key("throttles").Int(s.throttles);
      w.Key("connections").Int(s.connections);
      w.Key("bytes_copied").Int(s.bytes_copied);
    }
    w.Key("bytes").Int(s.bytes);
    w.Key("errors").Int(s.errors);
    w.EndObject();
  }
  w.EndObject();
  w.Key("source").String(r.source);
  if (r.has_block_cache) {
    const BlockCacheStats& c = r.block_cache;
    w.Key("block_cache").BeginObject();
    w.Key("block_bytes").Int(c.block_bytes);
    w.Key("capacity_bytes").Int(c.capacity_bytes);
    w.Key("block_reads").Int(c.block_reads);
    w.Key("block_hits").Int(c.block_hits);
    w.Key("block_waits").Int(c.block_waits);
    w.Key("evictions").Int(c.evictions);
    w.Key("drops").Int(c.drops);
    w.Key("bytes_held").Int(c.bytes_held);
    w.Key("peak_bytes").Int(c.peak_bytes);
    w.Key("bytes_copied").Int(c.bytes_copied);
    w.EndObject();
  }
  if (r.has_row_group_cache) {
    const RowGroupCacheStats& c = r.row_group_cache;
    w.Key("row_group_cache").BeginObject();
    w.Key("capacity_bytes").Int(c.capacity_bytes);
    w.Key("fetches").Int(c.fetches);
    w.Key("fetch_waits").Int(c.fetch_waits);
    w.Key("fetch_hits").Int(c.fetch_hits);
    w.Key("decodes").Int(c.decodes);
    w.Key("decode_waits").Int(c.decode_waits);
    w.Key("refetches").Int(c.refetches);
    w.Key("evictions").Int(c.evictions);
    w.Key("bytes_held").Int(c.bytes_held);
    w.Key("peak_bytes").Int(c.peak_bytes);
    w.EndObject();
  }
  w.Key("bottleneck").String(r.bottleneck);
  w.Key("advice").String(r.failure.empty() ? r.advice : "");
  if (!r.failure.empty()) w.Key("failure").String(r.failure);
  w.Key("partial").Bool(!r.interrupted_by.empty());
  if (!r.interrupted_by.empty()) w.Key("interrupted_by").String(r.interrupted_by);
  if (!r.batch_digests.empty()) {
    w.Key("batch_digests").BeginArray();
    for (const auto& d : r.batch_digests) w.String(d);
    w.EndArray();
  }
  w.EndObject();
  return w.str() + "\n";
}

Result<RunReport> RunReportFromJson(std::string_view json_text) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json_text.data(), json_text.size()).get(doc) != simdjson::SUCCESS ||
      !doc.is_object()) {
    return Status::InvalidArgument("not a JSON object");
  }
  // A number (integers convert) or a string under `key`; a key written by every report
  // is required, the others (added later, or only for some stages) are optional.
  const auto number = [](simdjson::dom::element e, std::string_view key, auto* out) {
    double v = 0;
    if (e[key].get(v) != simdjson::SUCCESS) return false;
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(v);
    return true;
  };
  const auto text = [](simdjson::dom::element e, std::string_view key, std::string* out) {
    std::string_view v;
    if (e[key].get(v) != simdjson::SUCCESS) return false;
    *out = std::string(v);
    return true;
  };
  RunReport r;
  std::string missing;
  const auto need = [&](bool found, std::string_view key) {
    if (!found && missing.empty()) missing = std::string(key);
  };
  need(number(doc, "samples", &r.samples), "samples");
  need(number(doc, "batches", &r.batches), "batches");
  need(number(doc, "elapsed_s", &r.elapsed_s), "elapsed_s");
  need(number(doc, "samples_per_s", &r.samples_per_s), "samples_per_s");
  need(number(doc, "wait_time_ratio", &r.wait_time_ratio), "wait_time_ratio");
  need(number(doc, "cpu_threads", &r.cpu_threads), "cpu_threads");
  need(number(doc, "batch_size", &r.batch_size), "batch_size");
  need(number(doc, "trainer_step_ms", &r.trainer_step_ms), "trainer_step_ms");
  need(number(doc, "memory_budget_bytes", &r.memory_budget_bytes), "memory_budget_bytes");
  need(number(doc, "budget_peak_bytes", &r.budget_peak_bytes), "budget_peak_bytes");
  number(doc, "mb_per_s", &r.mb_per_s);
  number(doc, "wait_time_ratio_with_cold_start", &r.wait_time_ratio_with_cold_start);
  number(doc, "time_to_first_batch_s", &r.time_to_first_batch_s);
  number(doc, "consumer_wait_s", &r.consumer_wait_s);
  number(doc, "consumer_busy_s", &r.consumer_busy_s);
  number(doc, "peak_rss_bytes", &r.peak_rss_bytes);
  number(doc, "io_budget_bytes", &r.io_budget_bytes);
  number(doc, "batch_budget_bytes", &r.batch_budget_bytes);
  number(doc, "full_batch_bytes", &r.full_batch_bytes);
  number(doc, "bytes_copied_per_sample", &r.bytes_copied_per_sample);
  if (simdjson::dom::element ranged; doc["ranged_reads"].get(ranged) == simdjson::SUCCESS) {
    number(ranged, "requests", &r.ranged_reads.requests);
    number(ranged, "bytes", &r.ranged_reads.bytes);
    number(ranged, "unplanned", &r.ranged_reads.unplanned);
  }
  text(doc, "source", &r.source);
  text(doc, "bottleneck", &r.bottleneck);
  text(doc, "advice", &r.advice);
  text(doc, "interrupted_by", &r.interrupted_by);
  text(doc, "failure", &r.failure);
  if (simdjson::dom::element errors; doc["errors"].get(errors) == simdjson::SUCCESS) {
    number(errors, "total", &r.errors_total);
    if (simdjson::dom::object kinds; errors["by_kind"].get(kinds) == simdjson::SUCCESS) {
      for (auto [kind, n] : kinds) {
        if (int64_t v = 0; n.get(v) == simdjson::SUCCESS) r.errors_by_kind[std::string(kind)] = v;
      }
    }
  }
  if (simdjson::dom::element pack; doc["pack"].get(pack) == simdjson::SUCCESS) {
    r.packed = true;
    r.pack_budget = pack["max_tokens"].error() == simdjson::SUCCESS;
    number(pack, r.pack_budget ? "max_tokens" : "seq_len", &r.pack_seq_len);
    number(pack, "rows", &r.pack.rows);
    number(pack, "samples", &r.pack.samples);
    number(pack, "tokens", &r.pack.tokens);
    number(pack, "padding_tokens", &r.pack.padding_tokens);
    number(pack, "vision_tokens", &r.pack.vision_tokens);
    number(pack, "truncated", &r.pack.truncated);
    number(pack, "skipped", &r.pack.skipped);
    number(pack, "failed", &r.pack.failed);
  }
  if (simdjson::dom::element shuffle; doc["shuffle"].get(shuffle) == simdjson::SUCCESS) {
    number(shuffle, "neighbour_distance", &r.neighbour_distance);
    number(shuffle, "uniform_neighbour_distance", &r.uniform_neighbour_distance);
    number(shuffle, "quality", &r.shuffle_quality);
  }
  simdjson::dom::array stages;
  need(doc["stages"].get(stages) == simdjson::SUCCESS, "stages");
  if (missing.empty()) {
    for (simdjson::dom::element e : stages) {
      StageReport s;
      need(text(e, "name", &s.metrics.name), "stages[].name");
      text(e, "kind", &s.metrics.kind);
      text(e, "verdict", &s.verdict);
      need(number(e, "concurrency", &s.metrics.concurrency), "stages[].concurrency");
      need(number(e, "items", &s.metrics.items), "stages[].items");
      need(number(e, "busy_s", &s.metrics.busy_s), "stages[].busy_s");
      number(e, "starved_s", &s.metrics.starved_s);
      number(e, "blocked_s", &s.metrics.blocked_s);
      number(e, "utilization", &s.utilization);
      number(e, "queue_fill", &s.metrics.queue_fill);
      number(e, "mean_latency_ms", &s.metrics.mean_latency_ms);
      r.stages.push_back(std::move(s));
    }
  }
  simdjson::dom::array ops;
  if (doc["ops"].get(ops) == simdjson::SUCCESS) {
    for (simdjson::dom::element e : ops) {
      OpReport op;
      text(e, "name", &op.name);
      text(e, "entry", &op.entry);
      number(e, "busy_s", &op.busy_s);
      number(e, "ms_per_sample", &op.ms_per_sample);
      number(e, "gil_wait_ms_per_sample", &op.gil_wait_ms_per_sample);
      number(e, "frames_decoded", &op.frames_decoded);
      number(e, "frames_taken", &op.frames_taken);
      number(e, "frames_decoded_per_taken", &op.frames_decoded_per_taken);
      r.ops.push_back(std::move(op));
    }
  }
  if (!missing.empty()) {
    return Status::InvalidArgument("not a run report (`headrace run --report`): no '" + missing +
                                   "'");
  }
  return r;
}

std::string RunReportToText(const RunReport& r) {
  std::string out;
  char line[256];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    out += line;
  };
  add("Headrace run: %lld samples in %lld batches of up to %lld, %.2f s, %d CPU threads\n",
      static_cast<long long>(r.samples), static_cast<long long>(r.batches),
      static_cast<long long>(r.batch_size), r.elapsed_s, r.cpu_threads);
  if (!r.interrupted_by.empty()) {
    add("  interrupted       by %s: a partial report\n", r.interrupted_by.c_str());
  }
  add("  throughput        %.1f samples/s (%.1f MB/s read)\n", r.samples_per_s, r.mb_per_s);
  add("  wait-time ratio   %.3f  (trainer step %.1f ms; %.3f with cold start)\n", r.wait_time_ratio,
      r.trainer_step_ms, r.wait_time_ratio_with_cold_start);
  add("  first batch       %.3f s\n", r.time_to_first_batch_s);
  add("  memory            peak RSS %.1f MiB (baseline %.1f MiB), queues peak %.1f of %.1f MiB "
      "budget\n",
      r.peak_rss_bytes / 1048576.0, r.baseline_rss_bytes / 1048576.0,
      r.budget_peak_bytes / 1048576.0, r.memory_budget_bytes / 1048576.0);
  if (r.manifest_mapped_bytes > 0) {
    add("  manifest lines    %.1f MiB mapped (page cache, shared), %.1f MiB of offsets\n",
        r.manifest_mapped_bytes / 1048576.0, r.manifest_bytes / 1048576.0);
  }
  add("  outside budget    manifest %.1f MiB, scratch %.1f MiB (peak %.1f MiB, one sample up "
      "to %.1f MiB, %.1f MiB/thread kept), decoders up to %.1f MiB/thread\n",
      r.manifest_bytes / 1048576.0, r.scratch_bytes / 1048576.0, r.scratch_peak_bytes / 1048576.0,
      r.scratch_sample_peak_bytes / 1048576.0, r.scratch_bytes_per_thread / 1048576.0,
      r.decode_bytes_per_thread / 1048576.0);
  add("  copies            %.1f bytes per sample beyond the batch slot\n",
      r.bytes_copied_per_sample);
  if (r.ranged_reads.requests > 0) {
    add("  ranged reads      %lld requests, %.1f MB, %lld not planned from the index\n",
        static_cast<long long>(r.ranged_reads.requests), r.ranged_reads.bytes / 1e6,
        static_cast<long long>(r.ranged_reads.unplanned));
  }
  if (r.packed) {
    const PackStats& p = r.pack;
    add(r.pack_budget ? "  max_tokens        %lld batches of up to %lld tokens, fill %.1f%%, %lld unused "
                        "(%.0f per 1,000 real), %lld vision tokens\n"
                      : "  packing           %lld rows of %lld tokens, fill %.1f%%, %lld padding tokens "
                        "(%.0f per 1,000 real), %lld vision tokens\n",
        static_cast<long long>(p.rows), static_cast<long long>(r.pack_seq_len), 100 * p.fill(),
        static_cast<long long>(p.padding_tokens),
        p.tokens > 0 ? 1000.0 * static_cast<double>(p.padding_tokens) / static_cast<double>(p.tokens)
                     : 0.0,
        static_cast<long long>(p.vision_tokens));
    add("                    %lld truncated, %lld skipped, %lld failed (data lost: in errors); window peak %.1f MiB "
        "(outside budget); %lld of %lld batches planned from told sizes\n",
        static_cast<long long>(p.truncated), static_cast<long long>(p.skipped),
        static_cast<long long>(p.failed), p.max_window_bytes / 1048576.0,
        static_cast<long long>(p.planned_batches), static_cast<long long>(p.batches));
  }
  out += "  stages            name    busy   starved blocked  queue  verdict\n";
  for (const auto& s : r.stages) {
    const double total =
        std::max(1e-9, s.metrics.busy_s + s.metrics.starved_s + s.metrics.blocked_s);
    add("                    %-6s %5.0f%%  %5.0f%%  %5.0f%%  ", s.metrics.name.c_str(),
        100 * s.metrics.busy_s / total, 100 * s.metrics.starved_s / total,
        100 * s.metrics.blocked_s / total);
    if (s.metrics.queue_fill >= 0) {
      add("%4.0f%%", 100 * s.metrics.queue_fill);
    } else {
      out += "    -";
    }
    add("   %s (x%d, %lld items)\n", s.verdict.c_str(), s.metrics.concurrency,
        static_cast<long long>(s.metrics.items));
  }
  out += "  ops (ms/sample)  ";
  for (const auto& op : r.ops) {
    add(" %s%s%s %.2f", op.entry.c_str(), op.entry.empty() ? "" : "/", op.name.c_str(),
        op.ms_per_sample);
  }
  out += "\n";
  for (const auto& op : r.ops) {
    if (op.frames_decoded_per_taken < 0) continue;
    add("  frames decoded    %s %.2f per frame taken (%lld of %lld)\n", op.name.c_str(),
        op.frames_decoded_per_taken, static_cast<long long>(op.frames_decoded),
        static_cast<long long>(op.frames_taken));
  }
  add("  errors            %lld", static_cast<long long>(r.errors_total));
  for (const auto& [kind, n] : r.errors_by_kind)
    add(" %s=%lld", kind.c_str(), static_cast<long long>(n));
  out += "\n";
  for (const auto& e : r.first_errors) out += "    " + e.ToString() + "\n";
  if (!r.source.empty()) out += "  source            " + r.source + "\n";
  if (r.uniform_neighbour_distance > 0) {
    add("  shuffle           neighbours %.0f apart in dataset order, a uniform shuffle's %.0f: "
        "quality %.2f\n",
        r.neighbour_distance, r.uniform_neighbour_distance, r.shuffle_quality);
  }
  for (const EngineMetrics::Entry& e : r.entries) {
    add("    %-14s  %lld samples, %lld errors, %.1f MB read\n", e.name.c_str(),
        static_cast<long long>(e.samples_delivered), static_cast<long long>(e.samples_failed),
        static_cast<double>(e.bytes_read) / 1e6);
  }
  if (r.has_block_cache) {
    const BlockCacheStats& c = r.block_cache;
    add("  block cache       %lld blocks of %.1f MiB read, %lld hits, %lld waits, %lld "
        "evicted, %lld dropped after use; peak %.1f of %.1f MiB\n",
        static_cast<long long>(c.block_reads), c.block_bytes / 1048576.0,
        static_cast<long long>(c.block_hits), static_cast<long long>(c.block_waits),
        static_cast<long long>(c.evictions), static_cast<long long>(c.drops),
        c.peak_bytes / 1048576.0,
        c.capacity_bytes / 1048576.0);
  }
  if (r.has_row_group_cache) {
    const RowGroupCacheStats& c = r.row_group_cache;
    add("  row-group cache   %lld row groups read, %lld decoded (%lld re-read), %lld "
        "evicted; peak %.1f of %.1f MiB\n",
        static_cast<long long>(c.fetches), static_cast<long long>(c.decodes),
        static_cast<long long>(c.refetches), static_cast<long long>(c.evictions),
        c.peak_bytes / 1048576.0, c.capacity_bytes / 1048576.0);
  }
  for (size_t i = 0; i < r.storage.size(); ++i) {
    const StorageStats& s = r.storage[i];
    out += i == 0 ? "  storage           " : "                    ";
    if (s.backend == "local") {
      add("local: %lld reads, %.1f MB, %lld errors\n", static_cast<long long>(s.requests),
          s.bytes / 1e6, static_cast<long long>(s.errors));
      continue;
    }
    add("%s %s: %lld requests, %lld retries", s.backend.c_str(), s.endpoint.c_str(),
        static_cast<long long>(s.requests), static_cast<long long>(s.retries));
    if (!s.retries_by_reason.empty()) {
      out += " (";
      for (auto it = s.retries_by_reason.begin(); it != s.retries_by_reason.end(); ++it) {
        add("%s%s=%lld", it == s.retries_by_reason.begin() ? "" : ", ", it->first.c_str(),
            static_cast<long long>(it->second));
      }
      out += ")";
    }
    add(", %lld throttled, %lld errors, %.1f MB, %lld connections\n",
        static_cast<long long>(s.throttles), static_cast<long long>(s.errors), s.bytes / 1e6,
        static_cast<long long>(s.connections));
  }
  if (!r.failure.empty()) {
    // A failed run is not a tuning result: no advice (the failure is the caller's to say).
    out += "  bottleneck        " + r.bottleneck + " (no advice: the run failed)\n";
    return out;
  }
  out += "  bottleneck        " + r.bottleneck + ": " + r.advice + "\n";
  return out;
}

std::string BatchDigest(const Batch& batch) {
  uint64_t digest = 0xcbf29ce484222325ULL;
  for (const auto& [name, tensor] : batch.fields) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
    const uint8_t* p = tensor.buffer().data();
    for (size_t i = 0; i < tensor.nbytes(); ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
    digest = HashKeys(digest, h);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

}  // namespace headrace
