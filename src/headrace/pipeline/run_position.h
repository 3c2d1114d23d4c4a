// LoaderState: the run's position as a Loader's state dict (version 2) holds it, with the
// rules that check it and that merge the states of every rank into one global state.
//
// A state dict is written by a Loader and read back by another process, often from a
// checkpoint folder that anyone may edit; what it claims is checked against what it can
// be before a run starts from it (a lying state would otherwise deliver a sample many
// times or skip the rest of an epoch). The Python Loader (python/headrace/loader.py) and
// headrace.ray keep only the dict plumbing: the keys, their parsing
// (python/src/run_position.cc) and the comparison of the pipeline's identity.
//
// Positions: rank r of W's batch k of an epoch is the epoch's batch k × W + r
// (EpochOrder's round-robin dealing), so a state whose every rank is at batch k has
// consumed the epoch's first k × W × batch_size positions (PositionsConsumed).
//
// Every function here is pure and thread-safe; errors are kInvalidArgument naming the
// state's key ("state dict: pack.waiting: ...") and the values allowed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/exec/epoch_order.h"
#include "headrace/exec/packer.h"

namespace headrace {

class PreparedPipeline;

// The position part of one rank's state dict.
struct LoaderState {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t batch_size = 1;
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;  // this rank's next batch in `epoch`
  // This rank's batches per epoch; nullopt before the first engine ran, and in the rest
  // of an epoch (`remainder`), whose batches are counted within it.
  std::optional<int64_t> batches_per_epoch;
  std::optional<PackState> pack;  // batch.pack's window
  std::optional<EpochRemainder> remainder;  // an elastic resume's epoch
  std::vector<int64_t> blend_start;         // a blend's picks before `remainder`
  std::vector<int64_t> blend_picks;         // a blend's picks before the position
};

// The most positions an epoch can have (a blend's longest epoch, exec/blend_order.cc):
// what a state's positions are held to where the pipeline is not at hand (a merge).
inline constexpr int64_t kMaxEpochPositions = int64_t{1} << 36;

// What a state is checked against: this pipeline's sizes (StateBoundsOf).
struct StateBounds {
  int64_t num_samples = 0;        // dataset indices are [0, num_samples)
  int64_t epoch_samples = 0;      // positions of one epoch (a blend's length)
  int64_t batches_per_epoch = 0;  // batches of one epoch over all ranks
  int64_t blend_entries = 0;      // source.mix's entries; 0 for another source
};
Result<StateBounds> StateBoundsOf(const PreparedPipeline& prepared);

// The epoch's positions that rank states at `batch_in_epoch` have consumed between them:
// batch_in_epoch × world_size × batch_size, refused past kMaxEpochPositions.
Result<int64_t> PositionsConsumed(int64_t batch_in_epoch, int64_t world_size,
                                  int64_t batch_size);

// What one state claims, checked on its own and, with `bounds`, against the pipeline:
// world_size, batch_size >= 1 and rank in [0, world_size); epoch >= 0; batch_in_epoch in
// [0, batches_per_epoch] (== : the state was taken after the epoch's last batch), and
// batches_per_epoch the pipeline's share for world_size; pack: 0 <= from_batch <=
// next_batch, delivered in [0, batch_size] (one input batch of batch_size samples gives
// at most batch_size batches), waiting unique dataset indices; remainder: consumed inside
// the epoch, pending unique dataset indices; blend_start / blend_picks: one count per
// entry, each and their sum inside the epoch (in the rest of an epoch, which counts picks
// made under other weights, inside kMaxEpochPositions).
Status CheckLoaderState(const LoaderState& state, const std::optional<StateBounds>& bounds);

// The rest of an epoch against the epoch's order: every pending sample must be one the
// order placed before `consumed` (taken into a window and not delivered), so that the
// rest delivers each sample of the epoch once.
Status CheckPending(const PreparedPipeline& prepared, const EpochRemainder& remainder,
                    const std::vector<int64_t>& blend_start);

// Where a merge of every rank's state (or, `lockstep`, one state loaded with another
// world or batch size) leaves the run: the rest of `epoch`, or (remainder nullopt) the
// start of `epoch`, when every rank had finished its share.
struct GlobalPosition {
  int64_t epoch = 0;
  std::optional<EpochRemainder> remainder;
  int64_t saved_world_size = 1;
};
// Each state is checked (CheckLoaderState without bounds); the states must be of one run
// at one step (world_size, batch_size, epoch, batch_in_epoch, batches_per_epoch,
// remainder, blend_start the same), of ranks 0..W-1 once each unless `lockstep`; a pack
// window at the loader's position and with no batch.max_tokens batch half delivered; the
// windows disjoint, or all shared and the same (PackState::shared: then one copy, and one
// state's window is the whole run's, so that `lockstep` may carry it). The rest: the
// windows' samples, then the epoch's order from the
// positions every rank reached (after an earlier remainder's pending samples).
Result<GlobalPosition> MergeLoaderStates(const std::vector<LoaderState>& states, bool lockstep);

}  // namespace headrace
