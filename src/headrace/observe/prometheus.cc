#include "headrace/observe/prometheus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace headrace {
namespace {

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Writes the families; `base` is the rendered constant labels ("" or `a="b",c="d"`).
class Exposition {
 public:
  explicit Exposition(const MetricLabels& labels) {
    for (const auto& [k, v] : labels) {
      if (!base_.empty()) base_ += ',';
      base_ += k + "=\"" + PrometheusEscape(v) + "\"";
    }
  }

  // Starts a family: its HELP and TYPE lines.
  Exposition& Family(const std::string& name, const char* type, const char* help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    return *this;
  }
  // One sample; `extra` is more labels (`stage="read"`), already rendered.
  Exposition& Sample(const std::string& name, double value, const std::string& extra = "") {
    out_ += name;
    const std::string labels = Join(base_, extra);
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += " " + Number(value) + "\n";
    return *this;
  }
  Exposition& Histogram(const std::string& name, const HistogramSnapshot& h,
                        const std::string& extra = "") {
    int64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      Sample(name + "_bucket", static_cast<double>(cumulative),
             Join(extra, "le=\"" + Number(h.bounds[i]) + "\""));
    }
    Sample(name + "_bucket", static_cast<double>(h.count), Join(extra, "le=\"+Inf\""));
    Sample(name + "_sum", h.sum_s, extra);
    Sample(name + "_count", static_cast<double>(h.count), extra);
    return *this;
  }
  std::string str() && { return std::move(out_); }

 private:
  static std::string Join(const std::string& a, const std::string& b) {
    if (a.empty()) return b;
    if (b.empty()) return a;
    return a + "," + b;
  }
  std::string base_;
  std::string out_;
};

std::string Label(const char* key, const std::string& value) {
  return std::string(key) + "=\"" + PrometheusEscape(value) + "\"";
}

// An op's labels: its name, and the blend entry whose own chain it is in (if any).
std::string OpLabels(const OpReport& op) {
  return op.entry.empty() ? Label("op", op.name)
                          : Label("op", op.name) + "," + Label("entry", op.entry);
}

}  // namespace

std::string PrometheusEscape(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string PrometheusText(const RunReport& r, const MetricLabels& labels) {
  Exposition e(labels);
  e.Family("headrace_samples_total", "counter", "Samples delivered to the consumer.")
      .Sample("headrace_samples_total", static_cast<double>(r.samples));
  e.Family("headrace_batches_total", "counter", "Batches delivered to the consumer.")
      .Sample("headrace_batches_total", static_cast<double>(r.batches));
  e.Family("headrace_errors_total", "counter",
           "Samples skipped, by kind (corrupt, not_found, ...).");
  e.Sample("headrace_errors_total", static_cast<double>(r.errors_total), Label("kind", "all"));
  for (const auto& [kind, n] : r.errors_by_kind) {
    e.Sample("headrace_errors_total", static_cast<double>(n), Label("kind", kind));
  }
  if (r.packed) {
    // What packing did; its samples left out or cut are in headrace_errors_total too
    // (kinds pack_skipped, pack_truncated): data lost.
    const PackStats& p = r.pack;
    e.Family("headrace_pack_samples_total", "counter",
             "Samples the packer handled, by outcome (packed, truncated, skipped, failed).");
    e.Sample("headrace_pack_samples_total", static_cast<double>(p.samples),
             Label("outcome", "packed"));
    e.Sample("headrace_pack_samples_total", static_cast<double>(p.truncated),
             Label("outcome", "truncated"));
    e.Sample("headrace_pack_samples_total", static_cast<double>(p.skipped),
             Label("outcome", "skipped"));
    e.Sample("headrace_pack_samples_total", static_cast<double>(p.failed),
             Label("outcome", "failed"));
    e.Family("headrace_pack_tokens_total", "counter",
             "Tokens in packed rows (batch.max_tokens: batches), by kind (real, padding, vision).");
    e.Sample("headrace_pack_tokens_total", static_cast<double>(p.tokens), Label("kind", "real"));
    e.Sample("headrace_pack_tokens_total", static_cast<double>(p.padding_tokens),
             Label("kind", "padding"));
    e.Sample("headrace_pack_tokens_total", static_cast<double>(p.vision_tokens),
             Label("kind", "vision"));
    e.Family("headrace_pack_fill_ratio", "gauge", "Real tokens / row capacity so far.")
        .Sample("headrace_pack_fill_ratio", p.fill());
  }
  if (!r.entries.empty()) {
    // A blend (source.mix): each entry's share, labelled by its name.
    using Entry = EngineMetrics::Entry;
    const struct {
      const char* name;
      const char* help;
      int64_t Entry::*value;
    } families[] = {
        {"headrace_source_samples_total", "Samples delivered, per blend entry.",
         &Entry::samples_delivered},
        {"headrace_source_errors_total", "Samples skipped, per blend entry.",
         &Entry::samples_failed},
        {"headrace_source_read_bytes_total", "Media bytes read, per blend entry.",
         &Entry::bytes_read},
    };
    for (const auto& f : families) {
      e.Family(f.name, "counter", f.help);
      for (const Entry& s : r.entries) {
        e.Sample(f.name, static_cast<double>(s.*f.value), Label("source", s.name));
      }
    }
  }
  e.Family("headrace_elapsed_seconds", "gauge", "Seconds since the loader started.")
      .Sample("headrace_elapsed_seconds", r.elapsed_s);
  e.Family("headrace_wait_time_ratio", "gauge",
           "Share of the consumer's loop spent waiting for data, cold start apart.")
      .Sample("headrace_wait_time_ratio", r.wait_time_ratio);
  e.Family("headrace_consumer_wait_seconds_total", "counter",
           "Seconds the consumer waited for batches, cold start apart.")
      .Sample("headrace_consumer_wait_seconds_total", r.consumer_wait_s);
  e.Family("headrace_time_to_first_batch_seconds", "gauge", "Cold start.")
      .Sample("headrace_time_to_first_batch_seconds", r.time_to_first_batch_s);

  e.Family("headrace_stage_items_total", "counter", "Items each stage finished.");
  for (const StageReport& s : r.stages) {
    e.Sample("headrace_stage_items_total", static_cast<double>(s.metrics.items),
             Label("stage", s.metrics.name));
  }
  e.Family("headrace_stage_seconds_total", "counter",
           "Seconds per unit of a stage's concurrency spent busy, starved (no input) or "
           "blocked (output full).");
  for (const StageReport& s : r.stages) {
    const std::string stage = Label("stage", s.metrics.name);
    e.Sample("headrace_stage_seconds_total", s.metrics.busy_s, stage + ",state=\"busy\"");
    e.Sample("headrace_stage_seconds_total", s.metrics.starved_s, stage + ",state=\"starved\"");
    e.Sample("headrace_stage_seconds_total", s.metrics.blocked_s, stage + ",state=\"blocked\"");
  }
  e.Family("headrace_stage_utilization", "gauge", "Busy share of a stage over the run so far.");
  for (const StageReport& s : r.stages) {
    e.Sample("headrace_stage_utilization", s.utilization, Label("stage", s.metrics.name));
  }
  e.Family("headrace_stage_concurrency", "gauge",
           "Reads in flight allowed, CPU threads, prefetch depth.");
  for (const StageReport& s : r.stages) {
    e.Sample("headrace_stage_concurrency", s.metrics.concurrency, Label("stage", s.metrics.name));
  }
  e.Family("headrace_stage_queue_fill", "gauge", "Mean occupancy of a stage's output queue, 0..1.");
  for (const StageReport& s : r.stages) {
    if (s.metrics.queue_fill >= 0) {
      e.Sample("headrace_stage_queue_fill", s.metrics.queue_fill, Label("stage", s.metrics.name));
    }
  }

  e.Family("headrace_op_seconds_total", "counter", "Seconds each operator ran, over threads.");
  for (const OpReport& op : r.ops) {
    e.Sample("headrace_op_seconds_total", op.busy_s, OpLabels(op));
  }
  // Only when an op decodes video frames (video.decode).
  if (std::any_of(r.ops.begin(), r.ops.end(),
                  [](const OpReport& op) { return op.frames_decoded >= 0; })) {
    e.Family("headrace_op_frames_decoded_total", "counter",
             "Video frames an operator's decoders produced; over "
             "headrace_op_frames_taken_total: frames decoded per frame taken.");
    for (const OpReport& op : r.ops) {
      if (op.frames_decoded < 0) continue;
      e.Sample("headrace_op_frames_decoded_total", static_cast<double>(op.frames_decoded),
               OpLabels(op));
    }
    e.Family("headrace_op_frames_taken_total", "counter",
             "Video frames an operator took into batches.");
    for (const OpReport& op : r.ops) {
      if (op.frames_decoded < 0) continue;
      e.Sample("headrace_op_frames_taken_total", static_cast<double>(op.frames_taken),
               OpLabels(op));
    }
  }
  e.Family("headrace_op_latency_seconds", "histogram",
           "Time of one operator on one sample (a batch op: on one batch).");
  for (const OpReport& op : r.ops) {
    e.Histogram("headrace_op_latency_seconds", op.latency, OpLabels(op));
  }
  e.Family("headrace_read_latency_seconds", "histogram",
           "Time of one media read, from issue to its bytes (retries included).");
  e.Histogram("headrace_read_latency_seconds", r.read_latency);
  e.Family("headrace_next_wait_seconds", "histogram",
           "The consumer's wait for one batch inside Next().");
  e.Histogram("headrace_next_wait_seconds", r.next_wait);
  e.Family("headrace_reads_in_flight", "gauge", "Media reads in flight now.")
      .Sample("headrace_reads_in_flight", r.reads_inflight);
  e.Family("headrace_batches_ready", "gauge", "Batches computed and waiting for the consumer.")
      .Sample("headrace_batches_ready", static_cast<double>(r.batches_ready));

  e.Family("headrace_memory_budget_bytes", "gauge", "memory.budget_bytes.")
      .Sample("headrace_memory_budget_bytes", static_cast<double>(r.memory_budget_bytes));
  e.Family("headrace_memory_in_flight_bytes", "gauge",
           "Batches in flight plus undecoded bytes, against memory.budget_bytes.")
      .Sample("headrace_memory_in_flight_bytes", static_cast<double>(r.budget_used_bytes));
  e.Family("headrace_memory_in_flight_peak_bytes", "gauge", "Peak of the in-flight bytes.")
      .Sample("headrace_memory_in_flight_peak_bytes", static_cast<double>(r.budget_peak_bytes));
  e.Family("headrace_scratch_bytes", "gauge", "CPU threads' scratch held now.")
      .Sample("headrace_scratch_bytes", static_cast<double>(r.scratch_bytes));
  e.Family("headrace_rss_peak_bytes", "gauge", "Peak resident memory of the process.")
      .Sample("headrace_rss_peak_bytes", static_cast<double>(r.peak_rss_bytes));

  e.Family("headrace_storage_requests_total", "counter", "Storage requests (local: files read).");
  for (const StorageStats& s : r.storage) {
    e.Sample("headrace_storage_requests_total", static_cast<double>(s.requests),
             Label("backend", s.backend));
  }
  e.Family("headrace_storage_bytes_total", "counter", "Bytes read from storage.");
  for (const StorageStats& s : r.storage) {
    e.Sample("headrace_storage_bytes_total", static_cast<double>(s.bytes),
             Label("backend", s.backend));
  }
  e.Family("headrace_storage_retries_total", "counter", "Storage retries, by reason.");
  for (const StorageStats& s : r.storage) {
    for (const auto& [reason, n] : s.retries_by_reason) {
      e.Sample("headrace_storage_retries_total", static_cast<double>(n),
               Label("backend", s.backend) + "," + Label("reason", reason));
    }
  }
  e.Family("headrace_storage_errors_total", "counter", "Reads that failed for good.");
  for (const StorageStats& s : r.storage) {
    e.Sample("headrace_storage_errors_total", static_cast<double>(s.errors),
             Label("backend", s.backend));
  }
  return std::move(e).str();
}

}  // namespace headrace
