// headrace bench: measurements whose results go into bench/RESULTS.md.
//
// bench ops:    the single-thread cost of each operator on the dataset, ms per sample.
// bench engine: the engine's overhead (pipeline samples/s at T threads against
//               T / summed operator cost, and the process's CPU per sample against the
//               chain's) and the wait-time ratio of a trainer whose step is 1.5x the CPU
//               time of a batch.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <thread>

#include "commands.h"
#include "headrace/core/json_writer.h"
#include "headrace/core/region_allocator.h"
#include "headrace/exec/thread_pool.h"
#include "headrace/formats/manifest.h"
#include "headrace/formats/source.h"
#include "headrace/io/storage.h"
#include "headrace/ops/chain_runner.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/loader.h"
#include "headrace/pipeline/plan.h"
#include "headrace/observe/report.h"

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
  // The chain's CPU time (the timing thread's clock), best pass: unlike wall time, it does
  // not grow when other processes take the CPU.
  double cpu_ms_per_sample = 0;
  int64_t samples = 0;
};

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Puts glibc's malloc in the state a running loader's is in: the first time a process
// frees a block that malloc had mmapped, glibc raises its mmap threshold to that size,
// and blocks up to it come from the heap from then on. A loader frees such blocks in its
// first batches; a timing pass in a fresh process has not, so an op that allocates
// 128 KiB-1 MiB a sample got fresh pages from the kernel, faulted in and zeroed, every
// sample: audio.resample (libswresample's av_mallocz in swr_convert) cost 0.29 ms a
// sample so, against 0.085 in a run and after this.
void SettleMalloc() {
#ifdef __GLIBC__
  // 16 MiB: under glibc's 32 MiB cap on the dynamic threshold. volatile: a malloc/free
  // pair the compiler can see through is removed.
  void* volatile block = std::malloc(size_t{16} << 20);
  std::free(block);
#endif
}

// The operator chain alone, on the calling thread, over the first `samples` good
// records: Make plans the pipeline and runs a warm-up over a few of them; each Pass
// times every op on every record; best() holds each op's best pass so far (and the
// best pass's chain CPU time), so that `bench engine` can interleave passes with its
// runs and both see the same moments of a shared machine.
class OpsTimer {
 public:
  static Result<std::unique_ptr<OpsTimer>> Make(const PipelineSpec& spec, int64_t samples) {
    SettleMalloc();
    std::unique_ptr<OpsTimer> t(new OpsTimer(spec));
    t->storage_ = MakeLocalStorage();
    HR_ASSIGN_OR_RETURN(t->manifest_, LoadManifest(*t->storage_, spec.source));
    HR_ASSIGN_OR_RETURN(t->plan_, PlanPipeline(spec, *t->storage_));
    if (t->plan_.chains.size() != 1) {
      return Status::InvalidArgument(
          "bench ops times one chain of ops over a manifest; this blend's entries have ops "
          "of their own: time each entry's pipeline");
    }
    // Each sample writes its own rows, as into the engine's batch buffers: two batches'
    // worth, taken in turn and touched once before the clock, so that an op pays for
    // writing memory that is not in its cache as it does in a run (one row reused for
    // every sample stays in cache: pointcloud.voxelize, which writes 6 MiB a sample,
    // cost 0.62 ms so against 0.88 in turn and 0.92 in a run).
    const int64_t row_sets = 2 * std::max<int64_t>(1, spec.batch.size);
    t->slots_.resize(static_cast<size_t>(row_sets));
    for (const FieldSpec& f : t->plan_.fields) {
      HR_ASSIGN_OR_RETURN(Buffer row, Buffer::Allocate(f.fixed_bytes() * row_sets));
      std::memset(row.mutable_data(), 0, row.size());
      for (int64_t r = 0; r < row_sets; ++r) {
        t->slots_[static_cast<size_t>(r)].push_back(
            f.concatenated() ? nullptr : row.mutable_data() + r * f.fixed_bytes());
      }
      t->rows_.push_back(std::move(row));
    }
    // Concatenated fields: each sample appends its rows, as in the engine, into memory
    // kept from one sample to the next.
    if (RaggedRows::Needed(t->plan_.fields)) {
      // Regions, as the engine's sample rows take (exec/engine.cc SegmentMemory): grown in
      // place, kept from one sample to the next.
      t->ragged_.emplace(t->plan_.fields, MakeVaryingPool(DefaultAllocator(), size_t{1} << 30));
    }
    for (const SampleRecord& r : t->manifest_.records) {
      if (r.status.ok() && static_cast<int64_t>(t->records_.size()) < samples) {
        t->records_.push_back(&r);
      }
    }
    if (t->records_.empty()) return Status::InvalidArgument("the manifest has no good records");
    t->values_.resize(static_cast<size_t>(t->plan_.chains[0].num_values));
    t->best_ns_.assign(t->plan_.chains[0].ops.size(), INT64_MAX);
    std::vector<int64_t> ns;
    int64_t read_ns = 0;
    HR_RETURN_IF_ERROR(t->Run(std::min<size_t>(t->records_.size(), 16), ns, read_ns));
    return t;
  }

  Status Pass() {
    std::vector<int64_t> ns;
    int64_t read_ns = 0;
    double cpu_s = 0;
    HR_RETURN_IF_ERROR(Run(records_.size(), ns, read_ns, &cpu_s));
    for (size_t k = 0; k < ns.size(); ++k) best_ns_[k] = std::min(best_ns_[k], ns[k]);
    const auto n = static_cast<double>(records_.size());
    best_cpu_s_ = passes_ == 0 ? cpu_s : std::min(best_cpu_s_, cpu_s);
    read_s_ = passes_ == 0 ? 1e-9 * static_cast<double>(read_ns) : read_s_;
    ++passes_;
    best_ = OpsBench{};
    best_.samples = static_cast<int64_t>(records_.size());
    best_.read_ms_per_sample = 1e3 * read_s_ / n;
    best_.cpu_ms_per_sample = 1e3 * best_cpu_s_ / n;
    for (size_t k = 0; k < plan_.chains[0].ops.size(); ++k) {
      const double ms = static_cast<double>(best_ns_[k]) * 1e-6 / n;
      best_.ops.push_back(OpCost{std::string(plan_.chains[0].ops[k]->name()), ms});
      best_.total_ms_per_sample += ms;
    }
    return Status::Ok();
  }

  const OpsBench& best() const { return best_; }
  // The good records of the whole manifest (the engine's epoch).
  int64_t dataset_samples() const {
    int64_t n = 0;
    for (const SampleRecord& r : manifest_.records) n += r.status.ok() ? 1 : 0;
    return std::max<int64_t>(n, 1);
  }

 private:
  explicit OpsTimer(const PipelineSpec& spec) : spec_(spec) {}

  // The chain over the first `n` records: each op's wall time into ns[k], the reads'
  // into read_ns, and the thread's CPU time in the chains (reads excluded) into *cpu_s.
  Status Run(size_t n, std::vector<int64_t>& ns, int64_t& read_ns, double* cpu_s = nullptr) {
    ns.assign(plan_.chains[0].ops.size(), 0);
    const ChainRunner chain(plan_.chains[0], spec_.seed);
    for (size_t i = 0; i < n; ++i) {
      // The sample's media are read just before its chain, off the clock, as the engine
      // decodes what an I/O thread has just read (and only one sample's files are held).
      media_.clear();
      if (plan_.reads_media) {
        const auto read_start = Clock::now();
        // Every item, as the engine reads them (a manifest's are whole files).
        for (const MediaRef& ref : records_[i]->media) {
          HR_ASSIGN_OR_RETURN(Buffer bytes, storage_->Read(ref.uri));
          media_.push_back(std::move(bytes));
        }
        read_ns += NanosSince(read_start);
      }
      Sample sample;
      sample.index = static_cast<int64_t>(i);
      sample.record = records_[i];
      FillFromRecord(media_, sample);
      const double cpu_start = cpu_s != nullptr ? ThreadCpuSeconds() : 0;
      if (ragged_) ragged_->Clear();
      const Status st = chain.Run(sample, slots_[i % slots_.size()].data(),
                                  ragged_ ? &*ragged_ : nullptr, scratch_, values_,
                                  [&](size_t k, Clock::time_point start, Clock::time_point end,
                                      const SampleContext&) {
                                    ns[k] += std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 end - start)
                                                 .count();
                                  });
      if (!st.ok()) return st.WithContext("sample " + records_[i]->id);
      if (cpu_s != nullptr) *cpu_s += ThreadCpuSeconds() - cpu_start;
    }
    return Status::Ok();
  }

  const PipelineSpec spec_;
  std::unique_ptr<Storage> storage_;
  Manifest manifest_;
  PipelinePlan plan_;
  std::vector<Buffer> rows_;
  std::optional<RaggedRows> ragged_;  // when the layout has concatenated fields
  std::vector<std::vector<uint8_t*>> slots_;  // per row set, each field's row
  std::vector<const SampleRecord*> records_;
  std::vector<Buffer> media_;
  std::vector<Value> values_;
  ScratchArena scratch_;
  std::vector<int64_t> best_ns_;
  double best_cpu_s_ = 0;
  double read_s_ = 0;
  int passes_ = 0;
  OpsBench best_;
};

// One pipeline run with a trainer that sleeps step_ms per batch, until `batches` batches
// or the end of the run.
struct EngineRun {
  RunReport report;
  // From the end of Loader::Make (the plan: manifest, models, Tesseract; a one-off that
  // a long run amortizes) to the last batch: samples/s and the whole process's CPU per
  // sample (op threads, I/O, assembly, the consumer). Counting from the first batch
  // instead would leave out work done ahead for later batches by then.
  double samples_per_s = 0;
  double cpu_ms_per_sample = 0;
  double plan_s = 0;
};

Result<EngineRun> RunFor(PipelineSpec spec, int64_t batches, double step_ms) {
  spec.trainer.step_ms = step_ms;
  const int64_t baseline = CurrentRssBytes();
  const auto make_start = Clock::now();
  HR_ASSIGN_OR_RETURN(auto loader, Loader::Make(spec));
  const auto start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  const auto step = std::chrono::duration<double, std::milli>(step_ms);
  int64_t samples = 0;
  for (int64_t n = 0; n < batches; ++n) {
    HR_ASSIGN_OR_RETURN(auto batch, loader->Next());
    if (!batch) break;
    samples += batch->size();
    if (step_ms > 0) {
      std::this_thread::sleep_until(Clock::now() +
                                    std::chrono::duration_cast<Clock::duration>(step));
    }
  }
  EngineRun run;
  const double cpu = ProcessCpuSeconds() - cpu_start;
  const double seconds = SecondsSince(start);
  run.plan_s = std::chrono::duration<double>(start - make_start).count();
  if (samples > 0 && seconds > 0) {
    run.samples_per_s = static_cast<double>(samples) / seconds;
    run.cpu_ms_per_sample = 1e3 * cpu / static_cast<double>(samples);
  }
  run.report = BuildRunReport(*loader, baseline);
  return run;
}

void WriteOps(JsonWriter& w, const OpsBench& b) {
  w.Key("ops").BeginArray();
  for (const auto& op : b.ops) {
    w.BeginObject().Key("name").String(op.name).Key("ms_per_sample").Double(op.ms_per_sample);
    w.EndObject();
  }
  w.EndArray();
  w.Key("total_ms_per_sample").Double(b.total_ms_per_sample);
  w.Key("cpu_ms_per_sample").Double(b.cpu_ms_per_sample);
  w.Key("read_ms_per_sample").Double(b.read_ms_per_sample);
  w.Key("samples").Int(b.samples);
}

}  // namespace

int BenchCommand(const Args& args) {
  if (!args.empty() && args[0] == "io") return BenchIoCommand(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "balance") {
    return BenchBalanceCommand(Args(args.begin() + 1, args.end()));
  }
  if (!args.empty() && args[0] == "serve") {
    return BenchServeCommand(Args(args.begin() + 1, args.end()));
  }
  if (args.empty() || (args[0] != "ops" && args[0] != "engine")) {
    std::fprintf(stderr,
                 "usage: headrace bench ops|engine CONFIG [--samples N] [--report PATH] "
                 "[--set key=value ...] [--seconds S]\n       headrace bench io [...]\n"
                 "       headrace bench balance CONFIG [...]\n");
    return 2;
  }
  const std::string what = args[0];
  std::string config_path, report_path, value;
  std::vector<std::string> overrides;
  int64_t samples = 0;  // 0: the whole dataset
  // bench engine: each run lasts at least this long at the ideal rate (more epochs of a
  // small dataset), so that its rate is the steady one.
  double min_run_seconds = 2.0;
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
    } else if (flag == "--seconds") {
      if (!r.Value(flag, &value)) return 2;
      min_run_seconds = std::atof(value.c_str());
      if (!(min_run_seconds >= 0 && min_run_seconds <= 3600)) {
        std::fprintf(stderr, "headrace bench: --seconds must be in 0..3600, got '%s'\n",
                     value.c_str());
        return 2;
      }
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
  auto timer = OpsTimer::Make(*spec, samples > 0 ? samples : INT64_MAX);
  if (!timer.ok()) {
    std::fprintf(stderr, "headrace bench: %s\n", timer.status().ToString().c_str());
    return 1;
  }
  // Engine overhead: throughput against the ideal T / cost, with a trainer that never
  // waits, unshuffled from the first of the timed samples. Three rounds, each a timing
  // pass of the operators and then one run per thread count, so that on a shared machine
  // both sides meet the same moments; best of the three for each. A run lasts at least
  // min_run_seconds at the ideal rate (more epochs of a small dataset), and its rate and
  // CPU count from the end of planning (reported as its own time) to its last batch.
  struct Best {
    EngineRun run;
    double min_cpu_ms = 0;
    int64_t batches = 0;
    bool any = false;
  };
  std::vector<int> thread_counts;
  for (int t = 1; t <= AvailableCores(); t *= 2) thread_counts.push_back(t);
  std::vector<Best> best(thread_counts.size());
  for (int round = 0; round < 3; ++round) {
    if (Status st = (*timer)->Pass(); !st.ok()) {
      std::fprintf(stderr, "headrace bench: %s\n", st.ToString().c_str());
      return 1;
    }
    if (what != "engine") continue;
    const OpsBench& ops = (*timer)->best();
    for (size_t k = 0; k < thread_counts.size(); ++k) {
      PipelineSpec s = *spec;
      s.execution.cpu_threads = thread_counts[k];
      s.shuffle = false;
      const int64_t batch = std::max<int64_t>(1, spec->batch.size);
      if (round == 0) {
        const double ideal = thread_counts[k] * 1e3 / ops.total_ms_per_sample;
        best[k].batches = std::max<int64_t>(
            ops.samples / batch, static_cast<int64_t>(std::ceil(min_run_seconds * ideal / batch)));
      }
      // Enough epochs for the batches (a partial batch ends each epoch).
      s.epochs = best[k].batches * batch / (*timer)->dataset_samples() + 2;
      auto run = RunFor(s, best[k].batches, 0);
      if (!run.ok()) {
        std::fprintf(stderr, "headrace bench: %s\n", run.status().ToString().c_str());
        return 1;
      }
      Best& b = best[k];
      b.min_cpu_ms =
          b.any ? std::min(b.min_cpu_ms, run->cpu_ms_per_sample) : run->cpu_ms_per_sample;
      if (!b.any || run->samples_per_s > b.run.samples_per_s) b.run = *std::move(run);
      b.any = true;
    }
  }
  const OpsBench& ops = (*timer)->best();
  std::printf("operators, one thread, %lld samples (ms per sample, best of 3 passes):\n",
              static_cast<long long>(ops.samples));
  for (const auto& op : ops.ops) std::printf("  %-28s %8.3f\n", op.name.c_str(), op.ms_per_sample);
  std::printf("  %-28s %8.3f (CPU %.3f)\n  %-28s %8.3f (not in total: overlapped)\n", "total",
              ops.total_ms_per_sample, ops.cpu_ms_per_sample, "read", ops.read_ms_per_sample);
  JsonWriter w;
  w.BeginObject();
  WriteOps(w, ops);
  int rc = 0;
  if (what == "engine") {
    const int cores = AvailableCores();
    w.Key("overhead").BeginArray();
    std::printf(
        "\nengine overhead (trainer never waits; unshuffled; 3 rounds of a timing pass and one "
        "run per thread count, best of 3; rates after planning):\n");
    std::printf(
        "  threads  batches  samples/s    ideal  efficiency  incl. plan  plan s  first batch s  "
        "CPU ms/sample  CPU efficiency\n");
    for (size_t k = 0; k < thread_counts.size(); ++k) {
      const int threads = thread_counts[k];
      const EngineRun& run = best[k].run;
      const double ideal = threads * 1e3 / ops.total_ms_per_sample;
      const double efficiency = run.samples_per_s / ideal;
      const double run_efficiency = run.report.samples_per_s / ideal;
      const double cpu_efficiency =
          best[k].min_cpu_ms > 0 ? ops.cpu_ms_per_sample / best[k].min_cpu_ms : 0;
      std::printf("  %7d  %7lld  %9.1f  %7.1f  %10.3f  %10.3f  %6.3f  %13.3f  %13.3f  %14.3f\n",
                  threads, static_cast<long long>(run.report.batches), run.samples_per_s, ideal,
                  efficiency, run_efficiency, run.plan_s, run.report.time_to_first_batch_s,
                  best[k].min_cpu_ms, cpu_efficiency);
      w.BeginObject().Key("threads").Int(threads).Key("batches").Int(run.report.batches);
      w.Key("samples_per_s").Double(run.samples_per_s);
      w.Key("run_samples_per_s").Double(run.report.samples_per_s);
      w.Key("ideal_samples_per_s").Double(ideal).Key("efficiency").Double(efficiency);
      w.Key("run_efficiency").Double(run_efficiency);
      w.Key("cpu_ms_per_sample").Double(best[k].min_cpu_ms);
      w.Key("cpu_efficiency").Double(cpu_efficiency);
      w.Key("plan_s").Double(run.plan_s);
      w.Key("time_to_first_batch_s").Double(run.report.time_to_first_batch_s);
      w.Key("ops").BeginArray();
      for (const OpReport& op : run.report.ops) {
        w.BeginObject().Key("name").String(op.name).Key("ms_per_sample").Double(op.ms_per_sample);
        w.EndObject();
      }
      w.EndArray().EndObject();
    }
    w.EndArray();
    // Where the time goes at one thread: each op alone against the same op in the run.
    if (!best.empty() && best[0].run.report.ops.size() == ops.ops.size()) {
      std::printf("\n  per op, ms/sample   alone   in the best 1-thread run\n");
      for (size_t i = 0; i < ops.ops.size(); ++i) {
        std::printf("  %-28s %8.3f  %8.3f\n", ops.ops[i].name.c_str(), ops.ops[i].ms_per_sample,
                    best[0].run.report.ops[i].ms_per_sample);
      }
    }
    // Fed trainer: a step 1.5x the CPU time of one batch at `cores` threads.
    const double step_ms = 1.5 * spec->batch.size * ops.total_ms_per_sample / cores;
    const int64_t fed_batches = 200;
    PipelineSpec s = *spec;
    s.execution.cpu_threads = cores;
    s.epochs = std::max<int64_t>(s.epochs.value_or(1), 1000);
    auto fed_run = RunFor(s, fed_batches, step_ms);
    if (!fed_run.ok()) {
      std::fprintf(stderr, "headrace bench: %s\n", fed_run.status().ToString().c_str());
      return 1;
    }
    const RunReport* fed = &fed_run->report;
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
