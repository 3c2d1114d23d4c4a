// Capacity planning: the arithmetic of MISSION.md ("CPU:GPU ratios, the 16.5 h example")
// as a function of measured costs and a fleet's shape, for `headrace plan`.
//
// Pure functions over plain structs: no threads, no files (a run report's text is read
// by the caller and passed in). Units are in every name: TB = 1e12 bytes, GB = 1e9
// bytes, MB = 1e6 bytes; a vCPU is one hardware thread, what one engine CPU thread
// occupies; rates are per second, durations in hours unless named otherwise.
//
// Two independent sections, each computed when any of its inputs is given (and then
// all of its required inputs must be):
// - CPU: GPUs consume samples_per_s_per_gpu = batch_size_per_gpu / gpu_step_s; keeping
//   up takes that * cpu_seconds_per_sample / cpu_efficiency vCPUs per GPU. With prefetch
//   overlapping preparation and steps, a pipeline supplying a share u of that rate makes
//   the GPUs wait 1 - u of their time (the wait-time ratio), so a target wait-time ratio
//   w needs (1 - w) of the no-wait vCPUs. The GPU node's own vCPUs per GPU, less those
//   reserved for the trainer, give the utilization to expect without CPU-only nodes; the
//   difference, over a CPU-only node's vCPUs, gives the CPU-only nodes per GPU node.
// - I/O: materializing reads the raw dataset once, writes the expanded intermediates
//   once and has the GPU fleet read them every epoch; streaming reads the raw dataset
//   every epoch. Durations are bytes over aggregate bandwidth.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "headrace/core/status.h"

namespace headrace::capacity {

// A GPU instance type's shape (the figures MISSION.md quotes).
struct InstancePreset {
  std::string_view name;
  int vcpus;
  int gpus;
  std::string_view gpu;
};
inline constexpr InstancePreset kInstancePresets[] = {
    {"p4d.24xlarge", 96, 8, "A100"},  // 12 vCPUs per GPU
    {"p5.48xlarge", 192, 8, "H100"},  // 24 vCPUs per GPU
};
// Names accepted by `instance`: the presets and "custom" (then vcpus_per_node and
// gpus_per_node are required), e.g. "p4d.24xlarge, p5.48xlarge, custom".
std::string AllowedInstances();

// Defaults of the optional inputs, documented in README.md.
inline constexpr double kDefaultCpuEfficiency = 0.9;
inline constexpr double kDefaultReservedVcpusPerGpu = 2;
inline constexpr double kDefaultCpuNodeVcpus = 96;
inline constexpr double kDefaultTargetWaitRatio = 0.10;
inline constexpr double kDefaultEpochs = 1;

// What the user gives; an empty optional was not given. Each numeric input has one
// entry in InputFields() (its flag, YAML key, unit and allowed range).
struct PlanInputs {
  // I/O section.
  std::optional<double> dataset_tb;         // raw dataset; or samples * sample_mb
  std::optional<double> expansion;          // bytes after preprocessing / raw bytes
  std::optional<double> read_gb_per_s;      // aggregate read of the raw dataset
  std::optional<double> write_gb_per_s;     // aggregate write of intermediates
  std::optional<double> gpu_read_gb_per_s;  // the GPU fleet reading intermediates; default read
  std::optional<double> epochs;             // default kDefaultEpochs
  std::optional<double> samples;            // samples per epoch (both sections, optional)
  std::optional<double> sample_mb;          // raw MB per sample: dataset = samples * this
  // CPU section.
  std::optional<double> cpu_seconds_per_sample;  // measured CPU cost of one sample
  std::optional<double> cpu_efficiency;          // share of a vCPU turned into op work
  std::optional<double> gpu_step_ms;             // one training step of one GPU
  std::optional<double> batch_size;              // per GPU (data-parallel rank)
  std::optional<double> gpus;                    // total; default: one node's GPUs
  std::string instance;                          // a preset name or "custom"
  std::optional<double> vcpus_per_node;          // with instance "custom"
  std::optional<double> gpus_per_node;           // with instance "custom"
  std::optional<double> reserved_vcpus_per_gpu;  // kept for the trainer on the GPU node
  std::optional<double> cpu_node_vcpus;          // vCPUs of one CPU-only node
  std::optional<double> target_wait_ratio;       // 0 <= w < 1
  // Where cpu_seconds_per_sample came from, for the output ("--cpu-ms-per-sample", or
  // "run report out/run-report.json: cpu stage ...").
  std::string cpu_seconds_source;
};

// The allowed range of a numeric input.
enum class Range {
  kPositive,         // > 0
  kNonNegative,      // >= 0
  kPositiveInteger,  // a whole number >= 1
  kWaitRatio,        // 0 <= x < 1
  kEfficiency,       // 0 < x <= 1
};

struct InputField {
  std::string_view flag;  // "dataset-tb": the flag is --dataset-tb, the YAML key dataset_tb
  std::string_view doc;   // what it is, with its unit
  std::optional<double> PlanInputs::*member;
  Range range;
  double scale = 1;  // the member holds value * scale (cpu-ms-per-sample: 1e-3)
};
// Every numeric input, in the order the usage lists them. Two flags may set one member
// (cpu-ms-per-sample and cpu-seconds-per-sample); giving both is an error.
std::span<const InputField> InputFields();

// Sets the input `key` (a flag name without "--", or a YAML key with '_' for '-') from
// its text. The text must be a finite decimal number; the range is checked by Validate
// (so presets and files go through the same check). Unknown keys and bad numbers are
// InvalidArgument naming the flag and, for unknown keys, the allowed ones.
Status SetInput(PlanInputs* inputs, std::string_view key, std::string_view text);

// Fills the inputs of the sources' I/O example (MISSION.md: 500 TB raw, 2x expansion;
// reading 500 TB in 1.5 h, writing 1 PB in 3 h, the GPU fleet reading 1 PB in 12 h), for
// the inputs not given yet. Those phases mean a read and a write bandwidth of
// 500 TB / 1.5 h = 1 PB / 3 h = 92.59 GB/s and a GPU-fleet read of 1 PB / 12 h = 23.15 GB/s.
void ApplySourcesExample(PlanInputs* inputs);
inline constexpr std::string_view kSourcesExamplePreset = "sources-example";

// Checks every given input against its range, the instance name, and that each section
// that is asked for has all it needs; the message names the flag and what is allowed.
Status Validate(const PlanInputs& inputs);

struct CpuPlan {
  std::string instance;
  double vcpus_per_node = 0;
  double gpus_per_node = 0;
  double gpus = 0;
  double batch_size_per_gpu = 0;
  double gpu_step_ms = 0;
  double cpu_seconds_per_sample = 0;
  std::string cpu_seconds_source;
  double cpu_efficiency = 0;
  double reserved_vcpus_per_gpu = 0;
  double cpu_node_vcpus = 0;
  double target_wait_ratio = 0;

  double samples_per_s_per_gpu = 0;  // what one GPU consumes
  double samples_per_s_total = 0;
  double vcpus_per_gpu_no_wait = 0;     // to keep up fully (wait-time ratio 0)
  double vcpus_per_gpu_for_target = 0;  // for target_wait_ratio
  double vcpus_per_gpu_node_for_target = 0;
  double instance_vcpus_per_gpu = 0;  // vcpus_per_node / gpus_per_node (12 on p4d)
  double own_vcpus_per_gpu = 0;       // that less the reserved ones, >= 0
  double gpu_utilization_own_vcpus = 0;  // 0..1, with the GPU node's own vCPUs only
  double wait_time_ratio_own_vcpus = 0;  // 1 - utilization
  double extra_vcpus_per_gpu_node = 0;   // what CPU-only nodes must add, >= 0
  double cpu_only_nodes_per_gpu_node = 0;  // fractional
  int64_t gpu_nodes = 0;                   // ceil(gpus / gpus_per_node)
  int64_t cpu_only_nodes_total = 0;        // ceil over the whole fleet
  // With `samples` given (else negative): the CPU time of one epoch, and an epoch's
  // length when the GPUs never wait.
  double cpu_hours_per_epoch = -1;
  double epoch_hours_at_gpu_pace = -1;
};

struct IoPlan {
  double raw_tb = 0;
  double expansion = 0;
  double expanded_tb = 0;
  double epochs = 0;
  double read_gb_per_s = 0;
  double write_gb_per_s = 0;
  double gpu_read_gb_per_s = 0;
  double raw_read_hours = 0;                 // raw_tb at read_gb_per_s
  double expanded_write_hours = 0;           // expanded_tb at write_gb_per_s
  double expanded_read_hours_per_epoch = 0;  // expanded_tb at gpu_read_gb_per_s
  double materialize_io_hours = 0;  // raw read + write + epochs * expanded read
  double streaming_io_hours = 0;    // epochs * raw read, overlapped with compute
  // With the CPU section and a per-sample size (samples given): the raw read bandwidth
  // streaming needs to keep the GPUs fed, and whether read_gb_per_s falls short of it.
  // Negative when unknown.
  double stream_read_gb_per_s_needed = -1;
};

struct Plan {
  std::optional<CpuPlan> cpu;
  std::optional<IoPlan> io;
};

// Validates, then computes every section asked for. InvalidArgument as Validate.
Result<Plan> ComputePlan(const PlanInputs& inputs);

// The CPU seconds per sample a run report (`headrace run --report`) or a `headrace bench
// ops --report` measured, and a description of where it came from:
// - run report: the "cpu" stage's busy_s x concurrency / items (the pool's time per
//   sample, operators and the engine's own per-sample work); without a cpu stage, the
//   sum of the ops' ms_per_sample;
// - bench ops: total_ms_per_sample (one thread, operators only).
// InvalidArgument when the text is not JSON or holds none of these or no samples.
struct MeasuredCost {
  double cpu_seconds_per_sample = 0;
  std::string source;  // e.g. "cpu stage: 4.33 s busy x 2 threads / 2000 samples"
};
Result<MeasuredCost> CpuCostFromReport(std::string_view json_text);

// The plan for people (an aligned table) and for machines (JSON; every field named
// with its unit; "cpu" and "io" are null when not asked for).
std::string PlanToText(const Plan& plan);
std::string PlanToJson(const Plan& plan);

}  // namespace headrace::capacity
