#include "headrace/exec/pack_planner.h"

#include <algorithm>
#include <utility>

namespace headrace {

void PackPlanner::Admit(int64_t epoch, int64_t position, std::span<const int64_t> indices,
                        const std::vector<std::optional<Told>>& told, PlannedPack& plan) {
  samples_sized_ += static_cast<int64_t>(indices.size());
  for (size_t s = 0; s < indices.size(); ++s) {
    // Not told: a full row (see the header).
    const bool known = s < told.size() && told[s].has_value();
    int64_t tokens = known ? told[s]->tokens : options_.seq_len;
    if (tokens > options_.seq_len) {
      // The Packer's errors for the same samples (exec/packer.cc, Admit).
      if (options_.overflow == PackOverflow::kSkip) {
        plan.skipped.push_back(
            SampleError{epoch, indices[s], told[s]->id, PackLeftOut(tokens, options_)});
        continue;
      }
      if (told[s]->vision_past_seq_len > 0) {
        plan.failed.push_back(SampleError{
            epoch, indices[s], told[s]->id,
            Status::InvalidArgument(
                PackTooLong(tokens, options_) + ", and the cut would drop " + std::to_string(told[s]->vision_past_seq_len) +
                " of its " + std::to_string(told[s]->vision) +
                " vision tokens (raise seq_len, or lower the images' max_pixels)")});
        continue;
      }
      tokens = options_.seq_len;
    }
    const int64_t arrival = arrivals_++;
    by_tokens_.emplace(tokens, arrival);
    window_.emplace(arrival, Entry{indices[s], position, tokens,
                                   row_deal_.has_value() && known ? told[s] : std::nullopt});
  }
}

void PackPlanner::KeepDealt(int64_t epoch, std::vector<std::vector<Entry>>& rows,
                            PlannedPack& plan) const {
  std::vector<std::vector<int64_t>> indices;
  std::vector<std::vector<std::optional<Told>>> told;
  for (const std::vector<Entry>& row : rows) {
    indices.emplace_back();
    told.emplace_back();
    for (const Entry& e : row) {
      indices.back().push_back(e.index);
      told.back().push_back(e.told);
    }
  }
  std::vector<std::vector<Entry>> kept;
  for (const size_t r : row_deal_->deal(epoch, indices, told)) {
    kept.push_back(std::move(rows.at(r)));
  }
  rows = std::move(kept);
  const auto elsewhere = [this](const SampleError& e) {
    return e.index % row_deal_->world != row_deal_->rank;
  };
  std::erase_if(plan.skipped, elsewhere);
  std::erase_if(plan.failed, elsewhere);
}

PackState PackPlanner::StateAfter(int64_t epoch, int64_t next_batch) const {
  PackState state;
  state.epoch = epoch;
  state.next_batch = next_batch;
  state.from_batch = window_.empty() ? next_batch : window_.begin()->second.from_batch;
  for (const auto& [arrival, e] : window_) state.waiting.push_back(e.index);
  state.shared = row_deal_.has_value();
  return state;
}

PlannedPack PackPlanner::PlanLocked(int64_t epoch, int64_t position, bool last_in_epoch,
                                    std::span<const int64_t> indices,
                                    const std::vector<std::optional<Told>>& told, bool deal) {
  PlannedPack plan;
  plan.before = StateAfter(epoch, position);
  Admit(epoch, position, indices, told, plan);
  const int64_t world = row_deal_.has_value() ? row_deal_->world : 1;
  std::vector<std::vector<Entry>> rows =
      TakePackRows(window_, by_tokens_, options_.seq_len, last_in_epoch,
                   PackWindowAt(options_, position, static_cast<int64_t>(indices.size())), world);
  if (row_deal_.has_value() && deal) KeepDealt(epoch, rows, plan);
  for (std::vector<Entry>& row : rows) {
    std::vector<int64_t> ids;
    for (const Entry& e : row) ids.push_back(e.index);
    plan.rows.push_back(std::move(ids));
  }
  plan.after = last_in_epoch ? StateAfter(epoch + 1, 0) : StateAfter(epoch, position + 1);
  return plan;
}

std::vector<int64_t> PackPlanner::Plan(int64_t epoch, int64_t position, int64_t global,
                                       bool last_in_epoch, std::span<const int64_t> indices,
                                       std::stop_token stop) {
  const std::vector<std::optional<Told>> told = sizer_(epoch, indices, std::move(stop));
  MutexLock lock(mu_);
  PlannedPack plan = PlanLocked(epoch, position, last_in_epoch, indices, told, /*deal=*/true);
  std::vector<int64_t> samples;
  for (const std::vector<int64_t>& row : plan.rows) {
    samples.insert(samples.end(), row.begin(), row.end());
  }
  plans_[global] = std::move(plan);
  return samples;
}

std::optional<PlannedPack> PackPlanner::Take(int64_t global) {
  MutexLock lock(mu_);
  const auto it = plans_.find(global);
  if (it == plans_.end()) return std::nullopt;
  PlannedPack plan = std::move(it->second);
  plans_.erase(it);
  return plan;
}

Status PackPlanner::Restore(const PackState& state, const InputBatch& batch_of) {
  MutexLock lock(mu_);
  window_.clear();
  by_tokens_.clear();
  plans_.clear();
  std::vector<int64_t> waiting = state.waiting;
  std::sort(waiting.begin(), waiting.end());
  std::vector<int64_t> found;
  for (int64_t p = state.from_batch; p < state.next_batch; ++p) {
    std::vector<int64_t> keep;
    for (const int64_t index : batch_of(state.epoch, p)) {
      if (std::binary_search(waiting.begin(), waiting.end(), index)) keep.push_back(index);
    }
    const size_t before = window_.size();
    PlannedPack dropped;
    Admit(state.epoch, p, keep, sizer_(state.epoch, keep, {}), dropped);
    if (window_.size() != before + keep.size()) {
      return Status::InvalidArgument(
          "packing: resume: a waiting sample of the saved window is now left out (longer than "
          "batch.pack.seq_len): the dataset or the pipeline changed since the state was saved");
    }
    found.insert(found.end(), keep.begin(), keep.end());
  }
  std::sort(found.begin(), found.end());
  if (found != waiting) {
    return Status::InvalidArgument(
        "packing: resume: the saved window's " + std::to_string(waiting.size()) +
        " samples are not those the input batches hold (" + std::to_string(found.size()) +
        " found): the dataset or the pipeline changed since the state was saved");
  }
  return Status::Ok();
}

void PackPlanner::Skip(int64_t epoch, int64_t to, const InputBatch& batch_of) {
  for (int64_t p = 0; p < to; ++p) {
    const std::vector<int64_t> indices = batch_of(epoch, p);
    const std::vector<std::optional<Told>> told = sizer_(epoch, indices, {});
    MutexLock lock(mu_);
    // Only the window after each batch matters here: the rows are dropped, so a RowDeal's
    // deal is not asked (it would count the skipped steps as dealt: BatchFormer::balance).
    (void)PlanLocked(epoch, p, false, indices, told, /*deal=*/false);
  }
}

int64_t PackPlanner::samples_sized() const {
  MutexLock lock(mu_);
  return samples_sized_;
}

}  // namespace headrace
