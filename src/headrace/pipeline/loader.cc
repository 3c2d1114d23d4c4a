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
               TraceRecorder* trace, Clock::time_point created)
    : prepared_(std::move(prepared)), engine_(std::move(engine)), trace_(trace), created_(created) {}

Loader::~Loader() = default;

bool Loader::WaitReady(std::chrono::nanoseconds timeout) {
  if (!wait_started_) wait_started_ = Clock::now();
  return engine_->WaitReady(timeout);
}

Result<std::optional<Batch>> Loader::Next() {
  const auto call = wait_started_.value_or(Clock::now());
  wait_started_.reset();
  if (returned_any_) {
    std::lock_guard lock(stats_mu_);
    stats_.busy_s += std::chrono::duration<double>(call - last_return_at_).count();
  }
  auto batch = engine_->Next();
  const auto now = Clock::now();
  if (trace_ != nullptr) {
    if (!returned_any_ && stats_.batches == 0) trace_->NameThread("consumer");
    if (returned_any_) trace_->Span("step", "consumer", last_return_at_, call);
    trace_->Span("wait", "consumer", call, now);
  }
  const double waited = std::chrono::duration<double>(now - call).count();
  // A metrics endpoint or progress line reads stats_ from its own thread.
  std::lock_guard lock(stats_mu_);
  if (!returned_any_) {
    if (batch.ok() && batch->has_value()) {
      returned_any_ = true;
      first_batch_at_ = now;
      stats_.time_to_first_batch_s = std::chrono::duration<double>(now - created_).count();
    }
  } else {
    stats_.wait_s += waited;
    stats_.steady_s = std::chrono::duration<double>(now - first_batch_at_).count();
  }
  last_return_at_ = now;
  stats_.elapsed_s = std::chrono::duration<double>(now - created_).count();
  if (batch.ok() && batch->has_value() && (*batch)->size() > 0) {
    ++stats_.batches;
    stats_.samples += (*batch)->size();
  }
  return batch;
}

ConsumerStats Loader::consumer_stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

}  // namespace headrace
