#include "headrace/observe/doctor_findings.h"

#include "headrace/core/strings.h"

namespace headrace {

void AddPackLoss(const RunReport& r, Diagnosis& d) {
  const int64_t lost = r.pack.skipped + r.pack.truncated + r.pack.failed;
  if (!r.packed || lost == 0) return;
  const char* key = r.pack_budget ? "batch.max_tokens" : "batch.pack.seq_len";
  d.evidence.push_back({"pack_samples_skipped", static_cast<double>(r.pack.skipped), "samples"});
  d.evidence.push_back(
      {"pack_samples_truncated", static_cast<double>(r.pack.truncated), "samples"});
  d.evidence.push_back({"pack_samples_failed", static_cast<double>(r.pack.failed), "samples"});
  d.advice.push_back(
      {"", 0, 0,
       StrFormat("data lost to packing: of the samples longer than %s %lld, %lld were "
                 "skipped, %lld truncated and %lld failed (a cut through vision tokens), "
                 "counted as errors against errors.max_error_rate (kinds pack_skipped, "
                 "pack_truncated); raise %s to the longest samples' tokens, or lower their "
                 "images' max_pixels",
                 key, static_cast<long long>(r.pack_seq_len),
                 static_cast<long long>(r.pack.skipped), static_cast<long long>(r.pack.truncated),
                 static_cast<long long>(r.pack.failed), key)});
}

void AddImbalance(const RunReport& r, Diagnosis& d) {
  if (!r.balanced || r.balance.steps == 0) return;
  const BalanceSeen& b = r.balance;
  const double idle = IdleShare(b.mean, b.max_after);
  const double ordered = IdleShare(b.mean, b.max_before);
  d.evidence.push_back({"balance_idle_ratio", idle, "ratio"});
  d.evidence.push_back({"balance_idle_ratio_ordered", ordered, "ratio"});
  d.evidence.push_back({"balance_short_ranks", static_cast<double>(b.short_ranks), "steps"});
  // Idle at the barrier is every GPU's time, as a wait for data is: name it when it is
  // the larger of the two.
  if (idle <= r.wait_time_ratio) return;
  d.advice.push_back(
      {"", 0, 0,
       StrFormat("the ranks' steps are uneven: every GPU idles %.1f%% of a step at the "
                 "barrier for the slowest rank (%.1f%% as the order dealt the steps, over "
                 "%lld steps), more than the %.1f%% the trainer waits for data; give the deal "
                 "room with more samples per rank a step (batch.size), or a "
                 "batch.balance.cost that fits the model (a preset or its dimensions rather "
                 "than tokens)",
                 100 * idle, 100 * ordered, static_cast<long long>(b.steps),
                 100 * r.wait_time_ratio)});
}

}  // namespace headrace
