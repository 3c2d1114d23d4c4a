// The batch-forming policies a run picks from (exec/batch_former.h), and what they are
// made from. The first policy in batch_formers.cc's list that takes the run forms it:
//
//   balanced       batch.balance: each step's samples dealt over the ranks by cost, then
//                  formed by the policy the rest of the list picks (balanced_former.cc)
//   pack planned   batch.pack / batch.max_tokens, rows decided from the sizes the chain's
//                  size pass tells before the samples run  (planned_pack_former.cc)
//   pack           batch.pack / batch.max_tokens, packed after the samples ran, in a
//                  window                                   (pack_former.cc)
//   plain          every other run: the engine's batches as they are  (plain_former.cc)
//
// Adding a policy is its file (a class deriving BatchFormer and a Make function that
// returns null for a run it does not take) and a line in the list: exec/README.md,
// "Batch forming", walks through one.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/exec/batch_former.h"
#include "headrace/exec/engine.h"
#include "headrace/exec/packer.h"
#include "headrace/exec/size_index.h"
#include "headrace/exec/step_cost.h"

namespace headrace {

// batch.balance as a run deals it (balanced_former.cc).
struct BalanceOptions {
  StepCostOptions cost;
  std::string token_field = "input_ids";  // whose rows the size pass tells are the tokens
  // Every sample's sizes, built ahead (batch.balance.index, checked against the run's
  // pipeline); null: each step sized by the size pass as it is dealt.
  std::shared_ptr<const SizeIndex> index;
  // The kinds of media every rank's share of a step holds when the step holds one per
  // rank (ModalityBit, step_cost.h; batch.balance.every_rank); 0: none.
  uint32_t every_rank = 0;
  // The ranks each step is dealt over where the run's order does not say it: a Ray
  // worker's on-demand run (rank 0 of 1, computing any rank's batches: its epoch batch b
  // is rank b mod `ranks`'s share of step b div `ranks`) deals over the trainers' world
  // size. 0: the order's world size (a local run).
  int ranks = 0;
};

// The batch field a balanced run over `inputs` costs samples by: `token_field`, whose
// tokens the chain tells before it runs (TellingTokenField). kInvalidArgument naming
// batch.balance when it does not.
Result<int> BalanceTokenField(const EngineInputs& inputs, const std::string& token_field);

// Whether batch.balance over `world` ranks deals each step's packed rows rather than its
// samples: batch.pack (not max_tokens) with a window, whose rows a rank packing its own
// dealt samples would carry into later steps (balanced_former.cc, PackPlanner::RowDeal).
bool BalanceDealsRows(const std::optional<PackOptions>& pack, int world);

// A run as its former sees it before the engine starts.
struct FormingRun {
  // What the engine runs (the chain, the fields, the source).
  std::shared_ptr<const EngineInputs> inputs;
  // batch.pack / batch.max_tokens as the packer runs them; nullopt: neither.
  std::optional<PackOptions> pack;
  // The engine's options: the order, schedule, budgets and start the former reads; a
  // former may move the start (a pack window restarts where its saved window began) and
  // sets deliver_empty_batches when it follows positions.
  EngineOptions* engine = nullptr;
  // A former's saved state to continue from (Loader::pack_state); nullopt: from the start
  // position.
  std::optional<PackState> resume;
  // Whether a pack may be planned (LoaderOptions::plan_packing).
  bool plan_packing = true;
  // The consumer's batch memory (LoaderOptions::allocator); null: the heap.
  Allocator* allocator = nullptr;
  // Every sample's sizes, built ahead and checked against the run's pipeline
  // (batch.pack.index or batch.balance.index): a planned pack plans by them; null: each
  // sample sized by the size pass as it comes.
  std::shared_ptr<const SizeIndex> sizes;
  // batch.balance; nullopt: the order's deal.
  std::optional<BalanceOptions> balance;
  // The samples the engine's batch `position` holds before its former composes it: set
  // by a policy that deals them otherwise than the order (balanced) for the policies it
  // wraps (a planned pack replays its window by them); null: the order's.
  std::function<std::vector<int64_t>(const BatchPosition&)> samples_of;
  // Set by a policy that deals each step's packed rows over the ranks (balanced, with a
  // packing window): a planned pack plans the step's rows over every rank's samples
  // (samples_of and Compose give the whole step) and keeps the rows this deals its rank
  // (PackPlanner::RowDeal); nullopt: a rank plans its own samples' rows.
  std::optional<PackPlanner::RowDeal> row_deal;
  // With row_deal on a Ray rank (its workers computed each step's rows' samples, Compose
  // is never called): the planned pack plans each step as its batch arrives.
  bool plans_at_push = false;
};

// A policy: the former of `run`, or null when it does not take the run.
using MakeFormer = Result<std::shared_ptr<BatchFormer>> (*)(FormingRun& run);

// The former the first policy that takes `run` makes (plain takes every run).
Result<std::shared_ptr<BatchFormer>> MakeBatchFormer(FormingRun& run);
// ... of the policies after `policy` in the list: what a policy that wraps another forms
// its batches with.
Result<std::shared_ptr<BatchFormer>> MakeFormerAfter(MakeFormer policy, FormingRun& run);

}  // namespace headrace
