#include "headrace/core/histogram.h"

#include <algorithm>

namespace headrace {

void LatencyHistogram::Record(int64_t nanos) {
  const double seconds = static_cast<double>(std::max<int64_t>(nanos, 0)) * 1e-9;
  const auto bucket = std::lower_bound(kBounds.begin(), kBounds.end(), seconds) - kBounds.begin();
  counts_[static_cast<size_t>(bucket)].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(std::max<int64_t>(nanos, 0), std::memory_order_relaxed);
}

HistogramSnapshot LatencyHistogram::Snapshot() const {
  HistogramSnapshot s;
  s.bounds.assign(kBounds.begin(), kBounds.end());
  s.counts.resize(counts_.size());
  for (size_t i = 0; i < counts_.size(); ++i) {
    s.counts[i] = counts_[i].load(std::memory_order_relaxed);
    s.count += s.counts[i];
  }
  s.sum_s = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return s;
}

void HistogramSnapshot::Merge(const HistogramSnapshot& other) {
  if (other.counts.empty()) return;
  if (counts.empty()) {
    *this = other;
    return;
  }
  for (size_t i = 0; i < counts.size() && i < other.counts.size(); ++i) {
    counts[i] += other.counts[i];
  }
  count += other.count;
  sum_s += other.sum_s;
}

double HistogramSnapshot::Quantile(double q) const {
  if (count == 0 || bounds.empty()) return 0.0;
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(count);
  double below = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const auto in_bucket = static_cast<double>(counts[i]);
    if (in_bucket > 0 && below + in_bucket >= rank) {
      if (i == bounds.size()) return bounds.back();
      const double lower = i == 0 ? 0.0 : bounds[i - 1];
      return lower + (bounds[i] - lower) * std::max(0.0, rank - below) / in_bucket;
    }
    below += in_bucket;
  }
  return bounds.back();
}

}  // namespace headrace
