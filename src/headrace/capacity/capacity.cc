#include "headrace/capacity/capacity.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

#include "headrace/core/json_writer.h"
#include "headrace/core/strings.h"

namespace headrace::capacity {
namespace {

constexpr double kBytesPerTb = 1e12;
constexpr double kBytesPerGb = 1e9;
constexpr double kBytesPerMb = 1e6;
constexpr double kSecondsPerHour = 3600;

const InputField kFields[] = {
    {"dataset-tb", "raw dataset size, TB (1e12 bytes)", &PlanInputs::dataset_tb, Range::kPositive},
    {"expansion", "bytes after preprocessing per raw byte (2: intermediates twice the raw size)",
     &PlanInputs::expansion, Range::kPositive},
    {"read-gb-per-s", "aggregate read bandwidth of the raw dataset, GB/s (1e9 bytes/s)",
     &PlanInputs::read_gb_per_s, Range::kPositive},
    {"write-gb-per-s", "aggregate write bandwidth of materialized intermediates, GB/s",
     &PlanInputs::write_gb_per_s, Range::kPositive},
    {"gpu-read-gb-per-s",
     "aggregate read bandwidth of the GPU fleet reading intermediates, GB/s (default: "
     "--read-gb-per-s)",
     &PlanInputs::gpu_read_gb_per_s, Range::kPositive},
    {"epochs", "epochs of training (default 1)", &PlanInputs::epochs, Range::kPositiveInteger},
    {"samples", "samples per epoch", &PlanInputs::samples, Range::kPositiveInteger},
    {"sample-mb", "raw size of one sample, MB (1e6 bytes): dataset = samples x this",
     &PlanInputs::sample_mb, Range::kPositive},
    {"cpu-ms-per-sample", "CPU time to prepare one sample, ms (one vCPU)",
     &PlanInputs::cpu_seconds_per_sample, Range::kPositive, 1e-3},
    {"cpu-seconds-per-sample", "CPU time to prepare one sample, s (one vCPU)",
     &PlanInputs::cpu_seconds_per_sample, Range::kPositive},
    {"cpu-efficiency", "share of a vCPU's time that becomes sample work, 0..1 (default 0.9)",
     &PlanInputs::cpu_efficiency, Range::kEfficiency},
    {"gpu-step-ms", "one training step of one GPU, ms", &PlanInputs::gpu_step_ms,
     Range::kPositive},
    {"batch-size", "samples per step per GPU (data-parallel rank)", &PlanInputs::batch_size,
     Range::kPositiveInteger},
    {"gpus", "GPUs in the job (default: one node's)", &PlanInputs::gpus,
     Range::kPositiveInteger},
    {"vcpus-per-node", "vCPUs of one GPU node (with --instance custom)",
     &PlanInputs::vcpus_per_node, Range::kPositiveInteger},
    {"gpus-per-node", "GPUs of one GPU node (with --instance custom)",
     &PlanInputs::gpus_per_node, Range::kPositiveInteger},
    {"reserved-vcpus-per-gpu",
     "vCPUs per GPU kept for the trainer on the GPU node, not for data (default 2)",
     &PlanInputs::reserved_vcpus_per_gpu, Range::kNonNegative},
    {"cpu-node-vcpus", "vCPUs of one CPU-only node (default 96)", &PlanInputs::cpu_node_vcpus,
     Range::kPositiveInteger},
    {"target-wait-ratio", "wait-time ratio to plan for, 0 <= w < 1 (default 0.1)",
     &PlanInputs::target_wait_ratio, Range::kWaitRatio},
};

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

const InputField* FindField(std::string_view flag) {
  for (const InputField& f : kFields) {
    if (f.flag == flag) return &f;
  }
  return nullptr;
}

const InstancePreset* FindPreset(std::string_view name) {
  for (const InstancePreset& p : kInstancePresets) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Status CheckRange(const InputField& f, double value) {
  const auto fail = [&](const char* allowed) {
    return Status::InvalidArgument("--" + std::string(f.flag) + " must be " + allowed +
                                   " (got " + Num(value) + ")");
  };
  switch (f.range) {
    case Range::kPositive:
      if (!(value > 0)) return fail("> 0");
      break;
    case Range::kNonNegative:
      if (!(value >= 0)) return fail(">= 0");
      break;
    case Range::kPositiveInteger:
      if (!(value >= 1) || value != std::floor(value)) return fail("a whole number >= 1");
      break;
    case Range::kWaitRatio:
      if (!(value >= 0 && value < 1)) return fail("in [0, 1)");
      break;
    case Range::kEfficiency:
      if (!(value > 0 && value <= 1)) return fail("in (0, 1]");
      break;
  }
  return Status::Ok();
}

// Rounds up, forgiving the last bits of floating-point noise (2.0000000001 nodes is 2).
int64_t CeilCount(double x) {
  return static_cast<int64_t>(std::ceil(x - 1e-9 * std::max(1.0, std::abs(x))));
}

bool AnyGiven(std::initializer_list<bool> given) {
  return std::any_of(given.begin(), given.end(), [](bool b) { return b; });
}

bool CpuAskedFor(const PlanInputs& in) {
  return AnyGiven({in.cpu_seconds_per_sample.has_value(), in.gpu_step_ms.has_value(),
                   in.batch_size.has_value(), in.gpus.has_value(), !in.instance.empty(),
                   in.vcpus_per_node.has_value(), in.gpus_per_node.has_value(),
                   in.reserved_vcpus_per_gpu.has_value(), in.cpu_node_vcpus.has_value(),
                   in.target_wait_ratio.has_value(), in.cpu_efficiency.has_value()});
}

bool IoAskedFor(const PlanInputs& in) {
  return AnyGiven({in.dataset_tb.has_value(), in.expansion.has_value(),
                   in.read_gb_per_s.has_value(), in.write_gb_per_s.has_value(),
                   in.gpu_read_gb_per_s.has_value(), in.sample_mb.has_value()});
}

// The raw dataset size, from --dataset-tb or --samples x --sample-mb; negative if unknown.
double RawTb(const PlanInputs& in) {
  if (in.dataset_tb) return *in.dataset_tb;
  if (in.samples && in.sample_mb) return *in.samples * *in.sample_mb * kBytesPerMb / kBytesPerTb;
  return -1;
}

double Hours(double tb, double gb_per_s) {
  return tb * kBytesPerTb / (gb_per_s * kBytesPerGb) / kSecondsPerHour;
}

CpuPlan ComputeCpu(const PlanInputs& in) {
  CpuPlan p;
  p.instance = in.instance;
  if (const InstancePreset* preset = FindPreset(in.instance)) {
    p.vcpus_per_node = preset->vcpus;
    p.gpus_per_node = preset->gpus;
  } else {
    p.vcpus_per_node = *in.vcpus_per_node;
    p.gpus_per_node = *in.gpus_per_node;
  }
  p.gpus = in.gpus.value_or(p.gpus_per_node);
  p.batch_size_per_gpu = *in.batch_size;
  p.gpu_step_ms = *in.gpu_step_ms;
  p.cpu_seconds_per_sample = *in.cpu_seconds_per_sample;
  p.cpu_seconds_source = in.cpu_seconds_source;
  p.cpu_efficiency = in.cpu_efficiency.value_or(kDefaultCpuEfficiency);
  p.reserved_vcpus_per_gpu = in.reserved_vcpus_per_gpu.value_or(kDefaultReservedVcpusPerGpu);
  p.cpu_node_vcpus = in.cpu_node_vcpus.value_or(kDefaultCpuNodeVcpus);
  p.target_wait_ratio = in.target_wait_ratio.value_or(kDefaultTargetWaitRatio);

  p.samples_per_s_per_gpu = p.batch_size_per_gpu / (p.gpu_step_ms / 1e3);
  p.samples_per_s_total = p.samples_per_s_per_gpu * p.gpus;
  p.vcpus_per_gpu_no_wait = p.samples_per_s_per_gpu * p.cpu_seconds_per_sample / p.cpu_efficiency;
  // Supplying a share u of the GPUs' rate leaves them waiting 1 - u of the time.
  p.vcpus_per_gpu_for_target = (1 - p.target_wait_ratio) * p.vcpus_per_gpu_no_wait;
  p.vcpus_per_gpu_node_for_target = p.vcpus_per_gpu_for_target * p.gpus_per_node;
  p.instance_vcpus_per_gpu = p.vcpus_per_node / p.gpus_per_node;
  p.own_vcpus_per_gpu = std::max(0.0, p.instance_vcpus_per_gpu - p.reserved_vcpus_per_gpu);
  p.gpu_utilization_own_vcpus = std::min(1.0, p.own_vcpus_per_gpu / p.vcpus_per_gpu_no_wait);
  p.wait_time_ratio_own_vcpus = 1 - p.gpu_utilization_own_vcpus;
  const double extra_per_gpu = std::max(0.0, p.vcpus_per_gpu_for_target - p.own_vcpus_per_gpu);
  p.extra_vcpus_per_gpu_node = extra_per_gpu * p.gpus_per_node;
  p.cpu_only_nodes_per_gpu_node = p.extra_vcpus_per_gpu_node / p.cpu_node_vcpus;
  p.gpu_nodes = CeilCount(p.gpus / p.gpus_per_node);
  p.cpu_only_nodes_total = CeilCount(extra_per_gpu * p.gpus / p.cpu_node_vcpus);
  if (in.samples) {
    p.cpu_hours_per_epoch =
        *in.samples * p.cpu_seconds_per_sample / p.cpu_efficiency / kSecondsPerHour;
    p.epoch_hours_at_gpu_pace = *in.samples / p.samples_per_s_total / kSecondsPerHour;
  }
  return p;
}

IoPlan ComputeIo(const PlanInputs& in, const CpuPlan* cpu) {
  IoPlan p;
  p.raw_tb = RawTb(in);
  p.expansion = *in.expansion;
  p.expanded_tb = p.raw_tb * p.expansion;
  p.epochs = in.epochs.value_or(kDefaultEpochs);
  p.read_gb_per_s = *in.read_gb_per_s;
  p.write_gb_per_s = *in.write_gb_per_s;
  p.gpu_read_gb_per_s = in.gpu_read_gb_per_s.value_or(p.read_gb_per_s);
  p.raw_read_hours = Hours(p.raw_tb, p.read_gb_per_s);
  p.expanded_write_hours = Hours(p.expanded_tb, p.write_gb_per_s);
  p.expanded_read_hours_per_epoch = Hours(p.expanded_tb, p.gpu_read_gb_per_s);
  p.materialize_io_hours =
      p.raw_read_hours + p.expanded_write_hours + p.epochs * p.expanded_read_hours_per_epoch;
  p.streaming_io_hours = p.epochs * p.raw_read_hours;
  if (cpu != nullptr && in.samples) {
    const double raw_bytes_per_sample = p.raw_tb * kBytesPerTb / *in.samples;
    p.stream_read_gb_per_s_needed = cpu->samples_per_s_total * raw_bytes_per_sample / kBytesPerGb;
  }
  return p;
}

// An aligned table: label | number | unit | note.
class Table {
 public:
  void Title(std::string text) { rows_.push_back({std::move(text), "", "", "", true}); }
  void Row(std::string label, std::string number, std::string unit, std::string note = "") {
    rows_.push_back({std::move(label), std::move(number), std::move(unit), std::move(note), false});
  }
  std::string Render() const {
    size_t label_w = 0, number_w = 0, unit_w = 0;
    for (const auto& r : rows_) {
      if (r.title) continue;
      label_w = std::max(label_w, r.label.size());
      number_w = std::max(number_w, r.number.size());
      unit_w = std::max(unit_w, r.unit.size());
    }
    std::string out;
    for (const auto& r : rows_) {
      if (r.title) {
        if (!out.empty()) out += '\n';
        out += r.label + '\n';
        continue;
      }
      std::string line = "  " + r.label + std::string(label_w - r.label.size() + 2, ' ') +
                         std::string(number_w - r.number.size(), ' ') + r.number + ' ' +
                         r.unit;
      if (!r.note.empty()) line += std::string(unit_w - r.unit.size() + 2, ' ') + r.note;
      out += line + '\n';
    }
    return out;
  }

 private:
  struct RowText {
    std::string label, number, unit, note;
    bool title;
  };
  std::vector<RowText> rows_;
};

}  // namespace

std::string AllowedInstances() {
  std::string out;
  for (const InstancePreset& p : kInstancePresets) out += std::string(p.name) + ", ";
  return out + "custom";
}

std::span<const InputField> InputFields() { return kFields; }

Status SetInput(PlanInputs* inputs, std::string_view key, std::string_view text) {
  std::string flag(key);
  std::replace(flag.begin(), flag.end(), '_', '-');
  if (flag == "instance") {
    inputs->instance = std::string(text);
    return Status::Ok();
  }
  const InputField* f = FindField(flag);
  if (f == nullptr) {
    std::string allowed = "instance";
    for (const InputField& field : kFields) allowed += ", " + std::string(field.flag);
    return Status::InvalidArgument("unknown input '" + std::string(key) + "' (allowed: " +
                                   allowed + ")");
  }
  double value = 0;
  const std::string_view t = TrimWhitespace(text);
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size() || !std::isfinite(value)) {
    return Status::InvalidArgument("--" + flag + " needs a number, got " + QuoteForMessage(text));
  }
  // Range checks see the value as given (ms stay ms in the message); the member holds it
  // scaled, so Validate divides by the scale of the flag that set it.
  HR_RETURN_IF_ERROR(CheckRange(*f, value));
  inputs->*(f->member) = value * f->scale;
  if (f->member == &PlanInputs::cpu_seconds_per_sample) inputs->cpu_seconds_source = "--" + flag;
  return Status::Ok();
}

void ApplySourcesExample(PlanInputs* in) {
  if (!in->dataset_tb && !(in->samples && in->sample_mb)) in->dataset_tb = 500;
  if (!in->expansion) in->expansion = 2;
  // 500 TB in 1.5 h; 1 PB in 3 h (the same rate); 1 PB in 12 h by the GPU fleet.
  if (!in->read_gb_per_s) in->read_gb_per_s = 500 * kBytesPerTb / kBytesPerGb / (1.5 * 3600);
  if (!in->write_gb_per_s) in->write_gb_per_s = 1000 * kBytesPerTb / kBytesPerGb / (3 * 3600);
  if (!in->gpu_read_gb_per_s) {
    in->gpu_read_gb_per_s = 1000 * kBytesPerTb / kBytesPerGb / (12 * 3600);
  }
}

Status Validate(const PlanInputs& in) {
  for (const InputField& f : kFields) {
    const std::optional<double>& v = in.*(f.member);
    if (!v) continue;
    // Both cpu-*-per-sample flags hold one member: check it once, in the unit of the flag
    // that set it (seconds when a report did).
    if (f.member == &PlanInputs::cpu_seconds_per_sample &&
        (f.scale != 1) != (in.cpu_seconds_source == "--cpu-ms-per-sample")) {
      continue;
    }
    HR_RETURN_IF_ERROR(CheckRange(f, *v / f.scale));
  }
  const bool cpu = CpuAskedFor(in);
  const bool io = IoAskedFor(in);
  if (!cpu && !io) {
    return Status::InvalidArgument(
        "nothing to plan: give the CPU inputs (--cpu-ms-per-sample or --from-report, "
        "--gpu-step-ms, --batch-size, --instance) and/or the I/O inputs (--dataset-tb, "
        "--expansion, --read-gb-per-s, --write-gb-per-s), or --preset sources-example");
  }
  if (in.dataset_tb && in.samples && in.sample_mb) {
    const double product = *in.samples * *in.sample_mb * kBytesPerMb / kBytesPerTb;
    if (std::abs(product - *in.dataset_tb) > 1e-3 * *in.dataset_tb) {
      return Status::InvalidArgument("--dataset-tb " + Num(*in.dataset_tb) +
                                     " disagrees with --samples x --sample-mb = " +
                                     Num(product) + " TB: give one or the other");
    }
  }
  if (in.sample_mb && !in.samples) {
    return Status::InvalidArgument("--sample-mb needs --samples (dataset = samples x sample-mb)");
  }
  if (cpu) {
    if (in.instance.empty()) {
      return Status::InvalidArgument("--instance is required for the CPU plan (allowed: " +
                                     AllowedInstances() + ")");
    }
    if (const InstancePreset* preset = FindPreset(in.instance)) {
      for (const auto& [given, flag] : {std::pair{in.vcpus_per_node.has_value(), "vcpus-per-node"},
                                        std::pair{in.gpus_per_node.has_value(), "gpus-per-node"}}) {
        if (given) {
          return Status::InvalidArgument(
              "--" + std::string(flag) + " is for --instance custom (" +
              std::string(preset->name) + " has " + std::to_string(preset->vcpus) +
              " vCPUs and " + std::to_string(preset->gpus) + " GPUs)");
        }
      }
    } else if (in.instance == "custom") {
      if (!in.vcpus_per_node || !in.gpus_per_node) {
        return Status::InvalidArgument(
            "--instance custom needs --vcpus-per-node and --gpus-per-node");
      }
    } else {
      return Status::InvalidArgument("--instance: unknown instance " +
                                     QuoteForMessage(in.instance) + " (allowed: " +
                                     AllowedInstances() + ")");
    }
    if (!in.cpu_seconds_per_sample) {
      return Status::InvalidArgument(
          "the CPU plan needs the CPU cost of a sample: --cpu-ms-per-sample, "
          "--cpu-seconds-per-sample or --from-report");
    }
    if (!in.gpu_step_ms) return Status::InvalidArgument("the CPU plan needs --gpu-step-ms");
    if (!in.batch_size) return Status::InvalidArgument("the CPU plan needs --batch-size");
  }
  if (io) {
    if (RawTb(in) < 0) {
      return Status::InvalidArgument(
          "the I/O plan needs the dataset size: --dataset-tb, or --samples with --sample-mb");
    }
    if (!in.expansion) return Status::InvalidArgument("the I/O plan needs --expansion");
    if (!in.read_gb_per_s) return Status::InvalidArgument("the I/O plan needs --read-gb-per-s");
    if (!in.write_gb_per_s) return Status::InvalidArgument("the I/O plan needs --write-gb-per-s");
  }
  return Status::Ok();
}

Result<Plan> ComputePlan(const PlanInputs& inputs) {
  HR_RETURN_IF_ERROR(Validate(inputs));
  Plan plan;
  if (CpuAskedFor(inputs)) plan.cpu = ComputeCpu(inputs);
  if (IoAskedFor(inputs)) plan.io = ComputeIo(inputs, plan.cpu ? &*plan.cpu : nullptr);
  // Each input is finite, but products of huge ones need not be.
  if ((plan.cpu && !(std::isfinite(plan.cpu->vcpus_per_gpu_no_wait) &&
                     std::isfinite(plan.cpu->samples_per_s_total))) ||
      (plan.io && !(std::isfinite(plan.io->materialize_io_hours) &&
                    std::isfinite(plan.io->stream_read_gb_per_s_needed)))) {
    return Status::InvalidArgument("the inputs are too large: a result is not a finite number");
  }
  return plan;
}

Result<MeasuredCost> CpuCostFromReport(std::string_view json_text) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json_text.data(), json_text.size()).get(doc) != simdjson::SUCCESS ||
      !doc.is_object()) {
    return Status::InvalidArgument("not a JSON object");
  }
  const auto number = [](simdjson::dom::element e, std::string_view key, double* out) {
    return e[key].get(*out) == simdjson::SUCCESS;  // integers convert
  };
  simdjson::dom::array stages;
  if (doc["stages"].get(stages) == simdjson::SUCCESS) {
    for (simdjson::dom::element s : stages) {
      std::string_view name;
      double items = 0, busy_s = 0, concurrency = 0;
      if (s["name"].get(name) != simdjson::SUCCESS || name != "cpu") continue;
      if (number(s, "items", &items) && number(s, "busy_s", &busy_s) &&
          number(s, "concurrency", &concurrency) && items > 0 && busy_s > 0 && concurrency > 0) {
        // busy_s is per unit of concurrency (exec/engine.h, StageMetrics).
        return MeasuredCost{busy_s * concurrency / items,
                            "run report: cpu stage " + Fixed(busy_s, 3) + " s busy x " +
                                Num(concurrency) + " threads / " + Num(items) + " samples"};
      }
    }
  }
  simdjson::dom::array ops;
  if (doc["ops"].get(ops) == simdjson::SUCCESS) {
    double total_ms = 0;
    int64_t n = 0;
    for (simdjson::dom::element op : ops) {
      double ms = 0;
      if (number(op, "ms_per_sample", &ms)) total_ms += ms, ++n;
    }
    double bench_total_ms = 0;
    if (number(doc, "total_ms_per_sample", &bench_total_ms) && bench_total_ms > 0) {
      return MeasuredCost{bench_total_ms / 1e3,
                          "bench ops: total_ms_per_sample " + Fixed(bench_total_ms, 3) +
                              " (one thread, operators only)"};
    }
    if (n > 0 && total_ms > 0) {
      return MeasuredCost{total_ms / 1e3, "run report: sum of " + std::to_string(n) +
                                              " ops' ms_per_sample " + Fixed(total_ms, 3)};
    }
  }
  return Status::InvalidArgument(
      "holds no CPU cost: expected a run report (`headrace run --report`) with a cpu stage "
      "that processed samples, or a `headrace bench ops --report` with total_ms_per_sample");
}

std::string PlanToText(const Plan& plan) {
  Table t;
  if (plan.cpu) {
    const CpuPlan& c = *plan.cpu;
    const bool custom = c.instance == "custom";
    t.Title("CPU for " + Num(c.gpus) + " GPUs on " + std::to_string(c.gpu_nodes) + " " +
            (custom ? std::string("custom") : c.instance) + " node" +
            (c.gpu_nodes == 1 ? "" : "s") + " (" + Num(c.vcpus_per_node) + " vCPUs, " +
            Num(c.gpus_per_node) + " GPUs each)");
    t.Row("GPU consumption per GPU", Fixed(c.samples_per_s_per_gpu, 1), "samples/s",
          "batch " + Num(c.batch_size_per_gpu) + " per GPU / " + Num(c.gpu_step_ms) +
              " ms step; " + Fixed(c.samples_per_s_total, 1) + " samples/s in all");
    t.Row("CPU cost per sample", Fixed(c.cpu_seconds_per_sample * 1e3, 3), "ms",
          (c.cpu_seconds_source.empty() ? "" : c.cpu_seconds_source + "; ") + "efficiency " +
              Num(c.cpu_efficiency));
    t.Row("vCPUs per GPU, no wait", Fixed(c.vcpus_per_gpu_no_wait, 2), "vCPUs");
    t.Row("vCPUs per GPU, wait-time ratio <= " + Num(c.target_wait_ratio),
          Fixed(c.vcpus_per_gpu_for_target, 2), "vCPUs",
          Fixed(c.vcpus_per_gpu_node_for_target, 1) + " per GPU node");
    t.Row("GPU node's own vCPUs per GPU", Fixed(c.own_vcpus_per_gpu, 2), "vCPUs",
          Num(c.instance_vcpus_per_gpu) + " less " + Num(c.reserved_vcpus_per_gpu) +
              " reserved for the trainer");
    t.Row("GPU utilization, own vCPUs only", Fixed(100 * c.gpu_utilization_own_vcpus, 1), "%",
          "wait-time ratio " + Fixed(c.wait_time_ratio_own_vcpus, 3));
    t.Row("CPU-only nodes per GPU node", Fixed(c.cpu_only_nodes_per_gpu_node, 2), "nodes",
          Num(c.cpu_node_vcpus) + " vCPUs each; " + Fixed(c.extra_vcpus_per_gpu_node, 1) +
              " vCPUs more per GPU node");
    t.Row("CPU-only nodes for the job", std::to_string(c.cpu_only_nodes_total), "nodes",
          "beside " + std::to_string(c.gpu_nodes) + " GPU node" + (c.gpu_nodes == 1 ? "" : "s"));
    if (c.cpu_hours_per_epoch >= 0) {
      t.Row("CPU time per epoch", Fixed(c.cpu_hours_per_epoch, 2), "vCPU-hours");
      t.Row("epoch at the GPUs' pace", Fixed(c.epoch_hours_at_gpu_pace, 2), "h");
    }
  }
  if (plan.io) {
    const IoPlan& o = *plan.io;
    t.Title("I/O of " + Num(o.raw_tb) + " TB raw, x" + Num(o.expansion) + " = " +
            Num(o.expanded_tb) + " TB expanded, " + Num(o.epochs) + " epoch" +
            (o.epochs == 1 ? "" : "s"));
    t.Row("read raw", Fixed(o.raw_read_hours, 2), "h", "at " + Fixed(o.read_gb_per_s, 2) + " GB/s");
    t.Row("write expanded", Fixed(o.expanded_write_hours, 2), "h",
          "at " + Fixed(o.write_gb_per_s, 2) + " GB/s");
    t.Row("read expanded, per epoch", Fixed(o.expanded_read_hours_per_epoch, 2), "h",
          "at " + Fixed(o.gpu_read_gb_per_s, 2) + " GB/s (GPU fleet)");
    t.Row("materialize: all I/O", Fixed(o.materialize_io_hours, 2), "h",
          "read raw + write + " + Num(o.epochs) + " x read expanded");
    t.Row("stream: read raw each epoch", Fixed(o.streaming_io_hours, 2), "h",
          "overlapped with training");
    if (o.stream_read_gb_per_s_needed >= 0) {
      t.Row("stream: read needed at GPU pace", Fixed(o.stream_read_gb_per_s_needed, 2), "GB/s",
            o.stream_read_gb_per_s_needed > o.read_gb_per_s
                ? "more than --read-gb-per-s: storage limits the GPUs"
                : "within --read-gb-per-s");
    }
  }
  return t.Render();
}

std::string PlanToJson(const Plan& plan) {
  JsonWriter w;
  w.BeginObject();
  w.Key("cpu");
  if (plan.cpu) {
    const CpuPlan& c = *plan.cpu;
    w.BeginObject();
    w.Key("instance").String(c.instance);
    w.Key("vcpus_per_node").Double(c.vcpus_per_node);
    w.Key("gpus_per_node").Double(c.gpus_per_node);
    w.Key("gpus").Double(c.gpus);
    w.Key("gpu_nodes").Int(c.gpu_nodes);
    w.Key("batch_size_per_gpu").Double(c.batch_size_per_gpu);
    w.Key("gpu_step_ms").Double(c.gpu_step_ms);
    w.Key("cpu_seconds_per_sample").Double(c.cpu_seconds_per_sample);
    w.Key("cpu_seconds_per_sample_source").String(c.cpu_seconds_source);
    w.Key("cpu_efficiency").Double(c.cpu_efficiency);
    w.Key("reserved_vcpus_per_gpu").Double(c.reserved_vcpus_per_gpu);
    w.Key("cpu_node_vcpus").Double(c.cpu_node_vcpus);
    w.Key("target_wait_ratio").Double(c.target_wait_ratio);
    w.Key("samples_per_s_per_gpu").Double(c.samples_per_s_per_gpu);
    w.Key("samples_per_s_total").Double(c.samples_per_s_total);
    w.Key("vcpus_per_gpu_no_wait").Double(c.vcpus_per_gpu_no_wait);
    w.Key("vcpus_per_gpu_for_target").Double(c.vcpus_per_gpu_for_target);
    w.Key("vcpus_per_gpu_node_for_target").Double(c.vcpus_per_gpu_node_for_target);
    w.Key("instance_vcpus_per_gpu").Double(c.instance_vcpus_per_gpu);
    w.Key("own_vcpus_per_gpu").Double(c.own_vcpus_per_gpu);
    w.Key("gpu_utilization_own_vcpus").Double(c.gpu_utilization_own_vcpus);
    w.Key("wait_time_ratio_own_vcpus").Double(c.wait_time_ratio_own_vcpus);
    w.Key("extra_vcpus_per_gpu_node").Double(c.extra_vcpus_per_gpu_node);
    w.Key("cpu_only_nodes_per_gpu_node").Double(c.cpu_only_nodes_per_gpu_node);
    w.Key("cpu_only_nodes_total").Int(c.cpu_only_nodes_total);
    w.Key("cpu_vcpu_hours_per_epoch");
    c.cpu_hours_per_epoch >= 0 ? w.Double(c.cpu_hours_per_epoch) : w.Null();
    w.Key("epoch_hours_at_gpu_pace");
    c.epoch_hours_at_gpu_pace >= 0 ? w.Double(c.epoch_hours_at_gpu_pace) : w.Null();
    w.EndObject();
  } else {
    w.Null();
  }
  w.Key("io");
  if (plan.io) {
    const IoPlan& o = *plan.io;
    w.BeginObject();
    w.Key("raw_tb").Double(o.raw_tb);
    w.Key("expansion").Double(o.expansion);
    w.Key("expanded_tb").Double(o.expanded_tb);
    w.Key("epochs").Double(o.epochs);
    w.Key("read_gb_per_s").Double(o.read_gb_per_s);
    w.Key("write_gb_per_s").Double(o.write_gb_per_s);
    w.Key("gpu_read_gb_per_s").Double(o.gpu_read_gb_per_s);
    w.Key("raw_read_hours").Double(o.raw_read_hours);
    w.Key("expanded_write_hours").Double(o.expanded_write_hours);
    w.Key("expanded_read_hours_per_epoch").Double(o.expanded_read_hours_per_epoch);
    w.Key("materialize_io_hours").Double(o.materialize_io_hours);
    w.Key("streaming_io_hours").Double(o.streaming_io_hours);
    w.Key("stream_read_gb_per_s_needed");
    o.stream_read_gb_per_s_needed >= 0 ? w.Double(o.stream_read_gb_per_s_needed) : w.Null();
    w.EndObject();
  } else {
    w.Null();
  }
  w.EndObject();
  return w.str() + "\n";
}

}  // namespace headrace::capacity
