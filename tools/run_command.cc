// headrace run: a pipeline against a simulated trainer, with a report.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "commands.h"
#include "interrupt.h"
#include "headrace/core/clock.h"
#include "headrace/observe/metrics_server.h"
#include "headrace/observe/progress.h"
#include "headrace/observe/prometheus.h"
#include "headrace/observe/run_monitor.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/loader.h"
#include "headrace/observe/report.h"

namespace headrace::tools {
namespace {

// Off a terminal, a progress line this often by default: a long job's log shows it is
// alive without the line drowning it (one line per 30 s is 2,880 a day).
constexpr double kDefaultProgressPeriodS = 30;

}  // namespace

int RunCommand(const Args& args) {
  std::string config_path, report_path, trace_path, metrics_address;
  // Off a terminal, a progress line every this many seconds (0: none).
  double progress_period_s = kDefaultProgressPeriodS;
  std::vector<std::string> overrides;
  int64_t start_batch = 0;
  int64_t max_batches = -1;
  bool digests = false, print_config = false, quiet = false;
  ArgReader r{args};
  std::string value;
  while (!r.done()) {
    const std::string flag = r.peek();
    if (flag == "--report") {
      if (!r.Value(flag, &report_path)) return 2;
    } else if (flag == "--trace") {
      if (!r.Value(flag, &trace_path)) return 2;
    } else if (flag == "--set") {
      if (!r.Value(flag, &value)) return 2;
      overrides.push_back(value);
    } else if (flag == "--start-batch" || flag == "--max-batches") {
      if (!r.Value(flag, &value)) return 2;
      char* end = nullptr;
      const long long n = std::strtoll(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || n < 0) {
        std::fprintf(stderr, "headrace run: %s needs a non-negative integer, got '%s'\n",
                     flag.c_str(), value.c_str());
        return 2;
      }
      (flag == "--start-batch" ? start_batch : max_batches) = n;
    } else if (flag == "--digests") {
      digests = true, ++r.i;
    } else if (flag == "--print-config") {
      print_config = true, ++r.i;
    } else if (flag == "--quiet") {
      quiet = true, ++r.i;
    } else if (flag == "--metrics-port") {
      if (!r.Value(flag, &metrics_address)) return 2;
    } else if (flag == "--progress") {
      if (!r.Value(flag, &value)) return 2;
      char* end = nullptr;
      progress_period_s = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(progress_period_s >= 0) ||
          progress_period_s > 86400) {
        std::fprintf(stderr,
                     "headrace run: --progress needs seconds between lines, 0..86400 (0: no "
                     "progress), got '%s'\n",
                     value.c_str());
        return 2;
      }
    } else if (!flag.empty() && flag[0] == '-') {
      std::fprintf(stderr,
                   "headrace run: unknown flag '%s' (allowed: --report, --trace, "
                   "--set, --start-batch, --max-batches, --digests, --print-config, --quiet, "
                   "--metrics-port, --progress)\n",
                   flag.c_str());
      return 2;
    } else if (config_path.empty()) {
      config_path = flag, ++r.i;
    } else {
      std::fprintf(stderr, "headrace run: unexpected argument '%s'\n", flag.c_str());
      return 2;
    }
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "usage: headrace run CONFIG [--report PATH] [--set key=value ...]\n");
    return 2;
  }
  // Found now, not after a run whose report would then be lost.
  if (!report_path.empty() && !CheckWritable("headrace run", "--report", report_path)) return 2;
  if (!trace_path.empty() && !CheckWritable("headrace run", "--trace", trace_path)) return 2;
  std::string metrics_host;
  int metrics_port = -1;
  if (!metrics_address.empty()) {
    Status parsed =
        ParseListenAddress(metrics_address, kDefaultMetricsHost, &metrics_host, &metrics_port);
    if (!parsed.ok()) {
      std::fprintf(stderr, "headrace run: --metrics-port %s\n", parsed.message().c_str());
      return 2;
    }
  }
  auto spec = LoadPipelineConfig(config_path, overrides);
  if (!spec.ok()) {
    std::fprintf(stderr, "headrace run: %s: %s\n", config_path.c_str(),
                 spec.status().ToString().c_str());
    return 2;
  }
  if (print_config) std::fputs(PipelineSpecToYaml(*spec).c_str(), stdout);
  if (!spec->epochs && max_batches < 0) {
    std::fprintf(stderr,
                 "headrace run: %s: epochs: null (unbounded) needs a consumer that stops; give "
                 "epochs a number (>= 1) or --max-batches N\n",
                 config_path.c_str());
    return 2;
  }

  // From here on SIGINT and SIGTERM stop the run cleanly: a partial report, 128 + signal.
  InterruptWatcher interrupt;
  const int64_t baseline_rss = CurrentRssBytes();
  std::unique_ptr<TraceRecorder> trace;
  if (!trace_path.empty()) trace = std::make_unique<TraceRecorder>();
  LoaderOptions options;
  options.start_batch = start_batch;
  options.trace = trace.get();
  auto loader = Loader::Make(*spec, options);
  if (!loader.ok()) {
    std::fprintf(stderr, "headrace run: %s\n", loader.status().ToString().c_str());
    // A bad value or a path to nothing is a configuration error (2); I/O trouble is not.
    const StatusCode code = loader.status().code();
    return code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound ? 2 : 1;
  }
  if (interrupt.signal() != 0) return 128 + interrupt.signal();  // before any batch
  std::unique_ptr<MetricsServer> metrics;
  if (metrics_port >= 0) {
    // Bound before the first batch is asked for: a port in use fails the run now.
    const Loader* l = loader->get();
    const MetricLabels labels = {{"job", "headrace_run"}};
    auto server = MetricsServer::Start(metrics_host, metrics_port, [l, baseline_rss, labels] {
      return PrometheusText(BuildRunReport(*l, baseline_rss), labels);
    });
    if (!server.ok()) {
      std::fprintf(stderr, "headrace run: --metrics-port: %s\n",
                   server.status().message().c_str());
      return 2;
    }
    metrics = std::move(*server);
    std::fprintf(stderr, "headrace: metrics at %s\n", metrics->url().c_str());
  }
  // The run's timeline (for the report and `headrace report --plot`) and its progress:
  // a live line on a terminal, a plain line each --progress seconds elsewhere.
  const bool live = isatty(STDERR_FILENO) != 0;
  std::optional<ProgressPrinter> progress;
  if (!quiet && (live || progress_period_s > 0)) {
    progress.emplace(stderr, live, progress_period_s, max_batches);
  }
  RunMonitorOptions monitor_options;
  if (progress) {
    monitor_options.on_sample = [&progress](const RunReport& now, const TimelinePoint& point) {
      progress->Update(now, point);
    };
  }
  RunMonitor monitor(**loader, baseline_rss, std::move(monitor_options));
  interrupt.SetStop([l = loader->get()] { l->Cancel(); });
  const auto step = std::chrono::duration<double, std::milli>(spec->trainer.step_ms);
  std::vector<std::string> batch_digests;
  int logged = 0;
  Status failure;
  for (int64_t n = 0; max_batches < 0 || n < max_batches; ++n) {
    auto batch = (*loader)->Next();
    if (!batch.ok()) {
      failure = batch.status();
      break;
    }
    if (!batch->has_value()) break;
    for (const SampleError& e : (*batch)->errors) {
      if (logged++ < spec->errors.max_logged) {
        // A sample cut by the packer was delivered, its tail lost; every other was skipped.
        std::fprintf(stderr, "headrace: %s sample: %s\n",
                     e.status.code() == StatusCode::kPackTruncated ? "truncated" : "skipped",
                     e.ToString().c_str());
      }
    }
    if (digests) batch_digests.push_back(BatchDigest(**batch));
    // The simulated trainer: a step of trainer.step_ms on this batch (cut short by a
    // signal, after which the next Next() reports the cancellation).
    if (step.count() > 0) interrupt.WaitFor(std::chrono::duration_cast<Clock::duration>(step));
  }
  // A signal cancels the run; it is not the run's failure.
  const int signal = interrupt.signal();
  if (signal != 0 && failure.code() == StatusCode::kCancelled) failure = Status::Ok();
  monitor.Stop();
  if (progress) progress->Finish();
  RunReport report = BuildRunReport(**loader, baseline_rss);
  report.timeline = monitor.timeline();
  report.batch_digests = std::move(batch_digests);
  if (signal != 0) report.interrupted_by = SignalName(signal);
  if (!failure.ok()) report.failure = failure.ToString();  // no advice in the report then
  if (!quiet) std::fputs(RunReportToText(report).c_str(), stdout);
  // The report is out before the verdict on stderr, so that the failure (or the stop) is a
  // line of its own after it, also where both streams go to one file.
  std::fflush(stdout);
  if (!report_path.empty() && !WriteTextFile(report_path, RunReportToJson(report))) return 1;
  interrupt.SetStop(nullptr);
  metrics.reset();  // it reads the loader
  loader->reset();  // joins the engine's threads: the trace is complete
  if (trace && !WriteTextFile(trace_path, trace->ToJson())) return 1;
  if (!failure.ok()) {
    std::fprintf(stderr, "headrace run: failed: %s\n", failure.ToString().c_str());
    return 1;
  }
  if (signal != 0) {
    std::fprintf(stderr, "headrace run: stopped by %s after %lld batches; the report is partial\n",
                 SignalName(signal), static_cast<long long>(report.batches));
    return 128 + signal;
  }
  return 0;
}

}  // namespace headrace::tools
