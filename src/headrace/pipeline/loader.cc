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
    : prepared_(std::move(prepared)),
      engine_(std::move(engine)),
      trace_(trace),
      created_(created),
      clock_(0.0) {}

Loader::~Loader() = default;

bool Loader::WaitReady(std::chrono::nanoseconds timeout) {
  if (!wait_started_) wait_started_ = Clock::now();
  return (packing_.has_value() && packing_->size() > 0) || engine_->WaitReady(timeout);
}

Result<std::optional<Batch>> Loader::Next() {
  const auto call = wait_started_.value_or(Clock::now());
  wait_started_.reset();
  auto batch = packing_.has_value() ? NextPacked() : engine_->Next();
  const auto now = Clock::now();
  const bool got = batch.ok() && batch->has_value();
  // A metrics endpoint or progress line reads the clock from its own thread.
  std::lock_guard lock(stats_mu_);
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

Result<std::optional<Batch>> Loader::NextPacked() {
  const int64_t per_epoch = engine_->order().batches_per_rank_epoch();
  while (true) {
    if (std::optional<Batch> out = packing_->Pop(); out.has_value()) {
      {
        std::lock_guard lock(stats_mu_);
        pack_state_ = packing_->state();
      }
      if (out->size() == 0 && !deliver_empty_) {
        // Every sample failed (or was left out): its errors go with the next batch.
        for (SampleError& e : out->errors) held_errors_.push_back(std::move(e));
        continue;
      }
      WithHeldErrors(*out);
      return out;
    }
    HR_ASSIGN_OR_RETURN(std::optional<Batch> in, engine_->Next());
    if (!in.has_value()) return std::optional<Batch>();
    // The rank-local batch in the epoch (index_in_epoch counts all ranks' batches).
    const int64_t position = in->global_index - in->epoch * per_epoch;
    if (planner_ != nullptr) {
      // Planned: the engine's batch holds the packed batch's samples, in row order.
      std::optional<PlannedPack> plan = planner_->Take(in->global_index);
      if (!plan.has_value()) {
        return Status::Internal("packing: no plan for batch " + std::to_string(in->global_index));
      }
      HR_RETURN_IF_ERROR(packing_->PushPlanned(*in, position, plan->rows,
                                               std::move(plan->skipped),
                                               std::move(plan->failed), plan->before,
                                               plan->after));
    } else {
      HR_RETURN_IF_ERROR(packing_->Push(*in, position, position + 1 == per_epoch).status());
      // The window is in the batch budget: the engine admits fewer batches while it holds
      // more, so that the samples' rows in flight stay within the budget (on its own, a
      // few % of the VLM bench's packed samples/s; the narrowing window did the rest:
      // packer.h).
      const int64_t window = packing_->stats().window_bytes;
      engine_->ChargeHeld(window - window_charged_);
      window_charged_ = window;
    }
    {
      std::lock_guard lock(stats_mu_);
      pack_stats_ = packing_->stats();
      pack_state_ = packing_->state();
    }
    // The samples the packer left out or cut are data lost: counted as failed samples,
    // against errors.max_error_rate, in batch order, before their packed batch leaves.
    const std::vector<LostSample> lost = packing_->TakeLost();
    HR_RETURN_IF_ERROR(engine_->CountLost(lost, position + 1 == per_epoch));
  }
}

void Loader::WithHeldErrors(Batch& batch) {
  if (held_errors_.empty()) return;
  batch.errors.insert(batch.errors.begin(), std::make_move_iterator(held_errors_.begin()),
                      std::make_move_iterator(held_errors_.end()));
  held_errors_.clear();
}

std::optional<PackStats> Loader::pack_stats() const {
  std::lock_guard lock(stats_mu_);
  return pack_stats_;
}

std::optional<PackState> Loader::pack_state() const {
  std::lock_guard lock(stats_mu_);
  return pack_state_;
}

ConsumerStats Loader::consumer_stats() const {
  std::lock_guard lock(stats_mu_);
  return clock_.stats();
}

}  // namespace headrace
