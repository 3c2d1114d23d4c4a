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
  return !queue_.empty() || engine_->WaitReady(timeout);
}

Result<std::optional<Batch>> Loader::Next() {
  const auto call = wait_started_.value_or(Clock::now());
  wait_started_.reset();
  auto batch = packer_.has_value() ? NextPacked() : engine_->Next();
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
  const bool budget = prepared_->pack()->budget;
  while (true) {
    if (!queue_.empty()) {  // batch.max_tokens: the last input batch's next token batch
      Batch out = std::move(queue_.front());
      queue_.pop_front();
      ++queue_taken_;
      {
        std::lock_guard lock(stats_mu_);
        if (queue_.empty()) {
          pack_state_ = packer_->state();
        } else {
          pack_state_ = queue_before_;
          pack_state_->delivered = queue_taken_;
        }
      }
      if (out.global_index < deliver_from_) continue;
      if (out.size() == 0 && !deliver_empty_) continue;
      return std::optional<Batch>(std::move(out));
    }
    HR_ASSIGN_OR_RETURN(std::optional<Batch> in, engine_->Next());
    if (!in.has_value()) return std::optional<Batch>();
    // The rank-local batch in the epoch (index_in_epoch counts all ranks' batches).
    const int64_t position = in->global_index - in->epoch * per_epoch;
    const bool last = position + 1 == per_epoch;
    const bool replay = packer_->replaying(position);
    if (budget) {
      PackState before = packer_->state();
      before.epoch = in->epoch;
      before.next_batch = position;
      if (before.waiting.empty()) before.from_batch = position;
      HR_ASSIGN_OR_RETURN(std::vector<Batch> outs, packer_->PushBudget(*in, position, last));
      {
        std::lock_guard lock(stats_mu_);
        pack_stats_ = packer_->stats();
      }
      if (replay) continue;
      size_t first = 0;
      if (position == skip_at_) {  // a resume: these were delivered before the state
        first = static_cast<size_t>(std::min<int64_t>(skip_first_, static_cast<int64_t>(outs.size())));
        skip_at_ = -1;
      }
      queue_before_ = std::move(before);
      queue_taken_ = static_cast<int64_t>(first);
      for (size_t i = first; i < outs.size(); ++i) queue_.push_back(std::move(outs[i]));
      if (queue_.empty()) {
        std::lock_guard lock(stats_mu_);
        pack_state_ = packer_->state();
      }
      continue;
    }
    HR_ASSIGN_OR_RETURN(Batch out, packer_->Push(*in, position, last));
    {
      std::lock_guard lock(stats_mu_);
      pack_stats_ = packer_->stats();
      pack_state_ = packer_->state();
    }
    if (replay || out.global_index < deliver_from_) continue;
    if (out.size() == 0 && !deliver_empty_) continue;
    return std::optional<Batch>(std::move(out));
  }
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
