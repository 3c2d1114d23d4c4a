// RunBudget: the error budgets of one consumer of a run, counted once: the run's
// (errors.max_error_rate) and, for a blend (source.mix), each entry's own
// (source.mix[i].max_error_rate; an entry without one is only counted). It holds the one
// rule that says which entry a batch's rows and errors count against (Tally):
//
//   a row, a sample's error   the entry of its dataset index (Source::EntryOf)
//   a source's own error      no entry: a shard or file skipped whole at open
//                             (kShardError) names its place in its entry's list, not a
//                             sample; it counts in the run's budget only
//
// Who counts: the engine's in-order delivery (exec/delivery.h) counts each batch it
// delivers, whole (Count(batch)). A Ray worker (python/headrace/ray) tallies the batch it
// computed (Tally, through the bindings) and its rank, which receives the batch's errors as
// text, counts that tally (Count(tally, errors)): the same rule applied once, where the
// samples are. Lost samples (a packer's, exec/packer.h) are counted by whoever packs.
//
// Verdicts (Check): the run's budget first, merged with other ranks' counts where the
// caller has them (a Ray rank); then each entry's, over this consumer's own batches (a
// rank's share, as each local rank's delivery counts its own).
//
// Counts are taken at delivery, in batch order, so whether and where a run stops never
// depends on which thread finished first. Not thread-safe: its owner guards it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "headrace/core/batch.h"
#include "headrace/core/status.h"
#include "headrace/exec/error_budget.h"

namespace headrace {

// The blend entry of a dataset index (Source::EntryOf); null for a source that is no blend.
using EntryOf = std::function<int(int64_t index)>;

// What one batch adds to the budgets, each row and error given its entry by the rule above.
// Made where the batch is whole (RunBudget::Tally), counted where it is consumed.
struct BatchTally {
  // The entry of an error that is no sample's (a skipped shard's).
  static constexpr int kNoEntry = -1;
  struct Error {
    std::string kind;  // StatusCodeName of its status: the budget counts by kind
    int entry = kNoEntry;
  };
  int64_t delivered = 0;                 // the batch's rows
  std::vector<int64_t> entry_delivered;  // a blend's rows per entry; empty otherwise
  std::vector<Error> errors;             // the batch's errors, in order
};

struct RunBudgetOptions {
  double max_error_rate = 0.05;  // errors.max_error_rate
  int64_t min_samples = 100;     // errors.min_samples, the entries' too
  int max_kept_errors = 20;      // errors.max_logged: the run's errors kept in full
  // A blend: its entries' names, in order, and the rate each has of its own (nullopt, or
  // a shorter list: only the run's applies to it).
  std::vector<std::string> entries;
  std::vector<std::optional<double>> entry_max_error_rate;
};

// One blend entry's samples so far: delivered and failed.
struct EntryCounts {
  std::string name;
  ErrorCounts counts;
};

class RunBudget {
 public:
  explicit RunBudget(RunBudgetOptions options);

  // The rule: `batch`'s rows (its "index" field) and errors, each with its entry among
  // `entries` by `entry_of` (no entry tallies when `entries` is 0 or `entry_of` null).
  static BatchTally Tally(const Batch& batch, const EntryOf& entry_of, size_t entries);

  // A batch delivered here (its errors whole: kept for the report); its entries' counts
  // only with `entry_of`.
  void Count(const Batch& batch, const EntryOf& entry_of);
  // A batch tallied where it was computed, consumed here with its errors as text (in the
  // tally's order; the first one an entry or the run has is kept for the message).
  // kInvalidArgument, counting nothing, when the two do not match this budget's entries.
  Status Count(const BatchTally& tally, std::span<const std::string> errors);
  // Samples lost after delivery (ErrorBudget::CountLost), each against the run's budget
  // and its sample's entry's.
  void CountLost(std::span<const LostSample> lost, const EntryOf& entry_of);

  // Ok while every budget holds; else the first that is spent: the run's
  // (ErrorBudget::Check, with `others` and `rank`), then an entry's, its message naming the
  // entry and its key ("source.mix[1] (docs): too many bad samples: ... above
  // source.mix[1].max_error_rate 1%; ...").
  Status Check(bool at_end, ErrorCounts others = {}, int rank = -1) const;

  const ErrorBudget& run() const { return run_; }
  // A blend's entries' counts, in order; empty otherwise.
  std::vector<EntryCounts> entry_counts() const;

 private:
  std::vector<std::string> names_;
  ErrorBudget run_;
  std::vector<ErrorBudget> entries_;
};

}  // namespace headrace
