// The doctor: from a run report, which stage limits the trainer and of what kind, the
// numbers that say so, and what to change, with numbers derived from the measured rates.
//
// The trainer's pace is batch.size / trainer.step_ms samples per second (without a
// step, twice the measured rate: "how to go twice as fast"). Each advice sizes its knob
// for that pace:
// - reads in flight by Little's law: required reads/s x mean read latency;
// - CPU threads or cores: CPU-seconds per sample (the cpu stage's busy time x threads /
//   samples) x required samples/s;
// - worker processes for a Python op: its GIL-held seconds per sample x samples/s
//   (the GIL runs one call at a time, whatever the thread count);
// - memory.budget_bytes: prefetch.depth full batches ahead plus the I/O budget.
// Each advice adds a margin (kHeadroom) so the pace is kept with bursts.
//
// Pure arithmetic on a RunReport: no clock, no machine state beyond the core count
// given in DoctorOptions, so the verdicts are tested on constructed reports
// (doctor_test.cc) and a saved report gives the same diagnosis anywhere.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/clock.h"
#include "headrace/observe/report.h"

namespace headrace {

// What limits the trainer.
enum class LimitKind {
  // Reads in flight sit at execution.io_inflight and each waits on the storage's
  // latency: more reads in flight raise the rate.
  kStorageLatency,
  // The storage moves bytes as fast as it can (the given bandwidth is reached, or reads
  // are slow while below their cap): more reads in flight do not help.
  kStorageBandwidth,
  // The CPU threads are busy running the operators.
  kCpu,
  // The CPU threads are busy, but a Python operator holds the GIL: its calls run one
  // at a time whatever the thread count.
  kPythonGil,
  // No stage is saturated, but memory.budget_bytes holds fewer batches ahead than
  // prefetch.depth, so the CPU threads wait for the budget.
  kMemoryBudget,
  // No stage is saturated and the budget has room: too few batches are computed ahead
  // to absorb bursts (prefetch.depth).
  kPrefetch,
  // The trainer barely waits: the pipeline keeps up; nothing to change.
  kConsumer,
};

// "storage_latency", "storage_bandwidth", "cpu", "python_gil", "memory_budget",
// "prefetch", "consumer".
std::string_view LimitKindName(LimitKind kind);

// One number a verdict rests on, with its unit ("ms", "samples/s", "ratio", ...).
struct Evidence {
  std::string name;
  double value = 0;
  std::string unit;
};

// One change to make. `setting` is a config key (execution.io_inflight) with its value
// now and the suggested one; empty for advice that no single setting expresses (more
// cores on other nodes, a cheaper operator).
struct Advice {
  std::string setting;
  double current = 0;
  double suggested = 0;
  std::string text;
};

struct Diagnosis {
  LimitKind limit = LimitKind::kConsumer;
  std::string stage;    // "read", "cpu", "batch" (the budget, the prefetch) or "consumer"
  std::string summary;  // one sentence with the deciding numbers
  std::vector<Evidence> evidence;
  std::vector<Advice> advice;  // empty when nothing should change
};

struct DoctorOptions {
  // The storage's bandwidth in MB/s when known (a NIC's, a bucket prefix's limit): reads
  // moving at least 80% of it are bandwidth-bound. 0: unknown.
  double storage_mb_s = 0;
  // The cores of the machine the advice is for; 0: this machine's (AvailableCores).
  int available_cores = 0;
};

// The margin every sized knob gets over the exact arithmetic (x1.25).
inline constexpr double kHeadroom = 1.25;

Diagnosis DiagnoseRun(const RunReport& report, const DoctorOptions& options = {});

// A bounded run for the doctor: the pipeline against the simulated trainer (a step of
// trainer.step_ms after each batch), driven by one thread in RunUntil calls, so that a
// caller that must stay responsive (Python noticing Ctrl-C) drives it in slices.
// Cancel() is safe from any thread.
class DoctorRun {
 public:
  // Makes the loader (its errors are the config's: kInvalidArgument, kNotFound).
  // `baseline_rss_bytes`: the process's RSS before, for the report.
  static Result<std::unique_ptr<DoctorRun>> Start(const PipelineSpec& spec,
                                                  int64_t baseline_rss_bytes);
  // Takes batches and simulates the trainer's steps until `until`: true when the run
  // ended first, false at `until` (a step may be left to finish in the next call); the
  // run's failure, or kCancelled after Cancel().
  Result<bool> RunUntil(Clock::time_point until);
  void Cancel();
  // The run's report so far (RunReport.bottleneck/advice are the report's own).
  RunReport Report() const;

 private:
  DoctorRun() = default;
  std::unique_ptr<Loader> loader_;
  Clock::duration step_{};
  Clock::time_point step_end_{};  // the simulated trainer is busy until then
  std::mutex mu_;
  std::condition_variable cancelled_cv_;
  bool cancelled_ = false;  // guarded by mu_
  int64_t baseline_rss_bytes_ = 0;
};

// Now plus `seconds` (at most a year: the bound of a doctor's run), for RunUntil.
Clock::time_point DoctorDeadline(double seconds);

// {"limit": ..., "stage": ..., "summary": ..., "evidence": [{"name", "value", "unit"}],
//  "advice": [{"setting", "current", "suggested", "text"}]} ("setting" and its values
// only where the advice has one).
std::string DiagnosisToJson(const Diagnosis& diagnosis);
std::string DiagnosisToText(const Diagnosis& diagnosis);

}  // namespace headrace
