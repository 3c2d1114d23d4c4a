#include "headrace/pipeline/loader.h"

#include <algorithm>

namespace headrace {

int ResolveIoInflight(const ExecutionSpec& execution, int cpu_threads) {
  if (execution.io_inflight > 0) return execution.io_inflight;
  // In 64 bits: cpu_threads is validated, but this is public and must not overflow.
  const int64_t automatic = int64_t{kAutoIoInflightPerThread} * std::max(cpu_threads, 1);
  return static_cast<int>(std::clamp<int64_t>(automatic, kMinAutoIoInflight, kMaxAutoIoInflight));
}

Result<std::unique_ptr<Loader>> Loader::Make(const PipelineSpec& spec,
                                             const LoaderOptions& options) {
  const auto started = Clock::now();  // the cold start counts the preparation too
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const PreparedPipeline> prepared,
                      PreparedPipeline::Make(spec, options.storage));
  return prepared->Run(options, started);
}

Loader::Loader(std::shared_ptr<const PreparedPipeline> prepared, std::unique_ptr<Engine> engine,
               std::shared_ptr<BatchFormer> former, TraceRecorder* trace,
               Clock::time_point created)
    : prepared_(std::move(prepared)),
      engine_(std::move(engine)),
      former_(std::move(former)),
      trace_(trace),
      created_(created),
      clock_(0.0) {}

Loader::~Loader() = default;

bool Loader::WaitReady(std::chrono::nanoseconds timeout) {
  if (!wait_started_) wait_started_ = Clock::now();
  return former_->ready() || engine_->WaitReady(timeout);
}

Result<std::optional<Batch>> Loader::Next() {
  const auto call = wait_started_.value_or(Clock::now());
  wait_started_.reset();
  auto batch = former_->Next(*engine_);
  const auto now = Clock::now();
  const bool got = batch.ok() && batch->has_value();
  // A metrics endpoint or progress line reads the clock from its own thread.
  MutexLock lock(stats_mu_);
  if (trace_ != nullptr) {
    if (!clock_.started() && clock_.stats().batches == 0) trace_->NameThread("consumer");
    if (clock_.started()) trace_->Span("step", "consumer", last_return_at_, call);
    trace_->Span("wait", "consumer", call, now);
  }
  // Seconds since the loader was made: the clock's axis.
  const auto since = [this](Clock::time_point t) {
    return std::chrono::duration<double>(t - created_).count();
  };
  clock_.Returned(since(call), since(now), got, got ? (*batch)->size() : 0);
  last_return_at_ = now;
  return batch;
}

ConsumerStats Loader::consumer_stats() const {
  MutexLock lock(stats_mu_);
  return clock_.stats();
}

}  // namespace headrace
