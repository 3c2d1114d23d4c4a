// headrace plan: capacity planning (CPU vCPUs and CPU-only nodes per GPU node, GPU
// utilization on the GPU nodes' own CPUs, I/O hours of materializing versus streaming)
// from flags and/or a YAML file. The arithmetic is in headrace/capacity/capacity.h.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "commands.h"
#include "headrace/capacity/capacity.h"

namespace headrace::tools {
namespace {

using capacity::PlanInputs;

void PrintUsage(FILE* out) {
  std::string usage =
      "usage: headrace plan [PLAN.yaml] [--preset sources-example] [--from-report PATH]\n"
      "                     [--instance p4d.24xlarge|p5.48xlarge|custom] [--json]\n"
      "                     [--NAME VALUE ...]\n"
      "\n"
      "inputs (flags; in PLAN.yaml the same names with '_' for '-'; flags win):\n"
      "  --instance NAME              GPU node type (allowed: " +
      capacity::AllowedInstances() +
      ")\n"
      "  --from-report PATH           CPU cost per sample from `headrace run --report` or\n"
      "                               `headrace bench ops --report` JSON\n"
      "  --preset sources-example     fill the I/O inputs not given from the sources' example\n"
      "                               (500 TB raw, x2, 1.5 h / 3 h / 12 h: 16.5 h)\n";
  for (const capacity::InputField& f : capacity::InputFields()) {
    std::string flag = "  --" + std::string(f.flag) + " X";
    flag.resize(std::max<size_t>(flag.size() + 1, 31), ' ');
    usage += flag + std::string(f.doc) + "\n";
  }
  usage += "  --json                       the plan as JSON instead of a table\n";
  std::fputs(usage.c_str(), out);
}

bool ApplyReport(const std::string& path, PlanInputs* inputs) {
  std::string text;
  if (!ReadSmallFile("headrace plan", "--from-report", path, &text)) return false;
  auto cost = capacity::CpuCostFromReport(text);
  if (!cost.ok()) {
    std::fprintf(stderr, "headrace plan: --from-report %s: %s\n", path.c_str(),
                 cost.status().message().c_str());
    return false;
  }
  inputs->cpu_seconds_per_sample = cost->cpu_seconds_per_sample;
  inputs->cpu_seconds_source = path + " (" + cost->source + ")";
  return true;
}

bool IsKnownKey(const std::string& key) {
  return key == "preset" || key == "from-report" || key == "instance" ||
         std::any_of(capacity::InputFields().begin(), capacity::InputFields().end(),
                     [&](const auto& f) { return f.flag == key; });
}

std::string KnownKeys() {
  std::string out = "preset, from-report, instance";
  for (const capacity::InputField& f : capacity::InputFields()) out += ", " + std::string(f.flag);
  return out;
}

bool IsCostKey(const std::string& key) {
  return key == "cpu-ms-per-sample" || key == "cpu-seconds-per-sample" || key == "from-report";
}

// What a file or the command line gave, before it is applied.
struct Given {
  std::vector<std::pair<std::string, std::string>> values;  // key (dashes), text
  std::string preset, report;
  int cost_sources = 0;
};

// Applies one layer (the file, then the flags) onto `inputs`.
bool Apply(const Given& given, const std::string& where, PlanInputs* inputs, std::string* preset) {
  if (given.cost_sources > 1) {
    std::fprintf(stderr,
                 "headrace plan: %sgive one of --cpu-ms-per-sample, --cpu-seconds-per-sample, "
                 "--from-report\n",
                 where.c_str());
    return false;
  }
  if (!given.report.empty() && !ApplyReport(given.report, inputs)) return false;
  for (const auto& [key, text] : given.values) {
    const Status status = capacity::SetInput(inputs, key, text);
    if (!status.ok()) {
      std::fprintf(stderr, "headrace plan: %s%s\n", where.c_str(), status.message().c_str());
      return false;
    }
  }
  if (!given.preset.empty()) *preset = given.preset;
  return true;
}

void Note(Given* given, const std::string& key, const std::string& text) {
  if (key == "preset") {
    given->preset = text;
  } else if (key == "from-report") {
    given->report = text;
  } else {
    given->values.emplace_back(key, text);
  }
  if (IsCostKey(key)) ++given->cost_sources;
}

bool ReadPlanFile(const std::string& path, Given* given) {
  std::string text;
  if (!ReadSmallFile("headrace plan", "plan file", path, &text)) return false;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    std::fprintf(stderr, "headrace plan: %s: %s\n", path.c_str(), e.what());
    return false;
  }
  if (!root.IsMap()) {
    std::fprintf(stderr, "headrace plan: %s: expected a map of inputs (dataset_tb: 500, ...)\n",
                 path.c_str());
    return false;
  }
  for (const auto& item : root) {
    if (!item.first.IsScalar() || !item.second.IsScalar()) {
      std::fprintf(stderr, "headrace plan: %s: line %d: expected 'name: value'\n", path.c_str(),
                   item.first.Mark().line + 1);
      return false;
    }
    std::string key = item.first.Scalar();
    std::replace(key.begin(), key.end(), '_', '-');
    if (!IsKnownKey(key)) {
      std::fprintf(stderr, "headrace plan: %s: unknown input '%s' (allowed, with '_' or '-': %s)\n",
                   path.c_str(), item.first.Scalar().c_str(), KnownKeys().c_str());
      return false;
    }
    Note(given, key, item.second.Scalar());
  }
  return true;
}

}  // namespace

int PlanCommand(const Args& args) {
  std::string plan_file;
  Given flags;
  bool json = false;
  ArgReader r{args};
  std::string value;
  while (!r.done()) {
    const std::string flag = r.peek();
    if (flag == "--help" || flag == "-h") {
      PrintUsage(stdout);
      return 0;
    }
    if (flag == "--json") {
      json = true, ++r.i;
    } else if (flag.starts_with("--")) {
      const std::string key = flag.substr(2);
      if (!IsKnownKey(key)) {
        std::fprintf(stderr, "headrace plan: unknown flag '%s' (see `headrace plan --help`)\n",
                     flag.c_str());
        return 2;
      }
      if (!r.Value(flag, &value)) return 2;
      Note(&flags, key, value);
    } else if (plan_file.empty()) {
      plan_file = flag, ++r.i;
    } else {
      std::fprintf(stderr, "headrace plan: unexpected argument '%s'\n", flag.c_str());
      return 2;
    }
  }

  PlanInputs inputs;
  std::string preset;
  if (!plan_file.empty()) {
    Given file;
    if (!ReadPlanFile(plan_file, &file)) return 2;
    // A cost on the command line replaces the file's, whichever form each has.
    if (flags.cost_sources > 0) {
      std::erase_if(file.values, [](const auto& kv) { return IsCostKey(kv.first); });
      file.report.clear();
      file.cost_sources = 0;
    }
    if (!Apply(file, plan_file + ": ", &inputs, &preset)) return 2;
  }
  if (!Apply(flags, "", &inputs, &preset)) return 2;
  if (!preset.empty()) {
    if (preset != capacity::kSourcesExamplePreset) {
      std::fprintf(stderr, "headrace plan: --preset: unknown preset '%s' (allowed: %s)\n",
                   preset.c_str(), std::string(capacity::kSourcesExamplePreset).c_str());
      return 2;
    }
    capacity::ApplySourcesExample(&inputs);
  }
  auto plan = capacity::ComputePlan(inputs);
  if (!plan.ok()) {
    std::fprintf(stderr, "headrace plan: %s\n", plan.status().message().c_str());
    return 2;
  }
  const std::string out = json ? capacity::PlanToJson(*plan) : capacity::PlanToText(*plan);
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace headrace::tools
