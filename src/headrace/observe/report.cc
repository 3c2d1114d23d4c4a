#include "headrace/observe/report.h"

#include <algorithm>
#include <cstdio>

#include "headrace/core/region_allocator.h"
#include "headrace/core/rng.h"
#include "headrace/core/strings.h"
#include "headrace/observe/report_schema.h"

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

// The text line of each cache in report_schema.h's Caches().
void CacheLine(const BlockCacheStats& c, auto& add) {
  add("  block cache       %lld blocks of %.1f MiB read, %lld hits, %lld waits, %lld "
      "evicted, %lld dropped after use; peak %.1f of %.1f MiB\n",
      static_cast<long long>(c.block_reads), c.block_bytes / 1048576.0,
      static_cast<long long>(c.block_hits), static_cast<long long>(c.block_waits),
      static_cast<long long>(c.evictions), static_cast<long long>(c.drops),
      c.peak_bytes / 1048576.0, c.capacity_bytes / 1048576.0);
}
void CacheLine(const RowGroupCacheStats& c, auto& add) {
  add("  row-group cache   %lld row groups read, %lld decoded (%lld re-read), %lld "
      "evicted; peak %.1f of %.1f MiB\n",
      static_cast<long long>(c.fetches), static_cast<long long>(c.decodes),
      static_cast<long long>(c.refetches), static_cast<long long>(c.evictions),
      c.peak_bytes / 1048576.0, c.capacity_bytes / 1048576.0);
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
  r.stale_entries = m.stale_entries;
  r.wait_time_ratio = c.wait_time_ratio();
  r.wait_time_ratio_with_cold_start =
      c.elapsed_s > 0 ? (c.wait_s + c.time_to_first_batch_s) / c.elapsed_s : 0;
  r.time_to_first_batch_s = c.time_to_first_batch_s;
  r.consumer_wait_s = c.wait_s;
  r.consumer_busy_s = c.busy_s;
  r.peak_rss_bytes = PeakRssBytes();
  r.rss_bytes = CurrentRssBytes();
  r.heap = MallocHeapBytes();
  r.regions_mapped_bytes = RegionBytesMapped();
  r.baseline_rss_bytes = baseline_rss_bytes;
  r.memory_budget_bytes = loader.memory_budget_bytes();
  if (const std::optional<BalanceSeen> balance = loader.balance_stats(); balance.has_value()) {
    r.balanced = true;
    r.balance = *balance;
  }
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
  r.rows_waits = m.rows_waits;
  r.rows_wait_s = m.rows_wait_s;
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
  if (r.heap.system_bytes >= 0) {
    add("  malloc heap       %.1f MiB from the system, %.1f MiB of it in use (RSS %.1f MiB at "
        "the end)\n",
        r.heap.system_bytes / 1048576.0, r.heap.in_use_bytes / 1048576.0,
        r.rss_bytes / 1048576.0);
  }
  if (r.regions_mapped_bytes > 0) {
    add("  pools             %.1f MiB of regions mapped (batches and samples' rows, outside "
        "malloc's heap)\n",
        r.regions_mapped_bytes / 1048576.0);
  }
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
  if (r.stale_entries.count > 0) {
    add("  size index        %lld samples' tokens differ from their entries (first: %s): the "
        "data changed since it was built; rebuild it (headrace index sizes)\n",
        static_cast<long long>(r.stale_entries.count), r.stale_entries.first.c_str());
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
  if (r.balanced) {
    const BalanceSeen& b = r.balance;
    add("  balance           %lld steps dealt by cost: slowest rank %.3f x the mean (the "
        "order's deal: %.3f), GPU time idle at the step barrier %.1f%% (order: %.1f%%); "
        "%lld samples costed the mean (size not told)\n",
        static_cast<long long>(b.steps), b.mean > 0 ? b.max_after / b.mean : 0.0,
        b.mean > 0 ? b.max_before / b.mean : 0.0, 100 * IdleShare(b.mean, b.max_after),
        100 * IdleShare(b.mean, b.max_before), static_cast<long long>(b.untold));
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
  report_internal::Caches(r, [&](std::string_view, bool has, const auto& stats) {
    if (has) CacheLine(stats, add);
  });
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
