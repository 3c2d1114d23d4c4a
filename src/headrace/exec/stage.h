// What every stage of the engine reports, keyed by the stage's kind.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace headrace {

// The engine's stages (exec/README.md has the picture).
enum class StageKind {
  kRead,      // "read" (io): a sample's media from storage, within the I/O budget
  kChain,     // "cpu" (cpu): the source's Fill and the operator chain, on the CPU pool
  kAssemble,  // "batch" (assembly): admission, a batch's rows, compaction, batch ops
};

// The stage's name in reports and metrics ("read", "cpu", "batch"), and its class of
// work ("io", "cpu", "assembly").
std::string_view StageName(StageKind kind);
std::string_view StageClass(StageKind kind);

// Time split of one stage over the run, per unit of concurrency:
// busy + starved + blocked ~= elapsed (for "batch": the time until the last admission).
struct StageMetrics {
  // A stage's metrics, its name and class filled in from `kind`.
  static StageMetrics Of(StageKind kind, int concurrency);

  std::string name;     // StageName: "read", "cpu", "batch" (a report read back: as written)
  std::string kind;     // StageClass: "io", "cpu", "assembly"
  int concurrency = 1;  // reads in flight allowed, CPU threads, ...
  int64_t items = 0;
  double busy_s = 0;     // doing its work
  double starved_s = 0;  // nothing to do: waiting for input
  double blocked_s = 0;  // work ready but output full: waiting for downstream
  // Mean occupancy of the stage's output queue, 0..1: for "read" undecoded bytes over
  // the io budget (sampled at each read), for "batch" ready batches over the prefetch
  // depth (sampled at each Next()); -1 where the stage has no queue of its own.
  double queue_fill = -1;
  // "read" only: the mean time from issuing a read to its bytes (or its failure), over
  // the reads done; -1 for other stages. With `items` and the run's time it gives the
  // reads in flight on average (Little's law: reads per second x latency).
  double mean_latency_ms = -1;
};

}  // namespace headrace
