// LatencyHistogram: a fixed-bucket histogram of durations that many threads record into
// without a lock, and its Snapshot, a plain value that merges (one per worker adds up to
// the run's) and answers quantiles.
//
// The buckets are Prometheus' convention: upper bounds in seconds, each count holding the
// observations <= its bound and > the bound before, the last one (+Inf) the rest. The
// bounds, 50 us to 60 s in steps of about 2.5x, cover a cached local read to a throttled
// object-store retry; a quantile inside a bucket is interpolated linearly, so it is
// exact to the bucket's width (what Prometheus' histogram_quantile does too).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace headrace {

struct HistogramSnapshot {
  std::vector<double> bounds;   // upper bounds in seconds, ascending; +Inf implied last
  std::vector<int64_t> counts;  // bounds.size() + 1: per bucket, not cumulative
  int64_t count = 0;
  double sum_s = 0;

  // Adds `other` (same bounds, or this one empty).
  void Merge(const HistogramSnapshot& other);
  // The q-quantile (0..1) in seconds, interpolated in its bucket; 0 when empty. In the
  // +Inf bucket it answers the largest finite bound.
  double Quantile(double q) const;
  double Mean() const { return count > 0 ? sum_s / static_cast<double>(count) : 0.0; }
};

class LatencyHistogram {
 public:
  static constexpr std::array<double, 18> kBounds = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,    0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0, 60.0};

  LatencyHistogram() = default;
  LatencyHistogram(const LatencyHistogram&) = delete;
  LatencyHistogram& operator=(const LatencyHistogram&) = delete;

  // Safe from any thread; two relaxed atomic adds and one bucket search.
  void Record(int64_t nanos);
  HistogramSnapshot Snapshot() const;

 private:
  std::array<std::atomic<int64_t>, kBounds.size() + 1> counts_{};
  std::atomic<int64_t> sum_ns_{0};
};

}  // namespace headrace
