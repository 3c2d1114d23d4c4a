// PackingQueue (exec/packer.h): the packer as a consumer drives it, resume skips and the
// state after each delivered batch.
#include <utility>

#include "headrace/exec/packer.h"

namespace headrace {

void PackingQueue::Resume(const PackState& state) {
  packer_.Restore(state);
  state_ = state;
  skip_at_ = state.next_batch;
  skip_first_ = state.delivered;
}

Result<bool> PackingQueue::Push(const Batch& input, int64_t position, bool last_in_epoch) {
  const bool replay = packer_.replaying(position);
  const bool delivers = !replay && input.global_index >= deliver_from_;
  if (!packer_.budget()) {
    HR_ASSIGN_OR_RETURN(Batch out, packer_.Push(input, position, last_in_epoch));
    if (delivers) {
      queue_.emplace_back(std::move(out), packer_.state());
    } else {
      state_ = packer_.state();
    }
    KeepLost(delivers);
    return delivers;
  }
  // The state while some token batches of this input batch wait: the packer's before it,
  // with how many of them were delivered.
  PackState before = packer_.state();
  before.epoch = input.epoch;
  before.next_batch = position;
  if (before.waiting.empty()) before.from_batch = position;
  HR_ASSIGN_OR_RETURN(std::vector<Batch> outs,
                      packer_.PushBudget(input, position, last_in_epoch));
  KeepLost(QueueTokenBatches(std::move(outs), position, delivers, before, packer_.state()));
  return delivers;
}

void PackingQueue::KeepLost(bool counted) {
  std::vector<LostSample> lost = packer_.TakeLost();
  if (!counted) return;
  for (LostSample& l : lost) lost_.push_back(std::move(l));
}

bool PackingQueue::QueueTokenBatches(std::vector<Batch> outs, int64_t position, bool delivers,
                                     const PackState& before, const PackState& after) {
  size_t first = delivers ? 0 : outs.size();
  if (position == skip_at_) {  // a resume: these were delivered before the state
    first = std::min(outs.size(), static_cast<size_t>(std::max<int64_t>(skip_first_, 0)));
    skip_at_ = -1;
  }
  for (size_t i = first; i < outs.size(); ++i) {
    PackState state = after;
    if (i + 1 < outs.size()) {
      state = before;
      state.delivered = static_cast<int64_t>(i + 1);
    }
    queue_.emplace_back(std::move(outs[i]), std::move(state));
  }
  if (first >= outs.size()) state_ = after;
  return first == 0 && !outs.empty();
}

Status PackingQueue::PushPlanned(const Batch& input, int64_t position,
                                 const std::vector<std::vector<int64_t>>& rows,
                                 std::vector<SampleError> skipped,
                                 std::vector<SampleError> failed, const PackState& before,
                                 const PackState& after) {
  if (!packer_.budget()) {
    HR_ASSIGN_OR_RETURN(Batch out, packer_.PushPlanned(input, position, rows, std::move(skipped),
                                                       std::move(failed)));
    queue_.emplace_back(std::move(out), after);
    KeepLost(true);
    return Status::Ok();
  }
  HR_ASSIGN_OR_RETURN(std::vector<Batch> outs, packer_.PushPlannedBudget(
                                                   input, position, rows, std::move(skipped),
                                                   std::move(failed)));
  KeepLost(QueueTokenBatches(std::move(outs), position, /*delivers=*/true, before, after));
  return Status::Ok();
}

std::optional<Batch> PackingQueue::Pop() {
  if (queue_.empty()) return std::nullopt;
  auto [batch, state] = std::move(queue_.front());
  queue_.pop_front();
  state_ = std::move(state);
  return std::move(batch);
}

}  // namespace headrace
