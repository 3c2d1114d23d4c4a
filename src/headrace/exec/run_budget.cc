#include "headrace/exec/run_budget.h"

#include <utility>

namespace headrace {
namespace {

// The entry a lost sample or a batch's error counts against (the header's rule).
int EntryOfError(const SampleError& e, const EntryOf& entry_of) {
  return e.status.code() == StatusCode::kShardError ? BatchTally::kNoEntry : entry_of(e.index);
}

}  // namespace

RunBudget::RunBudget(RunBudgetOptions options)
    : names_(std::move(options.entries)),
      run_(options.max_error_rate, options.min_samples, options.max_kept_errors) {
  for (size_t s = 0; s < names_.size(); ++s) {
    const std::optional<double> rate = s < options.entry_max_error_rate.size()
                                           ? options.entry_max_error_rate[s]
                                           : std::nullopt;
    // Without a rate of its own an entry is only counted: a rate of 1 never stops a run.
    // One error kept: its message names the first; the report keeps the run's.
    entries_.emplace_back(rate.value_or(1.0), options.min_samples, 1);
  }
}

BatchTally RunBudget::Tally(const Batch& batch, const EntryOf& entry_of, size_t entries) {
  if (!entry_of) entries = 0;
  BatchTally tally;
  tally.delivered = batch.size();
  tally.entry_delivered.assign(entries, 0);
  if (const Tensor* index = batch.Find("index"); index != nullptr && entries > 0) {
    const int64_t* rows = index->data<int64_t>();
    for (int64_t r = 0; r < index->numel(); ++r) {
      ++tally.entry_delivered[static_cast<size_t>(entry_of(rows[r]))];
    }
  }
  tally.errors.reserve(batch.errors.size());
  for (const SampleError& e : batch.errors) {
    tally.errors.push_back(BatchTally::Error{
        std::string(StatusCodeName(e.status.code())),
        entries > 0 ? EntryOfError(e, entry_of) : BatchTally::kNoEntry});
  }
  return tally;
}

void RunBudget::Count(const Batch& batch, const EntryOf& entry_of) {
  run_.Count(batch.size(), batch.errors);
  if (entries_.empty() || !entry_of) return;
  const BatchTally tally = Tally(batch, entry_of, entries_.size());
  std::vector<std::vector<SampleError>> errors(entries_.size());
  for (size_t i = 0; i < batch.errors.size(); ++i) {
    if (tally.errors[i].entry == BatchTally::kNoEntry) continue;
    errors[static_cast<size_t>(tally.errors[i].entry)].push_back(batch.errors[i]);
  }
  for (size_t s = 0; s < entries_.size(); ++s) entries_[s].Count(tally.entry_delivered[s], errors[s]);
}

Status RunBudget::Count(const BatchTally& tally, std::span<const std::string> errors) {
  if (tally.errors.size() != errors.size() ||
      (!tally.entry_delivered.empty() && tally.entry_delivered.size() != entries_.size())) {
    return Status::InvalidArgument(
        "a batch's tally does not match it: " + std::to_string(tally.errors.size()) +
        " errors tallied of " + std::to_string(errors.size()) + ", " +
        std::to_string(tally.entry_delivered.size()) + " entries of " +
        std::to_string(entries_.size()));
  }
  std::vector<std::string> kinds;
  kinds.reserve(tally.errors.size());
  for (const BatchTally::Error& e : tally.errors) kinds.push_back(e.kind);
  run_.CountText(tally.delivered, errors, kinds);
  if (entries_.empty()) return Status::Ok();
  std::vector<std::vector<std::string>> texts(entries_.size()), by_kind(entries_.size());
  for (size_t i = 0; i < errors.size(); ++i) {
    const int entry = tally.errors[i].entry;
    if (entry == BatchTally::kNoEntry) continue;
    if (entry < 0 || static_cast<size_t>(entry) >= entries_.size()) {
      return Status::InvalidArgument("a batch's tally names entry " + std::to_string(entry) +
                                     " of " + std::to_string(entries_.size()));
    }
    texts[static_cast<size_t>(entry)].push_back(errors[i]);
    by_kind[static_cast<size_t>(entry)].push_back(tally.errors[i].kind);
  }
  for (size_t s = 0; s < entries_.size(); ++s) {
    const int64_t delivered = tally.entry_delivered.empty() ? 0 : tally.entry_delivered[s];
    entries_[s].CountText(delivered, texts[s], by_kind[s]);
  }
  return Status::Ok();
}

void RunBudget::CountLost(std::span<const LostSample> lost, const EntryOf& entry_of) {
  run_.CountLost(lost);
  if (entries_.empty() || !entry_of) return;
  for (const LostSample& l : lost) {
    const int entry = EntryOfError(l.error, entry_of);
    if (entry == BatchTally::kNoEntry) continue;
    entries_[static_cast<size_t>(entry)].CountLost(std::span<const LostSample>(&l, 1));
  }
}

Status RunBudget::Check(bool at_end, ErrorCounts others, int rank) const {
  HR_RETURN_IF_ERROR(run_.Check(at_end, others, rank));
  for (size_t s = 0; s < entries_.size(); ++s) {
    Status st = entries_[s].Check(at_end);
    if (st.ok()) continue;
    // The entry's budget speaks of the run's key: name the entry's.
    std::string message = st.message();
    const std::string run_key = "errors.max_error_rate";
    const std::string key = "source.mix[" + std::to_string(s) + "].max_error_rate";
    for (size_t at = message.find(run_key); at != std::string::npos;
         at = message.find(run_key, at + key.size())) {
      message.replace(at, run_key.size(), key);
    }
    return Status(st.code(),
                  "source.mix[" + std::to_string(s) + "] (" + names_[s] + "): " + message);
  }
  return Status::Ok();
}

std::vector<EntryCounts> RunBudget::entry_counts() const {
  std::vector<EntryCounts> out;
  out.reserve(entries_.size());
  for (size_t s = 0; s < entries_.size(); ++s) out.push_back(EntryCounts{names_[s], entries_[s].counts()});
  return out;
}

}  // namespace headrace
