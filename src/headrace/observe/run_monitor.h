// RunMonitor: samples a running loader at a fixed interval on a thread of its own, keeps
// the run's timeline (what each stage and the consumer did per interval, for a picture
// over time) and hands each sample to a callback (the progress line).
//
// A run of days keeps a bounded timeline: past `max_points`, adjacent points merge in
// pairs and the interval doubles, so the picture covers the whole run at a coarser grain.
// Sampling builds a RunReport (one engine Metrics() under its lock): ~tens of
// microseconds, once a second by default.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "headrace/pipeline/loader.h"
#include "headrace/observe/report.h"

namespace headrace {

struct RunMonitorOptions {
  double interval_s = 1.0;
  size_t max_points = 512;
  // Called on the monitor's thread after each sample with the report then and the
  // interval's point (samples_per_s 0 when the consumer made no Next() call in it).
  std::function<void(const RunReport&, const TimelinePoint&)> on_sample;
};

// The point between two reports of one run (`before` earlier).
TimelinePoint TimelineStep(const RunReport& before, const RunReport& after);
// Two adjacent points as one (their lengths weighting the rates).
TimelinePoint MergePoints(const TimelinePoint& a, const TimelinePoint& b);

class RunMonitor {
 public:
  // `loader` must outlive the monitor (or its Stop()).
  RunMonitor(const Loader& loader, int64_t baseline_rss_bytes, RunMonitorOptions options);
  ~RunMonitor();
  RunMonitor(const RunMonitor&) = delete;
  RunMonitor& operator=(const RunMonitor&) = delete;

  // Takes a last sample and joins the thread; idempotent.
  void Stop();
  std::vector<TimelinePoint> timeline() const;

 private:
  void Loop();
  void SampleLocked();

  const Loader& loader_;
  const int64_t baseline_rss_bytes_;
  RunMonitorOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool stopped_ = false;
  RunReport last_;
  double interval_s_;
  std::vector<TimelinePoint> timeline_;
  std::thread thread_;
};

}  // namespace headrace
