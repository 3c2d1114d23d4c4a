// headrace doctor: runs a pipeline against the simulated trainer for a bounded time (or
// reads a saved run report) and says which stage limits the trainer, of what kind, with
// the evidence and what to change (headrace/observe/doctor.h).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "commands.h"
#include "headrace/core/clock.h"
#include "headrace/pipeline/config.h"
#include "headrace/observe/doctor.h"
#include "headrace/observe/report.h"
#include "interrupt.h"

namespace headrace::tools {
namespace {

constexpr const char* kDoctorUsage =
    "usage: headrace doctor CONFIG [--seconds S (20)] [--set key=value ...] [--json]\n"
    "                       [--report PATH] [--storage-mb-s X]\n"
    "       headrace doctor --from-report PATH [--json] [--storage-mb-s X]\n";

// A positive finite number, or false after naming the flag.
bool ParsePositive(const std::string& flag, const std::string& text, double* out) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    std::fprintf(stderr, "headrace doctor: %s needs a positive number, got '%s'\n", flag.c_str(),
                 text.c_str());
    return false;
  }
  *out = v;
  return true;
}

// Runs the pipeline against the simulated trainer until the run ends, `seconds` pass or
// a signal comes, then reports. The exit code through `code` when it could not.
std::optional<RunReport> RunFor(const PipelineSpec& spec, double seconds, int* code) {
  InterruptWatcher interrupt;
  auto run = DoctorRun::Start(spec, CurrentRssBytes());
  if (!run.ok()) {
    std::fprintf(stderr, "headrace doctor: %s\n", run.status().ToString().c_str());
    const StatusCode c = run.status().code();
    *code = c == StatusCode::kInvalidArgument || c == StatusCode::kNotFound ? 2 : 1;
    return std::nullopt;
  }
  interrupt.SetStop([r = run->get()] { r->Cancel(); });
  const Result<bool> ran = (*run)->RunUntil(DoctorDeadline(seconds));
  interrupt.SetStop(nullptr);
  if (interrupt.signal() != 0) {
    *code = 128 + interrupt.signal();
    return std::nullopt;
  }
  if (!ran.ok()) {
    std::fprintf(stderr, "headrace doctor: the run failed: %s\n", ran.status().ToString().c_str());
    *code = 1;
    return std::nullopt;
  }
  return (*run)->Report();
}

}  // namespace

int DoctorCommand(const Args& args) {
  std::string config_path, report_path, from_report;
  std::vector<std::string> overrides;
  double seconds = 20;
  DoctorOptions options;
  bool json = false;
  ArgReader r{args};
  std::string value;
  while (!r.done()) {
    const std::string flag = r.peek();
    if (flag == "--help" || flag == "-h") {
      std::fputs(kDoctorUsage, stdout);
      return 0;
    }
    if (flag == "--seconds" || flag == "--storage-mb-s") {
      if (!r.Value(flag, &value)) return 2;
      if (!ParsePositive(flag, value, flag == "--seconds" ? &seconds : &options.storage_mb_s)) {
        return 2;
      }
    } else if (flag == "--set") {
      if (!r.Value(flag, &value)) return 2;
      overrides.push_back(value);
    } else if (flag == "--report") {
      if (!r.Value(flag, &report_path)) return 2;
    } else if (flag == "--from-report") {
      if (!r.Value(flag, &from_report)) return 2;
    } else if (flag == "--json") {
      json = true, ++r.i;
    } else if (!flag.empty() && flag[0] == '-') {
      std::fprintf(stderr,
                   "headrace doctor: unknown flag '%s' (allowed: --seconds, --set, --json, "
                   "--report, --from-report, --storage-mb-s)\n",
                   flag.c_str());
      return 2;
    } else if (config_path.empty()) {
      config_path = flag, ++r.i;
    } else {
      std::fprintf(stderr, "headrace doctor: unexpected argument '%s'\n", flag.c_str());
      return 2;
    }
  }
  if (config_path.empty() == from_report.empty()) {
    std::fprintf(stderr, "headrace doctor: give CONFIG or --from-report PATH, not %s\n%s",
                 config_path.empty() ? "neither" : "both", kDoctorUsage);
    return 2;
  }
  if (!from_report.empty() && (!report_path.empty() || !overrides.empty())) {
    std::fprintf(stderr,
                 "headrace doctor: --from-report runs nothing: --report and --set "
                 "apply to a CONFIG\n");
    return 2;
  }

  std::optional<RunReport> report;
  if (!from_report.empty()) {
    std::string text;
    if (!ReadSmallFile("headrace doctor", "--from-report", from_report, &text)) return 2;
    auto parsed = RunReportFromJson(text);
    if (!parsed.ok()) {
      std::fprintf(stderr, "headrace doctor: --from-report %s: %s\n", from_report.c_str(),
                   parsed.status().message().c_str());
      return 2;
    }
    report = *std::move(parsed);
  } else {
    if (!report_path.empty() && !CheckWritable("headrace doctor", "--report", report_path)) {
      return 2;
    }
    auto spec = LoadPipelineConfig(config_path, overrides);
    if (!spec.ok()) {
      std::fprintf(stderr, "headrace doctor: %s: %s\n", config_path.c_str(),
                   spec.status().ToString().c_str());
      return 2;
    }
    int code = 0;
    report = RunFor(*spec, seconds, &code);
    if (!report) return code;
    if (!report_path.empty() && !WriteTextFile(report_path, RunReportToJson(*report))) return 1;
  }
  const Diagnosis diagnosis = DiagnoseRun(*report, options);
  std::fputs((json ? DiagnosisToJson(diagnosis) : DiagnosisToText(diagnosis)).c_str(), stdout);
  return 0;
}

}  // namespace headrace::tools
