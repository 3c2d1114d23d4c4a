// ErrorBudget: when a run has had too many bad samples (errors.max_error_rate past
// errors.min_samples, or at an epoch's end). One rule for every consumer: the engine
// applies it to the batches it delivers in order; a Ray rank (python/headrace/ray)
// applies it through the bindings to the batches it consumes, merged with what the
// other ranks consumed (the coordinator's journal), so the budget is the run's. A blend
// entry's own rate is one more ErrorBudget: RunBudget (exec/run_budget.h) holds the run's
// and the entries' and counts each batch into them once.
//
// Counts are taken at delivery, in batch order, so whether and where a run stops never
// depends on which thread finished first. Not thread-safe: its owner guards it.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/sample.h"
#include "headrace/core/status.h"

namespace headrace {

// Samples consumed: delivered in batches, and failed (skipped, counted by kind).
struct ErrorCounts {
  int64_t delivered = 0;
  int64_t failed = 0;
  int64_t attempted() const { return delivered + failed; }
};

// A sample its consumer lost after its batch was delivered: a packer's skip, cut or
// failure (exec/packer.h), its error of kind pack_skipped, pack_truncated or the failure's.
// Data lost is counted as a failed sample, against the same errors.max_error_rate.
struct LostSample {
  SampleError error;
  // Whether the delivery had counted it delivered (the packer had it: it moves from
  // delivered to failed); false: it never ran (a planned pack left it out), so it is one
  // more sample attempted.
  bool was_delivered = true;
};

class ErrorBudget {
 public:
  ErrorBudget(double max_error_rate, int64_t min_samples, int max_kept_errors = 20);

  // A delivered batch: its `delivered` rows and its errors (kept in full, up to
  // max_kept_errors, and counted by kind).
  void Count(int64_t delivered, std::span<const SampleError> errors);
  // The same for a consumer that has a batch's errors as text (a Ray rank): each counts,
  // by its kind in `kinds` (the same order; empty: not by kind).
  void CountText(int64_t delivered, std::span<const std::string> errors,
                 std::span<const std::string> kinds = {});
  // Samples lost after delivery (see LostSample), in delivery order: each counted failed,
  // by kind, kept as Count keeps errors.
  void CountLost(std::span<const LostSample> lost);

  const ErrorCounts& counts() const { return counts_; }
  const std::map<std::string, int64_t>& by_kind() const { return by_kind_; }
  const std::vector<SampleError>& first_errors() const { return first_errors_; }

  // Ok while the run is within budget; kResourceExhausted naming the counts, the rate,
  // the limit, the kinds and the first error once it is not. The run's counts are this
  // budget's plus `others` (the other ranks'); `rank` >= 0 names this rank's own share in
  // the message. `at_end`: an epoch's end, where the verdict does not wait for
  // min_samples (a run must not go on for epochs with every sample failing).
  Status Check(bool at_end, ErrorCounts others = {}, int rank = -1) const;

 private:
  double max_error_rate_;
  int64_t min_samples_;
  int max_kept_errors_;
  ErrorCounts counts_;
  std::map<std::string, int64_t> by_kind_;
  std::vector<SampleError> first_errors_;
  std::string first_text_;  // the first error ever counted, for the message
};

}  // namespace headrace
