#include "headrace/observe/doctor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "headrace/core/json_writer.h"
#include "headrace/core/strings.h"
#include "headrace/exec/thread_pool.h"
#include "headrace/observe/doctor_findings.h"

namespace headrace {
namespace {

// Below this share of its loop waiting for data, the trainer is the bottleneck (the
// run report's "trainer" verdict uses the same).
constexpr double kConsumerBoundWaitRatio = 0.05;
// Batches ready at this share of the prefetch depth when the trainer asks (on average),
// with no stage saturated: its waits, up to this share, are its own.
constexpr double kBatchesReady = 0.75;
constexpr double kConsumerMaxWaitWithBatchesReady = 0.25;
// A stage busy at least this share of the run limits throughput (report.cc's verdicts).
constexpr double kSaturated = 0.75;
// Reads in flight on average at this share of execution.io_inflight: the cap binds.
constexpr double kInflightAtCap = 0.6;
// Reads moving this share of the given storage bandwidth: it is the limit.
constexpr double kBandwidthReached = 0.8;
// A Python op's waits for the GIL this share of the CPU time per sample, or (one CPU
// thread) its GIL held this share of the run: the GIL, not the cores, is the limit.
constexpr double kGilBusy = 0.5;
constexpr double kGilWaitShare = 0.25;
// Where no batch budget is known to bind, a deeper prefetch doubles the depth.
constexpr int kPrefetchGrowth = 2;
constexpr int64_t kMiB = 1 << 20;

// "37.5 KiB", "1.9 MiB", "2.0 GiB".
std::string Bytes(double bytes) {
  if (bytes < kMiB) return StrFormat("%.1f KiB", bytes / 1024);
  if (bytes < 1024.0 * kMiB) return StrFormat("%.1f MiB", bytes / kMiB);
  return StrFormat("%.1f GiB", bytes / (1024.0 * kMiB));
}

int64_t CeilToInt(double v) { return static_cast<int64_t>(std::ceil(std::max(0.0, v))); }

const StageReport* FindStage(const RunReport& r, std::string_view name) {
  for (const auto& s : r.stages) {
    if (s.metrics.name == name) return &s;
  }
  return nullptr;
}

// The rates the verdicts and the advice are computed from.
struct Rates {
  double need_sps = 0;     // the trainer's pace, samples/s
  const char* pace = "";   // what need_sps is, for the texts
  bool paced = false;      // from trainer.step_ms (else twice the measured rate)
  double samples_run = 0;  // samples the CPU stage ran (delivered ones if unknown)
  double cpu_s_per_sample = 0;
  double read_latency_s = 0;
  double reads_per_sample = 0;
  double mean_inflight = 0;  // Little's law: reads/s x latency
  double bytes_per_read = 0;
};

Rates ComputeRates(const RunReport& r, const StageReport* read, const StageReport* cpu) {
  Rates x;
  x.paced = r.trainer_step_ms > 0 && r.batch_size > 0;
  x.need_sps = x.paced ? r.batch_size * 1e3 / r.trainer_step_ms : 2 * r.samples_per_s;
  x.pace = x.paced ? "the trainer's pace" : "twice the measured rate (no trainer step)";
  x.samples_run = cpu != nullptr && cpu->metrics.items > 0 ? static_cast<double>(cpu->metrics.items)
                                                           : static_cast<double>(r.samples);
  if (cpu != nullptr && x.samples_run > 0) {
    x.cpu_s_per_sample = cpu->metrics.busy_s * cpu->metrics.concurrency / x.samples_run;
  }
  if (read != nullptr && read->metrics.items > 0) {
    const auto reads = static_cast<double>(read->metrics.items);
    x.read_latency_s = std::max(0.0, read->metrics.mean_latency_ms) / 1e3;
    x.reads_per_sample = x.samples_run > 0 ? reads / x.samples_run : 1;
    // Over the engine's time (busy / utilization), not the consumer's shorter one.
    const double elapsed =
        read->utilization > 0 ? read->metrics.busy_s / read->utilization : r.elapsed_s;
    x.mean_inflight = elapsed > 0 ? reads * x.read_latency_s / elapsed : 0;
    x.bytes_per_read = r.mb_per_s * 1e6 * elapsed / reads;  // mb_per_s: over the engine's
  }
  return x;
}

class Builder {
 public:
  Builder(const RunReport& r, const Rates& x) {
    d_.evidence.push_back({"wait_time_ratio", r.wait_time_ratio, "ratio"});
    d_.evidence.push_back({"samples_per_s", r.samples_per_s, "samples/s"});
    // target_pace: twice the measured rate, when there is no trainer step.
    d_.evidence.push_back({x.paced ? "trainer_pace" : "target_pace", x.need_sps, "samples/s"});
    if (x.paced) d_.evidence.push_back({"trainer_step", r.trainer_step_ms, "ms"});
  }
  Builder& Limit(LimitKind kind, std::string stage, std::string summary) {
    d_.limit = kind;
    d_.stage = std::move(stage);
    d_.summary = std::move(summary);
    return *this;
  }
  Builder& Fact(std::string name, double value, std::string unit) {
    d_.evidence.push_back({std::move(name), value, std::move(unit)});
    return *this;
  }
  Builder& Change(std::string setting, double current, double suggested, std::string text) {
    d_.advice.push_back({std::move(setting), current, suggested, std::move(text)});
    return *this;
  }
  Builder& Note(std::string text) { return Change("", 0, 0, std::move(text)); }
  Diagnosis Take() { return std::move(d_); }

 private:
  Diagnosis d_;
};

// The op that costs most per sample, or null.
const OpReport* CostliestOp(const RunReport& r) {
  const OpReport* costly = nullptr;
  for (const auto& op : r.ops) {
    if (costly == nullptr || op.ms_per_sample > costly->ms_per_sample) costly = &op;
  }
  return costly;
}

void AdviseCheaperOp(const RunReport& r, const Rates& x, Builder& b) {
  const OpReport* op = CostliestOp(r);
  if (op == nullptr || op->ms_per_sample <= 0) return;
  double total_ms = 0;
  for (const auto& o : r.ops) total_ms += o.ms_per_sample;
  const double share = total_ms > 0 ? op->ms_per_sample / total_ms : 0;
  b.Fact("costliest_op " + op->name, op->ms_per_sample, "ms/sample");
  const std::string how =
      op->name == "image.decode"
          ? "a cheaper decode (images stored nearer the size the ops keep: image.decode "
            "scales JPEGs down while decoding when a resize follows)"
      : op->name.starts_with("image.resize")
          ? "resizing earlier or to a smaller size, or antialias: false"
          : "a cheaper " + op->name;
  b.Note(
      StrFormat("the op %s costs %.2f ms/sample (%.0f%% of the ops' %.2f ms): %s saves up to "
             "%.1f cores at %s",
             op->name.c_str(), op->ms_per_sample, 100 * share, total_ms, how.c_str(),
             op->ms_per_sample / 1e3 * x.need_sps, x.pace));
}

Diagnosis DiagnoseGil(const RunReport& r, const Rates& x, const StageReport& cpu, Builder& b,
                      double held_ms, double wait_ms, const OpReport& op) {
  const double ceiling_sps = held_ms > 0 ? 1e3 / held_ms : 0;
  const int64_t processes = std::max<int64_t>(1, CeilToInt(held_ms / 1e3 * x.need_sps * kHeadroom));
  b.Limit(LimitKind::kPythonGil, "cpu",
          StrFormat("the Python op %s holds the GIL %.2f ms per sample, so its calls run one at a "
                 "time: at most %.0f samples/s from any number of threads; %s is %.0f",
                 op.name.c_str(), held_ms, ceiling_sps, x.pace, x.need_sps))
      .Fact("cpu_utilization", cpu.utilization, "ratio")
      .Fact("gil_held " + op.name, held_ms, "ms/sample")
      .Fact("gil_wait " + op.name, wait_ms, "ms/sample")
      .Fact("gil_busy", held_ms / 1e3 * r.samples_per_s, "s/s")
      .Fact("gil_ceiling", ceiling_sps, "samples/s")
      .Note(StrFormat("run %s in %lld worker processes: headrace.ops.map(fn, outputs, "
                   "processes=%lld) (GIL-held %.2f ms/sample x %.0f samples/s, +25%%), or "
                   "move it to numpy code that releases the GIL or to a C++ op",
                   op.name.c_str(), static_cast<long long>(processes),
                   static_cast<long long>(processes), held_ms, x.need_sps));
  return b.Take();
}

Diagnosis DiagnoseCpu(const RunReport& r, const Rates& x, const StageReport& cpu, int cores,
                      Builder& b) {
  const double cores_needed = x.cpu_s_per_sample * x.need_sps;
  const int threads = cpu.metrics.concurrency;
  const int64_t wanted = std::max<int64_t>(threads + 1, CeilToInt(cores_needed * kHeadroom));
  b.Limit(LimitKind::kCpu, "cpu",
          StrFormat("the %d CPU threads are busy %.0f%% of the run at %.2f CPU-ms per sample; "
                 "%s, %.0f samples/s, needs %.1f cores",
                 threads, 100 * cpu.utilization, 1e3 * x.cpu_s_per_sample, x.pace, x.need_sps,
                 cores_needed))
      .Fact("cpu_utilization", cpu.utilization, "ratio")
      .Fact("cpu_threads", threads, "threads")
      .Fact("cpu_time_per_sample", 1e3 * x.cpu_s_per_sample, "ms/sample")
      .Fact("cores_needed", cores_needed, "cores")
      .Fact("cores_available", cores, "cores");
  const int64_t here = std::min<int64_t>(wanted, cores);
  if (here > threads) {
    b.Change("execution.cpu_threads", threads, static_cast<double>(here),
             StrFormat("raise execution.cpu_threads from %d to %lld", threads,
                    static_cast<long long>(here)));
  }
  if (wanted > cores) {
    const int64_t more = wanted - std::max<int64_t>(threads, cores);
    b.Note(
        StrFormat("%lld more cores (or CPU workers: headrace.ray.Loader(workers=...)) to keep "
               "%s: %.2f CPU-ms/sample x %.0f samples/s = %.1f cores, +25%%, and this "
               "machine has %d (`headrace plan` sizes CPU nodes)",
               static_cast<long long>(more), x.pace, 1e3 * x.cpu_s_per_sample, x.need_sps,
               cores_needed, cores));
  }
  AdviseCheaperOp(r, x, b);
  return b.Take();
}

Diagnosis DiagnoseStorage(const RunReport& r, const Rates& x, const StageReport& read,
                          const DoctorOptions& options, Builder& b) {
  const int inflight = read.metrics.concurrency;
  const double need_mb_s = r.samples_per_s > 0 ? r.mb_per_s * x.need_sps / r.samples_per_s : 0;
  b.Fact("read_utilization", read.utilization, "ratio")
      .Fact("read_latency", 1e3 * x.read_latency_s, "ms")
      .Fact("reads_in_flight_mean", x.mean_inflight, "reads")
      .Fact("io_inflight", inflight, "reads")
      .Fact("read_mb_per_s", r.mb_per_s, "MB/s")
      .Fact("read_mb_per_s_needed", need_mb_s, "MB/s");
  const bool bandwidth_reached =
      options.storage_mb_s > 0 && r.mb_per_s >= kBandwidthReached * options.storage_mb_s;
  if (!bandwidth_reached && x.mean_inflight >= kInflightAtCap * inflight) {
    const double reads_per_s = x.need_sps * x.reads_per_sample;
    const double needed = reads_per_s * x.read_latency_s;
    const int64_t suggested =
        std::clamp<int64_t>(CeilToInt(needed * kHeadroom), inflight + 1, 16384);
    b.Limit(
         LimitKind::kStorageLatency, "read",
         StrFormat("reads wait %.1f ms each with %.1f of %d allowed in flight on average: "
                "%.0f samples/s need %.0f reads/s, so ~%.0f in flight (Little's law)",
                1e3 * x.read_latency_s, x.mean_inflight, inflight, x.need_sps, reads_per_s, needed))
        .Fact("reads_per_s_needed", reads_per_s, "reads/s")
        .Fact("reads_in_flight_needed", needed, "reads")
        .Change("execution.io_inflight", inflight, static_cast<double>(suggested),
                StrFormat("raise execution.io_inflight from %d to ~%lld (%.0f reads/s x %.1f ms, "
                       "+25%%)",
                       inflight, static_cast<long long>(suggested), reads_per_s,
                       1e3 * x.read_latency_s));
    // Reads in flight are charged to the I/O budget before their bytes arrive.
    const double io_bytes_needed = static_cast<double>(suggested) * x.bytes_per_read;
    if (r.io_budget_bytes > 0 && io_bytes_needed > static_cast<double>(r.io_budget_bytes)) {
      const int64_t mib = CeilToInt(io_bytes_needed / kMiB);
      b.Change(
          "execution.io_budget_bytes", static_cast<double>(r.io_budget_bytes),
          static_cast<double>(mib * kMiB),
          StrFormat("raise execution.io_budget_bytes from %s to %lld MiB so that %lld "
                 "reads of %.2f MB fit in flight",
                 Bytes(static_cast<double>(r.io_budget_bytes)).c_str(), static_cast<long long>(mib),
                 static_cast<long long>(suggested), x.bytes_per_read / 1e6));
    }
    return b.Take();
  }
  b.Limit(LimitKind::kStorageBandwidth, "read",
          bandwidth_reached
              ? StrFormat("reads move %.1f MB/s of the storage's %.1f MB/s; %s needs %.1f MB/s",
                       r.mb_per_s, options.storage_mb_s, x.pace, need_mb_s)
              : StrFormat("reads are in flight %.0f%% of the run yet average only %.1f of %d "
                       "allowed: the storage's throughput (%.1f MB/s) limits, not the number "
                       "of reads; %s needs %.1f MB/s",
                       100 * read.utilization, x.mean_inflight, inflight, r.mb_per_s, x.pace,
                       need_mb_s));
  if (options.storage_mb_s > 0) b.Fact("storage_mb_per_s", options.storage_mb_s, "MB/s");
  b.Note(
      StrFormat("more reads in flight will not help: %.1f MB/s more from the storage (more "
             "bandwidth, or the data spread over more nodes or prefixes), or fewer bytes "
             "per sample (%.2f MB now: smaller encoded images)",
             std::max(0.0, need_mb_s - r.mb_per_s),
             x.samples_run > 0 ? x.bytes_per_read * x.reads_per_sample / 1e6 : 0.0));
  return b.Take();
}

// What the batch budget must hold for `depth` batches ahead, and memory.budget_bytes
// to give it: the I/O budget beside it, or (when it is the default eighth of the total)
// depth batches in the other seven eighths.
int64_t BudgetFor(const RunReport& r, int depth) {
  const double batches = static_cast<double>(depth) * static_cast<double>(r.full_batch_bytes);
  const double other = static_cast<double>(r.memory_budget_bytes - r.batch_budget_bytes);
  const double total = std::max(batches + other, batches * 8 / 7);
  return CeilToInt(total / kMiB) * kMiB;
}

Diagnosis DiagnoseBuffering(const RunReport& r, const StageReport* batch, Builder& b) {
  const int depth = batch != nullptr ? batch->metrics.concurrency : 0;
  const int64_t fit = r.full_batch_bytes > 0 ? r.batch_budget_bytes / r.full_batch_bytes : 0;
  b.Fact("prefetch_depth", depth, "batches")
      .Fact("memory_budget", static_cast<double>(r.memory_budget_bytes), "bytes")
      .Fact("batch_budget", static_cast<double>(r.batch_budget_bytes), "bytes")
      .Fact("budget_peak", static_cast<double>(r.budget_peak_bytes), "bytes")
      .Fact("full_batch", static_cast<double>(r.full_batch_bytes), "bytes");
  if (batch != nullptr && batch->metrics.queue_fill >= 0) {
    b.Fact("batch_queue_fill", batch->metrics.queue_fill, "ratio");
  }
  if (r.full_batch_bytes > 0 && fit < depth) {
    const int64_t suggested = BudgetFor(r, depth);
    b.Limit(LimitKind::kMemoryBudget, "batch",
            StrFormat("memory.budget_bytes leaves %s for batches, %lld of %s, fewer than "
                   "prefetch.depth %d: the CPU threads wait for the budget while the trainer "
                   "waits for batches",
                   Bytes(static_cast<double>(r.batch_budget_bytes)).c_str(),
                   static_cast<long long>(fit),
                   Bytes(static_cast<double>(r.full_batch_bytes)).c_str(), depth))
        .Fact("batches_ahead_budget_holds", static_cast<double>(fit), "batches")
        .Change("memory.budget_bytes", static_cast<double>(r.memory_budget_bytes),
                static_cast<double>(suggested),
                StrFormat("raise memory.budget_bytes from %s to %lld MiB (%d batches of %s "
                       "ahead, plus the I/O budget)",
                       Bytes(static_cast<double>(r.memory_budget_bytes)).c_str(),
                       static_cast<long long>(suggested / kMiB), depth,
                       Bytes(static_cast<double>(r.full_batch_bytes)).c_str()));
    return b.Take();
  }
  const int deeper = std::max(depth + 1, depth * kPrefetchGrowth);
  b.Limit(LimitKind::kPrefetch, "batch",
          StrFormat("neither reads nor CPUs are saturated and the budget has room, yet the "
                 "trainer waits %.1f%% of its loop: %d batches ahead do not absorb the "
                 "pipeline's bursts",
                 100 * r.wait_time_ratio, depth))
      .Change("prefetch.depth", depth, deeper,
              StrFormat("raise prefetch.depth from %d to %d", depth, deeper));
  if (r.full_batch_bytes > 0 && deeper * r.full_batch_bytes > r.batch_budget_bytes) {
    const int64_t suggested = BudgetFor(r, deeper);
    b.Change("memory.budget_bytes", static_cast<double>(r.memory_budget_bytes),
             static_cast<double>(suggested),
             StrFormat("and memory.budget_bytes from %s to %lld MiB to hold them",
                    Bytes(static_cast<double>(r.memory_budget_bytes)).c_str(),
                    static_cast<long long>(suggested / kMiB)));
  }
  return b.Take();
}

}  // namespace

std::string_view LimitKindName(LimitKind kind) {
  switch (kind) {
    case LimitKind::kStorageLatency: return "storage_latency";
    case LimitKind::kStorageBandwidth: return "storage_bandwidth";
    case LimitKind::kCpu: return "cpu";
    case LimitKind::kPythonGil: return "python_gil";
    case LimitKind::kMemoryBudget: return "memory_budget";
    case LimitKind::kPrefetch: return "prefetch";
    case LimitKind::kConsumer: return "consumer";
  }
  return "consumer";
}

namespace {

Diagnosis DiagnoseThroughput(const RunReport& r, const DoctorOptions& options);

}  // namespace

Diagnosis DiagnoseRun(const RunReport& r, const DoctorOptions& options) {
  Diagnosis d = DiagnoseThroughput(r, options);
  AddPackLoss(r, d);
  AddImbalance(r, d);
  return d;
}

namespace {

Diagnosis DiagnoseThroughput(const RunReport& r, const DoctorOptions& options) {
  const StageReport* read = FindStage(r, "read");
  const StageReport* cpu = FindStage(r, "cpu");
  const StageReport* batch = FindStage(r, "batch");
  const Rates x = ComputeRates(r, read, cpu);
  Builder b(r, x);
  // Batches were ready when the trainer asked, and no stage is saturated: what it waited
  // is its own thread's time in Next() (scheduling on a busy machine), not missing data.
  const double ready = batch != nullptr ? batch->metrics.queue_fill : -1;
  const bool saturated = (cpu != nullptr && cpu->utilization >= kSaturated) ||
                         (read != nullptr && read->utilization >= kSaturated);
  const bool waits_with_batches_ready =
      ready >= kBatchesReady && !saturated && r.wait_time_ratio <= kConsumerMaxWaitWithBatchesReady;
  if (r.batches > 1 && (r.wait_time_ratio <= kConsumerBoundWaitRatio || waits_with_batches_ready)) {
    b.Limit(LimitKind::kConsumer, "consumer",
            r.wait_time_ratio <= kConsumerBoundWaitRatio
                ? StrFormat("the trainer is the bottleneck: it waits %.1f%% of its loop for data "
                         "(under %.0f%%); nothing to change",
                         100 * r.wait_time_ratio, 100 * kConsumerBoundWaitRatio)
                : StrFormat("the trainer is the bottleneck: the prefetch queue held %.0f%% of its "
                         "depth when it asked and no stage is saturated, so its %.1f%% of waits "
                         "are its own thread's, not missing batches; nothing to change",
                         100 * ready, 100 * r.wait_time_ratio));
    if (cpu != nullptr) b.Fact("cpu_utilization", cpu->utilization, "ratio");
    if (read != nullptr) b.Fact("read_utilization", read->utilization, "ratio");
    if (ready >= 0) b.Fact("batch_queue_fill", ready, "ratio");
    return b.Take();
  }
  if (cpu != nullptr && cpu->utilization >= kSaturated) {
    // The Python op holding the GIL longest, and the GIL time of all of them.
    const OpReport* python = nullptr;
    double held_ms = 0, wait_ms = 0;
    for (const auto& op : r.ops) {
      if (op.gil_wait_ms_per_sample < 0) continue;
      held_ms += std::max(0.0, op.ms_per_sample - op.gil_wait_ms_per_sample);
      wait_ms += op.gil_wait_ms_per_sample;
      if (python == nullptr || op.ms_per_sample - op.gil_wait_ms_per_sample >
                                   python->ms_per_sample - python->gil_wait_ms_per_sample) {
        python = &op;
      }
    }
    // The GIL limits when the threads wait for it a good share of their time, or when
    // one thread spends most of the run holding it (more threads would wait).
    const double cpu_ms = 1e3 * x.cpu_s_per_sample;
    const bool contended = cpu_ms > 0 && wait_ms >= kGilWaitShare * cpu_ms;
    const bool alone = cpu->metrics.concurrency == 1 && held_ms / 1e3 * r.samples_per_s >= kGilBusy;
    if (python != nullptr && (contended || alone)) {
      // One GIL: it cannot be held longer than the time between samples.
      if (r.samples_per_s > 0) held_ms = std::min(held_ms, 1e3 / r.samples_per_s);
      return DiagnoseGil(r, x, *cpu, b, held_ms, wait_ms, *python);
    }
    return DiagnoseCpu(r, x, *cpu,
                       options.available_cores > 0 ? options.available_cores : AvailableCores(), b);
  }
  if (read != nullptr && read->utilization >= kSaturated) {
    return DiagnoseStorage(r, x, *read, options, b);
  }
  return DiagnoseBuffering(r, batch, b);
}

}  // namespace

std::string DiagnosisToJson(const Diagnosis& d) {
  JsonWriter w;
  w.BeginObject();
  w.Key("limit").String(std::string(LimitKindName(d.limit)));
  w.Key("stage").String(d.stage);
  w.Key("summary").String(d.summary);
  w.Key("evidence").BeginArray();
  for (const Evidence& e : d.evidence) {
    w.BeginObject().Key("name").String(e.name).Key("value").Double(e.value);
    w.Key("unit").String(e.unit).EndObject();
  }
  w.EndArray();
  w.Key("advice").BeginArray();
  for (const Advice& a : d.advice) {
    w.BeginObject();
    if (!a.setting.empty()) {
      w.Key("setting").String(a.setting).Key("current").Double(a.current);
      w.Key("suggested").Double(a.suggested);
    }
    w.Key("text").String(a.text).EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.str() + "\n";
}

std::string DiagnosisToText(const Diagnosis& d) {
  std::string out = "Headrace doctor: " + std::string(LimitKindName(d.limit)) + " (stage " +
                    d.stage + ")\n  " + d.summary + "\n  evidence\n";
  for (const Evidence& e : d.evidence) {
    out += StrFormat("    %-40s %12.3f %s\n", e.name.c_str(), e.value, e.unit.c_str());
  }
  out += "  advice\n";
  if (d.advice.empty()) out += "    nothing to change\n";
  for (const Advice& a : d.advice) out += "    - " + a.text + "\n";
  return out;
}

}  // namespace headrace
