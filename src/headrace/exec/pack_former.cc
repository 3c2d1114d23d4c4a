// pack: batch.pack / batch.max_tokens after the samples ran, in the Packer's window.
#include "headrace/exec/pack_former.h"

#include <algorithm>
#include <iterator>

namespace headrace {

PackOptions PackFormer::OptionsFor(const FormingRun& run) {
  PackOptions pack = *run.pack;
  pack.allocator = run.allocator;
  pack.pool_bytes = std::max(pack.pool_bytes, run.engine->batch_budget_bytes);
  return pack;
}

Result<std::optional<Batch>> PackFormer::Next(BatchInput& input) {
  if (epoch_batches_ < 0) {
    epoch_batches_ = input.batches_per_epoch();
    queue_.set_epoch_batches(epoch_batches_);
  }
  while (true) {
    if (std::optional<Batch> out = queue_.Pop(); out.has_value()) {
      {
        MutexLock lock(mu_);
        state_ = queue_.state();
      }
      if (out->size() == 0 && !deliver_empty_) {
        // Every sample failed (or was left out): its errors go with the next batch.
        for (SampleError& e : out->errors) held_errors_.push_back(std::move(e));
        continue;
      }
      out->errors.insert(out->errors.begin(), std::make_move_iterator(held_errors_.begin()),
                         std::make_move_iterator(held_errors_.end()));
      held_errors_.clear();
      return out;
    }
    HR_ASSIGN_OR_RETURN(std::optional<Batch> in, input.Next());
    if (!in.has_value()) return std::optional<Batch>();
    // The rank-local batch in the epoch (index_in_epoch counts all ranks' batches).
    const int64_t position = in->global_index - in->epoch * epoch_batches_;
    const bool last = position + 1 == epoch_batches_;
    HR_RETURN_IF_ERROR(Push(*in, position, last, input));
    {
      MutexLock lock(mu_);
      stats_ = queue_.stats();
      state_ = queue_.state();
    }
    // The samples the packer left out or cut are data lost: counted as failed samples,
    // against errors.max_error_rate, in batch order, before their packed batch leaves.
    const std::vector<LostSample> lost = queue_.TakeLost();
    HR_RETURN_IF_ERROR(input.CountLost(lost, last));
  }
}

Status PackFormer::Push(const Batch& in, int64_t position, bool last_in_epoch,
                        BatchInput& input) {
  HR_RETURN_IF_ERROR(queue_.Push(in, position, last_in_epoch).status());
  // The window is in the batch budget: the engine admits fewer batches while it holds
  // more, so that the samples' rows in flight stay within the budget (on its own, a few %
  // of the VLM bench's packed samples/s; the narrowing window did the rest: packer.h).
  const int64_t window = queue_.stats().window_bytes;
  input.ChargeHeld(window - window_charged_);
  window_charged_ = window;
  return Status::Ok();
}

std::optional<PackState> PackFormer::state() const {
  MutexLock lock(mu_);
  return state_;
}

std::optional<PackStats> PackFormer::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

Result<std::shared_ptr<BatchFormer>> MakePackFormer(FormingRun& run) {
  // An on-demand engine's batches are packed by their consumer (a Ray rank).
  if (!run.pack.has_value() || run.engine->schedule != Schedule::kSequential) {
    return std::shared_ptr<BatchFormer>();
  }
  EngineOptions& engine = *run.engine;
  const PackOptions pack = PackFormer::OptionsFor(run);
  HR_ASSIGN_OR_RETURN(Packer packer, Packer::Make(run.inputs->fields, pack));
  PackingQueue queue(std::move(packer));
  // The packer sees every batch: an epoch's last one empties its window, empty or not.
  const bool deliver_empty = engine.deliver_empty_batches;
  engine.deliver_empty_batches = true;
  if (run.resume.has_value()) {
    // From where the saved window began.
    engine.start_epoch = run.resume->epoch;
    engine.start_batch = run.resume->from_batch;
    queue.Resume(*run.resume);
  } else if (pack.window > 0 && engine.start_batch > 0) {
    // No saved window: the epoch up to the start is replayed through the window, its
    // packed batches dropped.
    HR_ASSIGN_OR_RETURN(EpochOrder order, EpochOrder::Make(engine.order));
    const int64_t per_epoch = std::max<int64_t>(order.batches_per_rank_epoch(), 1);
    const int64_t deliver_from = engine.start_epoch * per_epoch + engine.start_batch;
    queue.DeliverFrom(deliver_from);
    engine.start_epoch = deliver_from / per_epoch;
    engine.start_batch = 0;
  }
  return std::shared_ptr<BatchFormer>(std::make_shared<PackFormer>(std::move(queue), deliver_empty));
}

}  // namespace headrace
