#include "headrace/observe/run_monitor.h"

#include <algorithm>
#include <chrono>

namespace headrace {

TimelinePoint TimelineStep(const RunReport& before, const RunReport& after) {
  TimelinePoint p;
  p.t_s = after.elapsed_s;
  p.dt_s = std::max(0.0, after.elapsed_s - before.elapsed_s);
  if (p.dt_s > 0) {
    p.samples_per_s = static_cast<double>(after.samples - before.samples) / p.dt_s;
  }
  const double waited = after.consumer_wait_s - before.consumer_wait_s;
  const double loop = waited + (after.consumer_busy_s - before.consumer_busy_s);
  p.wait_ratio = loop > 0 ? std::clamp(waited / loop, 0.0, 1.0) : 0.0;
  // Before the first batch the consumer's whole time is the cold start's wait.
  if (after.batches == 0) p.wait_ratio = 1.0;
  for (size_t i = 0; i < after.stages.size(); ++i) {
    const double busy_before = i < before.stages.size() ? before.stages[i].metrics.busy_s : 0.0;
    const double busy = after.stages[i].metrics.busy_s - busy_before;
    p.utilization.push_back(p.dt_s > 0 ? std::clamp(busy / p.dt_s, 0.0, 1.0) : 0.0);
  }
  p.budget_used = after.memory_budget_bytes > 0
                      ? static_cast<double>(after.budget_used_bytes) /
                            static_cast<double>(after.memory_budget_bytes)
                      : 0.0;
  p.rss_bytes = static_cast<double>(after.rss_bytes);
  p.heap_system_bytes = static_cast<double>(after.heap.system_bytes);
  p.heap_in_use_bytes = static_cast<double>(after.heap.in_use_bytes);
  p.regions_mapped_bytes = static_cast<double>(after.regions_mapped_bytes);
  return p;
}

TimelinePoint MergePoints(const TimelinePoint& a, const TimelinePoint& b) {
  TimelinePoint m;
  m.t_s = b.t_s;
  m.dt_s = a.dt_s + b.dt_s;
  const auto mean = [&](double x, double y) {
    return m.dt_s > 0 ? (x * a.dt_s + y * b.dt_s) / m.dt_s : (x + y) / 2;
  };
  m.samples_per_s = mean(a.samples_per_s, b.samples_per_s);
  m.wait_ratio = mean(a.wait_ratio, b.wait_ratio);
  m.budget_used = std::max(a.budget_used, b.budget_used);
  // Memory at the later point: how it stands, as a point of its own would say.
  m.rss_bytes = b.rss_bytes;
  m.heap_system_bytes = b.heap_system_bytes;
  m.heap_in_use_bytes = b.heap_in_use_bytes;
  m.regions_mapped_bytes = b.regions_mapped_bytes;
  m.utilization.resize(std::max(a.utilization.size(), b.utilization.size()));
  for (size_t i = 0; i < m.utilization.size(); ++i) {
    m.utilization[i] = mean(i < a.utilization.size() ? a.utilization[i] : 0.0,
                            i < b.utilization.size() ? b.utilization[i] : 0.0);
  }
  return m;
}

RunMonitor::RunMonitor(const Loader& loader, int64_t baseline_rss_bytes,
                       RunMonitorOptions options)
    : loader_(loader),
      baseline_rss_bytes_(baseline_rss_bytes),
      options_(std::move(options)),
      interval_s_(std::max(0.01, options_.interval_s)) {
  options_.max_points = std::max<size_t>(options_.max_points, 2);
  thread_ = std::thread([this] { Loop(); });
}

RunMonitor::~RunMonitor() { Stop(); }

void RunMonitor::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::unique_lock lock(mu_);
  SampleLocked();
  stopped_ = true;
}

std::vector<TimelinePoint> RunMonitor::timeline() const {
  std::lock_guard lock(mu_);
  return timeline_;
}

void RunMonitor::Loop() {
  std::unique_lock lock(mu_);
  while (true) {
    const auto wait = std::chrono::duration<double>(interval_s_);
    if (cv_.wait_for(lock, wait, [&] { return stop_; })) return;
    SampleLocked();
  }
}

void RunMonitor::SampleLocked() {
  RunReport now = BuildRunReport(loader_, baseline_rss_bytes_);
  // The consumer's clock moves at its Next() calls: no call since, no new point (a cold
  // start, a long step), but the callback still hears that nothing moved.
  const bool moved = now.elapsed_s > last_.elapsed_s;
  TimelinePoint point = TimelineStep(last_, now);
  if (!moved) {
    if (options_.on_sample) options_.on_sample(now, point);
    return;
  }
  timeline_.push_back(point);
  if (timeline_.size() > options_.max_points) {
    std::vector<TimelinePoint> merged;
    for (size_t i = 0; i + 1 < timeline_.size(); i += 2) {
      merged.push_back(MergePoints(timeline_[i], timeline_[i + 1]));
    }
    if (timeline_.size() % 2 == 1) merged.push_back(timeline_.back());
    timeline_ = std::move(merged);
    interval_s_ *= 2;
  }
  last_ = std::move(now);
  if (options_.on_sample) {
    // The callback may print; the lock keeps samples in order and Stop() waits for it.
    options_.on_sample(last_, point);
  }
}

}  // namespace headrace
