// DealStep: one data-parallel step's samples dealt over the ranks by cost (batch.balance:
// docs/balanced_steps.md), so that the rank whose samples cost most (the one every other
// rank waits for at the step's barrier) costs as little over the mean as a fast
// deterministic heuristic gets.
//
// The step is every rank's batch as the epoch's order deals them (rank r's is batch r
// of the step). Each rank keeps its batch's sample count. The samples are dealt
// costliest first in rounds, each round one to every rank with room, its costliest to the
// least loaded rank (ties to the lower rank, equal costs in step order); then the
// costliest rank swaps a pair of samples with whichever rank evens the two most, while a
// swap lowers it (at most 2 x W swaps). Modality-safe (`every_rank`): then each rank
// without a sample of a required kind takes one from a rank holding two or more (its
// sample nearest in cost to the one it gives back, which leaves neither without another
// required kind), whenever the step holds one per rank; else the rank is counted short
// (a ZeRO-3/FSDP trainer adds a dummy). Within a rank the samples keep the step's order. A
// pure function of the step's samples and costs: every rank computes the same deal and
// keeps its share. O(n log n + W^2 x B^2) for n = W x B samples.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "headrace/exec/step_cost.h"

namespace headrace {

struct DealtStep {
  std::vector<std::vector<int64_t>> ranks;  // each rank's samples, in step order
  double before = 0;  // the costliest rank's cost as the order dealt the step
  double after = 0;   // ... and as dealt here
  double mean = 0;    // the ranks' mean cost
  // Ranks left without a sample of a kind `every_rank` requires (one per rank and kind):
  // the step holds fewer such samples than ranks.
  int64_t short_ranks = 0;
};

// `batches`: each rank's samples as the order deals them; `costs`: each sample's cost,
// in the order of the batches' samples, rank 0's first. costs.size() must be the total.
// `modalities`: each sample's ModalityBit set (step_cost.h), in the same order (empty:
// none known); `every_rank`: the bits each rank's share must hold.
DealtStep DealStep(std::span<const std::vector<int64_t>> batches, std::span<const double> costs,
                   std::span<const uint32_t> modalities = {}, uint32_t every_rank = 0);

// A step's packed rows, planned over every rank's samples of the step (batch.balance
// with a packing window: PackPlanner::RowDeal), dealt over `world` ranks as DealStep deals
// samples: `row_costs` each row's (its samples' costs summed: attention stays within a
// sample's segment, and a row's padding costs every rank alike, each holding as many
// rows), `row_modalities` each row's samples' kinds together. Each rank gets as many
// rows as the plan's contiguous blocks of rows x world / n give it (`before` is those
// blocks' costliest), so that counts differ only where the rows are not a multiple of
// `world`. The ranks' entries are row numbers, ascending.
DealtStep DealRows(std::span<const double> row_costs, std::span<const uint32_t> row_modalities,
                   int world, uint32_t every_rank = 0);

// The costs of samples of `sizes` (nullopt: not told), by `cost`: one not told costs the
// mean of those told (1 when none is). Returns how many were not told.
int64_t CostsOf(std::span<const std::optional<SampleSize>> sizes, const StepCost& cost,
                std::vector<double>& costs);

}  // namespace headrace
