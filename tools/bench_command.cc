// headrace bench: measurements whose results go into bench/RESULTS.md.
//
// bench ops:    the single-thread cost of each operator on the dataset, ms per sample.
// bench engine: the engine's overhead (pipeline samples/s at T threads against
//               T / summed operator cost) and the wait-time ratio of a trainer whose
//               step is 1.5x the CPU time of a batch.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>

#include "commands.h"
#include "headrace/core/json_writer.h"
#include "headrace/exec/thread_pool.h"
#include "headrace/io/storage.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/loader.h"
#include "headrace/pipeline/plan.h"
#include "headrace/pipeline/report.h"

namespace headrace::tools {
namespace {

struct OpCost {
  std::string name;
  double ms_per_sample = 0;
};

struct OpsBench {
  std::vector<OpCost> ops;
  double read_ms_per_sample = 0;
  double total_ms_per_sample = 0;  // operators only; reads are I/O, overlapped
  int64_t samples = 0;
};

// Runs the operator chain on the first `samples` good records, one thread, after a
// warm-up pass over a few of them.
Result<OpsBench> MeasureOps(const PipelineSpec& spec, int64_t samples) {
  auto storage = MakeLocalStorage();
  HR_ASSIGN_OR_RETURN(Manifest manifest, LoadManifest(*storage, spec.source));
  HR_ASSIGN_OR_RETURN(PipelinePlan plan, PlanPipeline(spec, *storage));
  std::vector<Buffer> rows;
  std::vector<uint8_t*> slots;
  for (const FieldSpec& f : plan.fields) {
    HR_ASSIGN_OR_RETURN(Buffer row, Buffer::Allocate(f.sample_bytes()));
    slots.push_back(row.mutable_data());
    rows.push_back(std::move(row));
  }
  std::vector<const SampleRecord*> records;
  for (const SampleRecord& r : manifest.records) {
    if (r.status.ok() && static_cast<int64_t>(records.size()) < samples) records.push_back(&r);
  }
  if (records.empty()) return Status::InvalidArgument("the manifest has no good records");
  // Read everything first so that the timed passes measure the operators only.
  std::vector<std::vector<Buffer>> media(records.size());
  const auto read_start = Clock::now();
  if (plan.reads_media) {
    for (size_t i = 0; i < records.size(); ++i) {
      // Every item, as the engine reads them (a manifest's are whole files).
      for (const MediaRef& ref : records[i]->media) {
        HR_ASSIGN_OR_RETURN(Buffer bytes, storage->Read(ref.uri));
        media[i].push_back(std::move(bytes));
      }
    }
  }
  const double read_s = SecondsSince(read_start);

  ScratchArena scratch;
  std::vector<Value> values(static_cast<size_t>(plan.num_values));
  std::vector<int64_t> op_ns(plan.ops.size(), 0);
  const size_t warmup = std::min<size_t>(records.size(), 16);
  // A warm-up pass over a few samples, then three timed passes over all of them; each
  // op's cost is its best pass (the same best-of-3 the engine runs get).
  std::vector<int64_t> best_ns(plan.ops.size(), INT64_MAX);
  for (int pass = 0; pass < 4; ++pass) {
    const size_t n = pass == 0 ? warmup : records.size();
    std::fill(op_ns.begin(), op_ns.end(), 0);
    for (size_t i = 0; i < n; ++i) {
      Sample sample;
      sample.index = static_cast<int64_t>(i);
      sample.record = records[i];
      sample.media = media[i];
      SampleContext ctx;
      ctx.sample = &sample;
      ctx.sample_seed = HashKeys(spec.seed, 0, i);
      ctx.scratch = &scratch;
      ctx.rows = slots.data();
      FillSourceValues(plan.source_values, sample, values);
      ctx.values = values;
      for (size_t k = 0; k < plan.ops.size(); ++k) {
        const auto start = Clock::now();
        Status st = plan.ops[k]->Run(ctx);
        op_ns[k] += NanosSince(start);
        if (!st.ok()) return st.WithContext("sample " + records[i]->id);
      }
    }
    if (pass > 0) {
      for (size_t k = 0; k < op_ns.size(); ++k) best_ns[k] = std::min(best_ns[k], op_ns[k]);
    }
  }
  op_ns = best_ns;
  OpsBench result;
  result.samples = static_cast<int64_t>(records.size());
  result.read_ms_per_sample = 1e3 * read_s / records.size();
  for (size_t k = 0; k < plan.ops.size(); ++k) {
    const double ms = op_ns[k] * 1e-6 / records.size();
    result.ops.push_back(OpCost{std::string(plan.ops[k]->name()), ms});
    result.total_ms_per_sample += ms;
  }
  return result;
}

// Runs the pipeline for `batches` batches with a simulated step; returns the report.
Result<RunReport> RunFor(PipelineSpec spec, int64_t batches, double step_ms) {
  spec.trainer.step_ms = step_ms;
  const int64_t baseline = CurrentRssBytes();
  HR_ASSIGN_OR_RETURN(auto loader, Loader::Make(spec));
  const auto step = std::chrono::duration<double, std::milli>(step_ms);
  for (int64_t n = 0; n < batches; ++n) {
    HR_ASSIGN_OR_RETURN(auto batch, loader->Next());
    if (!batch) break;
    if (step_ms > 0) {
      std::this_thread::sleep_until(Clock::now() +
                                    std::chrono::duration_cast<Clock::duration>(step));
    }
  }
  return BuildRunReport(*loader, baseline);
}

void WriteOps(JsonWriter& w, const OpsBench& b) {
  w.Key("ops").BeginArray();
  for (const auto& op : b.ops) {
    w.BeginObject().Key("name").String(op.name).Key("ms_per_sample").Double(op.ms_per_sample);
    w.EndObject();
  }
  w.EndArray();
  w.Key("total_ms_per_sample").Double(b.total_ms_per_sample);
  w.Key("read_ms_per_sample").Double(b.read_ms_per_sample);
  w.Key("samples").Int(b.samples);
}

}  // namespace

int BenchCommand(const Args& args) {
  if (!args.empty() && args[0] == "io") return BenchIoCommand(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "serve") {
    return BenchServeCommand(Args(args.begin() + 1, args.end()));
  }
  if (args.empty() || (args[0] != "ops" && args[0] != "engine")) {
    std::fprintf(stderr,
                 "usage: headrace bench ops|engine CONFIG [--samples N] [--report PATH] "
                 "[--set key=value ...]\n       headrace bench io [...]\n");
    return 2;
  }
  const std::string what = args[0];
  std::string config_path, report_path, value;
  std::vector<std::string> overrides;
  int64_t samples = 0;  // 0: the whole dataset
  ArgReader r{args, 1};
  while (!r.done()) {
    const std::string flag = r.peek();
    if (flag == "--report") {
      if (!r.Value(flag, &report_path)) return 2;
    } else if (flag == "--set") {
      if (!r.Value(flag, &value)) return 2;
      overrides.push_back(value);
    } else if (flag == "--samples") {
      if (!r.Value(flag, &value)) return 2;
      samples = std::max<int64_t>(0, std::atoll(value.c_str()));
    } else if (config_path.empty() && flag[0] != '-') {
      config_path = flag, ++r.i;
    } else {
      std::fprintf(stderr, "headrace bench: unknown argument '%s'\n", flag.c_str());
      return 2;
    }
  }
  auto spec = LoadPipelineConfig(config_path, overrides);
  if (!spec.ok()) {
    std::fprintf(stderr, "headrace bench: %s: %s\n", config_path.c_str(),
                 spec.status().ToString().c_str());
    return 2;
  }
  auto ops = MeasureOps(*spec, samples > 0 ? samples : INT64_MAX);
  if (!ops.ok()) {
    std::fprintf(stderr, "headrace bench: %s\n", ops.status().ToString().c_str());
    return 1;
  }
  std::printf("operators, one thread, %lld samples (ms per sample):\n",
              static_cast<long long>(ops->samples));
  for (const auto& op : ops->ops) std::printf("  %-28s %8.3f\n", op.name.c_str(), op.ms_per_sample);
  std::printf("  %-28s %8.3f\n  %-28s %8.3f (not in total: overlapped)\n", "total",
              ops->total_ms_per_sample, "read", ops->read_ms_per_sample);
  JsonWriter w;
  w.BeginObject();
  WriteOps(w, *ops);
  int rc = 0;
  if (what == "engine") {
    // Engine overhead: throughput against the ideal T / cost, with a trainer that never
    // waits, over the very samples the operators were timed on (file order, one pass),
    // best of three runs per thread count.
    const int cores = AvailableCores();
    const int64_t batches = std::max<int64_t>(1, ops->samples / spec->batch.size);
    w.Key("overhead").BeginArray();
    std::printf("\nengine overhead (trainer never waits, %lld batches of %lld, best of 3):\n",
                static_cast<long long>(batches), static_cast<long long>(spec->batch.size));
    std::printf("  threads  samples/s    ideal  efficiency\n");
    for (int threads = 1; threads <= cores; threads *= 2) {
      PipelineSpec s = *spec;
      s.execution.cpu_threads = threads;
      s.shuffle = false;
      s.epochs = 1;
      Result<RunReport> best = Status::Internal("no run");
      for (int attempt = 0; attempt < 3; ++attempt) {
        auto report = RunFor(s, batches, 0);
        if (!report.ok()) {
          std::fprintf(stderr, "headrace bench: %s\n", report.status().ToString().c_str());
          return 1;
        }
        if (!best.ok() || report->samples_per_s > best->samples_per_s) best = std::move(report);
      }
      const double ideal = threads * 1e3 / ops->total_ms_per_sample;
      const double efficiency = best->samples_per_s / ideal;
      std::printf("  %7d  %9.1f  %7.1f  %9.3f\n", threads, best->samples_per_s, ideal, efficiency);
      w.BeginObject().Key("threads").Int(threads).Key("samples_per_s").Double(best->samples_per_s);
      w.Key("ideal_samples_per_s").Double(ideal).Key("efficiency").Double(efficiency);
      w.Key("time_to_first_batch_s").Double(best->time_to_first_batch_s).EndObject();
    }
    w.EndArray();
    // Fed trainer: a step 1.5x the CPU time of one batch at `cores` threads.
    const double step_ms = 1.5 * spec->batch.size * ops->total_ms_per_sample / cores;
    const int64_t fed_batches = 200;
    PipelineSpec s = *spec;
    s.execution.cpu_threads = cores;
    s.epochs = std::max<int64_t>(s.epochs.value_or(1), 1000);
    auto fed = RunFor(s, fed_batches, step_ms);
    if (!fed.ok()) {
      std::fprintf(stderr, "headrace bench: %s\n", fed.status().ToString().c_str());
      return 1;
    }
    std::printf(
        "\nfed trainer: step %.1f ms (1.5x a batch's CPU time at %d threads), "
        "%lld batches\n  wait_time_ratio %.4f, time to first batch %.3f s, peak RSS "
        "%.1f MiB (baseline %.1f MiB, budget %.1f MiB)\n",
        step_ms, cores, static_cast<long long>(fed->batches), fed->wait_time_ratio,
        fed->time_to_first_batch_s, fed->peak_rss_bytes / 1048576.0,
        fed->baseline_rss_bytes / 1048576.0, fed->memory_budget_bytes / 1048576.0);
    w.Key("fed_trainer").BeginObject();
    w.Key("step_ms").Double(step_ms).Key("threads").Int(cores).Key("batches").Int(fed->batches);
    w.Key("wait_time_ratio").Double(fed->wait_time_ratio);
    w.Key("time_to_first_batch_s").Double(fed->time_to_first_batch_s);
    w.Key("peak_rss_bytes").Int(fed->peak_rss_bytes);
    w.Key("baseline_rss_bytes").Int(fed->baseline_rss_bytes);
    w.Key("memory_budget_bytes").Int(fed->memory_budget_bytes);
    w.Key("bytes_copied_per_sample").Double(fed->bytes_copied_per_sample);
    w.EndObject();
  }
  w.EndObject();
  if (!report_path.empty() && !WriteTextFile(report_path, w.str() + "\n")) rc = 1;
  return rc;
}

}  // namespace headrace::tools
