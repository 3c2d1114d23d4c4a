#include "headrace/exec/error_budget.h"

#include <cstdio>

namespace headrace {
namespace {

std::string Percent(double v, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*g%%", digits, v * 100);
  return std::string(text);
}

}  // namespace

ErrorBudget::ErrorBudget(double max_error_rate, int64_t min_samples, int max_kept_errors)
    : max_error_rate_(max_error_rate),
      min_samples_(min_samples),
      max_kept_errors_(max_kept_errors) {}

void ErrorBudget::Count(int64_t delivered, std::span<const SampleError> errors) {
  counts_.delivered += delivered;
  counts_.failed += static_cast<int64_t>(errors.size());
  if (first_text_.empty() && !errors.empty()) first_text_ = errors.front().ToString();
  for (const SampleError& e : errors) {
    ++by_kind_[std::string(StatusCodeName(e.status.code()))];
    if (static_cast<int>(first_errors_.size()) < max_kept_errors_) first_errors_.push_back(e);
  }
}

void ErrorBudget::CountText(int64_t delivered, std::span<const std::string> errors,
                            std::span<const std::string> kinds) {
  counts_.delivered += delivered;
  counts_.failed += static_cast<int64_t>(errors.size());
  if (first_text_.empty() && !errors.empty()) first_text_ = errors.front();
  for (const std::string& kind : kinds) ++by_kind_[kind];
}

void ErrorBudget::CountLost(std::span<const LostSample> lost) {
  for (const LostSample& l : lost) {
    if (l.was_delivered) --counts_.delivered;
    ++counts_.failed;
    ++by_kind_[std::string(StatusCodeName(l.error.status.code()))];
    if (first_text_.empty()) first_text_ = l.error.ToString();
    if (static_cast<int>(first_errors_.size()) < max_kept_errors_) first_errors_.push_back(l.error);
  }
}

Status ErrorBudget::Check(bool at_end, ErrorCounts others, int rank) const {
  const int64_t failed = counts_.failed + others.failed;
  const int64_t attempted = counts_.attempted() + others.attempted();
  if (failed == 0 || attempted == 0) return Status::Ok();
  if (!at_end && attempted < min_samples_) return Status::Ok();
  const double rate = static_cast<double>(failed) / static_cast<double>(attempted);
  if (rate <= max_error_rate_) return Status::Ok();
  int digits = 3;  // more only where 3 would print the rate equal to the limit it exceeds
  while (digits < 17 && Percent(rate, digits) == Percent(max_error_rate_, digits)) ++digits;
  const bool run_wide = rank >= 0 || others.attempted() > 0;
  std::string message = "too many bad samples: " + std::to_string(failed) + " of " +
                        std::to_string(attempted) + " samples " +
                        (run_wide ? "of the run " : "") + "failed (" + Percent(rate, digits) +
                        "), above errors.max_error_rate " + Percent(max_error_rate_, digits);
  if (rank >= 0) {
    message += " (rank " + std::to_string(rank) + ": " + std::to_string(counts_.failed) +
               " of " + std::to_string(counts_.attempted()) + ")";
  }
  if (!by_kind_.empty()) {
    message += "; by kind:";
    for (const auto& [kind, count] : by_kind_) message += " " + kind + "=" + std::to_string(count);
  }
  if (by_kind_.count("pack_skipped") > 0 || by_kind_.count("pack_truncated") > 0) {
    message += " (pack_skipped, pack_truncated: samples longer than batch.pack.seq_len or "
               "batch.max_tokens, left out or cut by the packer: raise it, choose the other "
               "batch.pack.overflow, or raise errors.max_error_rate to accept the loss)";
  }
  if (!first_text_.empty()) {
    message += "; first: " + first_text_;
  } else if (counts_.failed == 0) {
    message += "; first: (on another rank)";
  }
  return Status::ResourceExhausted(std::move(message));
}

}  // namespace headrace
