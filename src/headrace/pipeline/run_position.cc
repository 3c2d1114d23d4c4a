#include "headrace/pipeline/run_position.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "headrace/pipeline/prepared.h"

namespace headrace {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

Status Refuse(const std::string& key, const std::string& what) {
  return Status::InvalidArgument("state dict: " + key + ": " + what);
}

// Indices unique and in [0, num_samples) (num_samples 0: not known here).
Status CheckIndices(const std::string& key, const std::vector<int64_t>& indices,
                    int64_t num_samples) {
  std::unordered_set<int64_t> seen;
  seen.reserve(indices.size());
  for (int64_t i : indices) {
    if (i < 0 || (num_samples > 0 && i >= num_samples)) {
      return Refuse(key, "index " + Str(i) + " is outside the dataset (allowed: [0, " +
                             (num_samples > 0 ? Str(num_samples) : std::string("size")) + "))");
    }
    if (!seen.insert(i).second) {
      return Refuse(key, "index " + Str(i) + " appears more than once (each sample waits "
                         "once: the indices must be unique)");
    }
  }
  return Status::Ok();
}

// A blend's picks: one count per entry, each >= 0, their sum inside the epoch.
// In the rest of an epoch the picks count those made before it, under the weights of the
// run that made them: only kMaxEpochPositions holds them (`in_rest`).
Status CheckPicks(const std::string& key, const std::vector<int64_t>& picks,
                  const std::optional<StateBounds>& bounds, bool in_rest) {
  if (picks.empty()) return Status::Ok();
  const int64_t limit = bounds && !in_rest ? bounds->epoch_samples : kMaxEpochPositions;
  if (bounds && static_cast<int64_t>(picks.size()) != bounds->blend_entries) {
    return Refuse(key, Str(static_cast<int64_t>(picks.size())) + " counts for a blend of " +
                           Str(bounds->blend_entries) + " entries (one count per source.mix "
                           "entry; null for another source)");
  }
  int64_t sum = 0;
  for (size_t i = 0; i < picks.size(); ++i) {
    if (picks[i] < 0 || picks[i] > limit || sum > limit - picks[i]) {
      return Refuse(key, "entry " + Str(static_cast<int64_t>(i)) + "'s picks " + Str(picks[i]) +
                             " (allowed: >= 0, all entries' together at most the epoch's " +
                             Str(limit) + " positions)");
    }
    sum += picks[i];
  }
  return Status::Ok();
}

}  // namespace

Result<StateBounds> StateBoundsOf(const PreparedPipeline& prepared) {
  HR_ASSIGN_OR_RETURN(EpochOrder order, prepared.RunWideOrder(std::nullopt, {}));
  StateBounds b;
  b.num_samples = prepared.source().size();
  b.epoch_samples = order.epoch_samples();
  b.batches_per_epoch = order.batches_per_epoch();
  b.blend_entries = static_cast<int64_t>(prepared.source().info().entries.size());
  return b;
}

Result<int64_t> PositionsConsumed(int64_t batch_in_epoch, int64_t world_size,
                                  int64_t batch_size) {
  if (batch_in_epoch < 0 || world_size < 1 || batch_size < 1 ||
      batch_in_epoch > kMaxEpochPositions / world_size / batch_size) {
    return Refuse("batch_in_epoch",
                  Str(batch_in_epoch) + " batches of " + Str(batch_size) + " on " +
                      Str(world_size) + " ranks is past any epoch (allowed: batch_in_epoch x "
                      "world_size x batch_size at most " + Str(kMaxEpochPositions) + ")");
  }
  return batch_in_epoch * world_size * batch_size;
}

Status CheckLoaderState(const LoaderState& s, const std::optional<StateBounds>& bounds) {
  if (s.world_size < 1 || s.world_size > (int64_t{1} << 31) - 1) {
    return Refuse("world_size", Str(s.world_size) + " (allowed: >= 1)");
  }
  if (s.batch_size < 1 || s.batch_size > kMaxEpochPositions) {
    return Refuse("batch_size", Str(s.batch_size) + " (allowed: >= 1)");
  }
  if (s.rank < 0 || s.rank >= s.world_size) {
    return Refuse("rank", Str(s.rank) + " (allowed: [0, world_size " + Str(s.world_size) + "))");
  }
  if (s.epoch < 0) return Refuse("epoch", Str(s.epoch) + " (allowed: >= 0)");
  if (s.batches_per_epoch && *s.batches_per_epoch < 1) {
    return Refuse("batches_per_epoch", Str(*s.batches_per_epoch) + " (allowed: >= 1, or null)");
  }
  if (bounds && s.batches_per_epoch && !s.remainder) {
    // The saved share must be this pipeline's: a lie (or a dataset that changed) would
    // end the epoch early or late.
    const int64_t share = bounds->batches_per_epoch / s.world_size;
    if (*s.batches_per_epoch != share) {
      return Refuse("batches_per_epoch",
                    "saved " + Str(*s.batches_per_epoch) + ", this loader " + Str(share) +
                        " (the dataset changed, or the state is not this pipeline's)");
    }
  }
  const int64_t most = s.batches_per_epoch ? *s.batches_per_epoch
                                           : kMaxEpochPositions / s.world_size / s.batch_size;
  if (s.batch_in_epoch < 0 || s.batch_in_epoch > most) {
    return Refuse("batch_in_epoch",
                  Str(s.batch_in_epoch) + " is outside the epoch (allowed: [0, " +
                      (s.batches_per_epoch ? "batches_per_epoch " : "") + Str(most) + "])");
  }
  HR_ASSIGN_OR_RETURN(const int64_t positions,
                      PositionsConsumed(s.batch_in_epoch, s.world_size, s.batch_size));
  const int64_t num_samples = bounds ? bounds->num_samples : 0;
  if (s.pack) {
    const PackState& p = *s.pack;
    if (p.epoch < 0) return Refuse("pack.epoch", Str(p.epoch) + " (allowed: >= 0)");
    if (p.from_batch < 0 || p.next_batch < p.from_batch || p.next_batch > most) {
      return Refuse("pack", "from_batch " + Str(p.from_batch) + ", next_batch " +
                                Str(p.next_batch) + " (allowed: 0 <= from_batch <= next_batch "
                                "<= " + Str(most) + ")");
    }
    if (p.delivered < 0 || p.delivered > s.batch_size) {
      return Refuse("pack.delivered",
                    Str(p.delivered) + " (allowed: [0, batch_size " + Str(s.batch_size) +
                        "]: one input batch gives at most one batch.max_tokens batch a sample)");
    }
    HR_RETURN_IF_ERROR(CheckIndices("pack.waiting", p.waiting, num_samples));
    // The input batches it took from hold (next - from + 1) x batch_size samples, every
    // rank's where the window is shared (past kMaxEpochPositions no window in memory can
    // reach it).
    const int64_t batches = (p.next_batch - p.from_batch + 1) * (p.shared ? s.world_size : 1);
    const int64_t window_most = batches <= kMaxEpochPositions / s.batch_size
                                    ? batches * s.batch_size
                                    : kMaxEpochPositions;
    if (static_cast<int64_t>(p.waiting.size()) > window_most) {
      return Refuse("pack.waiting", Str(static_cast<int64_t>(p.waiting.size())) +
                                        " samples, more than input batches " +
                                        Str(p.from_batch) + ".." + Str(p.next_batch) +
                                        " hold (allowed: at most " + Str(window_most) + ")");
    }
  }
  if (s.remainder) {
    const EpochRemainder& r = *s.remainder;
    const int64_t limit = bounds ? bounds->epoch_samples : kMaxEpochPositions;
    if (r.epoch != s.epoch) {
      return Refuse("remainder.epoch", Str(r.epoch) + " (allowed: the state's epoch " +
                                           Str(s.epoch) + ")");
    }
    if (r.consumed < 0 || r.consumed > limit) {
      return Refuse("remainder.consumed", Str(r.consumed) + " is outside the epoch (allowed: [0, " +
                                              Str(limit) + "])");
    }
    HR_RETURN_IF_ERROR(CheckIndices("remainder.pending", r.pending, num_samples));
    if (static_cast<int64_t>(r.pending.size()) > r.consumed) {
      return Refuse("remainder.pending", Str(static_cast<int64_t>(r.pending.size())) +
                                             " samples, more than the " + Str(r.consumed) +
                                             " positions consumed they were taken from");
    }
    const int64_t rest = limit - r.consumed + static_cast<int64_t>(r.pending.size());
    if (positions > rest) {
      return Refuse("batch_in_epoch", Str(s.batch_in_epoch) + " is past the rest of the epoch (" +
                                          Str(rest) + " positions; allowed: batch_in_epoch x "
                                          "world_size x batch_size at most that)");
    }
  } else if (bounds && positions > bounds->epoch_samples) {
    return Refuse("batch_in_epoch", Str(s.batch_in_epoch) + " is past the epoch's " +
                                        Str(bounds->epoch_samples) + " positions");
  }
  const bool in_rest = s.remainder.has_value();
  HR_RETURN_IF_ERROR(CheckPicks("blend_start", s.blend_start, bounds, in_rest));
  HR_RETURN_IF_ERROR(CheckPicks("blend_picks", s.blend_picks, bounds, in_rest));
  if (!s.blend_start.empty() && !s.remainder) {
    return Refuse("blend_start", "picks before the rest of an epoch, without a remainder "
                                 "(allowed: null)");
  }
  return Status::Ok();
}

Status CheckPending(const PreparedPipeline& prepared, const EpochRemainder& remainder,
                    const std::vector<int64_t>& blend_start) {
  if (remainder.pending.empty()) return Status::Ok();
  HR_ASSIGN_OR_RETURN(EpochOrder order, prepared.RunWideOrder(std::nullopt, blend_start));
  const std::vector<int64_t> full = order.Permutation(remainder.epoch);
  const auto consumed = std::min<int64_t>(remainder.consumed, static_cast<int64_t>(full.size()));
  std::unordered_map<int64_t, int64_t> before;  // pending index -> times placed before consumed
  for (int64_t i : remainder.pending) before.emplace(i, 0);
  for (int64_t p = 0; p < consumed; ++p) {
    auto it = before.find(full[p]);
    if (it != before.end()) ++it->second;
  }
  for (int64_t i : remainder.pending) {
    if (before[i] == 0) {
      return Refuse("remainder.pending",
                    "sample " + Str(i) + " is not among the epoch's first " + Str(consumed) +
                        " positions (consumed): a pending sample is one taken from them and "
                        "not delivered; the rest of the epoch delivers it already");
    }
  }
  return Status::Ok();
}

Result<GlobalPosition> MergeLoaderStates(const std::vector<LoaderState>& states, bool lockstep) {
  if (states.empty()) {
    return Status::InvalidArgument("merge_state_dicts: expected a list of state dicts, one per "
                                   "rank, got none");
  }
  for (const LoaderState& s : states) {
    Status st = CheckLoaderState(s, std::nullopt);
    if (!st.ok()) {
      return Status::InvalidArgument("merge_state_dicts: rank " + Str(s.rank) + ": " +
                                     st.message());
    }
  }
  std::vector<const LoaderState*> by_rank;
  for (const LoaderState& s : states) by_rank.push_back(&s);
  std::stable_sort(by_rank.begin(), by_rank.end(),
                   [](const LoaderState* a, const LoaderState* b) { return a->rank < b->rank; });
  const LoaderState& first = *by_rank.front();
  const int64_t world = first.world_size;
  bool every_rank = static_cast<int64_t>(by_rank.size()) == world;
  for (size_t i = 0; every_rank && i < by_rank.size(); ++i) {
    every_rank = by_rank[i]->rank == static_cast<int64_t>(i);
  }
  if (!lockstep && !every_rank) {
    std::string ranks;
    for (const LoaderState* s : by_rank) ranks += (ranks.empty() ? "" : ", ") + Str(s->rank);
    return Status::InvalidArgument(
        "merge_state_dicts: ranks [" + ranks + "] of world_size " + Str(world) +
        ": the state of every rank 0.." + Str(world - 1) + " is needed, once each");
  }
  for (const LoaderState* s : by_rank) {
    if (s->batches_per_epoch != first.batches_per_epoch) {
      auto show = [](const std::optional<int64_t>& v) { return v ? Str(*v) : "None"; };
      return Status::InvalidArgument(
          "merge_state_dicts: batches_per_epoch: rank " + Str(s->rank) + " has " +
          show(s->batches_per_epoch) + ", rank " + Str(first.rank) + " " +
          show(first.batches_per_epoch) + " (states of one run)");
    }
  }
  const int64_t epoch = first.epoch, batch = first.batch_in_epoch;
  std::vector<int64_t> windows;
  std::unordered_set<int64_t> in_windows;
  // A shared window (the step's rows dealt over the ranks) is every rank's: the same in
  // each state, merged once.
  const PackState* shared = nullptr;
  for (const LoaderState* s : by_rank) {
    if (!s->pack) continue;
    const PackState& p = *s->pack;
    if (p.shared != (first.pack && first.pack->shared)) {
      return Status::InvalidArgument(
          "merge_state_dicts: rank " + Str(s->rank) + ": pack.shared differs from rank " +
          Str(first.rank) + "'s (states of one run)");
    }
    if (p.shared && shared != nullptr) {
      if (p.waiting != shared->waiting || p.epoch != shared->epoch ||
          p.from_batch != shared->from_batch || p.next_batch != shared->next_batch) {
        return Status::InvalidArgument(
            "merge_state_dicts: rank " + Str(s->rank) + ": its shared pack window differs "
            "from rank " + Str(first.rank) + "'s (every rank holds the same one: states of "
            "one step, of one run)");
      }
      continue;
    }
    if (p.shared) shared = &p;
    if (p.delivered != 0) {
      return Status::InvalidArgument(
          "merge_state_dicts: rank " + Str(s->rank) + ": pack.delivered is " +
          Str(p.delivered) + ": the state was taken between two batch.max_tokens batches of "
          "one input batch, whose samples another world size cannot split; take it after the "
          "input batch's last one");
    }
    if (p.epoch != epoch || p.next_batch != batch) {
      return Status::InvalidArgument(
          "merge_state_dicts: rank " + Str(s->rank) + ": pack is at epoch " + Str(p.epoch) +
          " batch " + Str(p.next_batch) + ", the loader at epoch " + Str(epoch) + " batch " +
          Str(batch));
    }
    for (int64_t i : p.waiting) {
      if (!in_windows.insert(i).second) {
        return Status::InvalidArgument(
            "merge_state_dicts: rank " + Str(s->rank) + ": pack.waiting: sample " + Str(i) +
            " waits in another rank's window too (each sample is dealt to one rank)");
      }
      windows.push_back(i);
    }
  }
  if (lockstep && !windows.empty() && shared == nullptr) {
    return Status::InvalidArgument(
        "state dict: world_size " + Str(world) + " -> another needs every rank's state "
        "(batch.pack keeps samples in each rank's window): load "
        "headrace.merge_state_dicts([...]) of all ranks");
  }
  GlobalPosition g;
  g.saved_world_size = world;
  if (first.batches_per_epoch && batch >= *first.batches_per_epoch && windows.empty()) {
    // Every rank finished its share: the rest of the epoch is the tail no round of ranks
    // took; the resume starts the next epoch.
    g.epoch = epoch + 1;
    return g;
  }
  HR_ASSIGN_OR_RETURN(const int64_t positions, PositionsConsumed(batch, world, first.batch_size));
  EpochRemainder rest;
  rest.epoch = epoch;
  if (first.remainder) {
    const EpochRemainder& old = *first.remainder;
    const auto pending = static_cast<int64_t>(old.pending.size());
    if (positions <= pending) {
      rest.pending.assign(old.pending.begin() + positions, old.pending.end());
      rest.consumed = old.consumed;
    } else {
      rest.consumed = old.consumed + positions - pending;
    }
  } else {
    rest.consumed = positions;
  }
  for (int64_t i : rest.pending) {
    if (!in_windows.insert(i).second) {
      return Status::InvalidArgument(
          "merge_state_dicts: pack.waiting: sample " + Str(i) + " is also pending in the "
          "remainder (a sample waits in one place)");
    }
  }
  rest.pending.insert(rest.pending.begin(), windows.begin(), windows.end());
  g.epoch = epoch;
  g.remainder = std::move(rest);
  return g;
}

}  // namespace headrace
