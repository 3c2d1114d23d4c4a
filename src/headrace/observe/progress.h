// The progress of a run, one line: on a terminal rewritten in place, elsewhere (a log
// file, CI) a plain line every `period_s` seconds.
//
//   12.0 s  3,808 samples  317 samples/s  wait 2.1%  bottleneck trainer  batch 119/200  ETA 0:08
//
// The rate is smoothed over the last samples (exponentially, a few seconds); the ETA is
// shown when the run's length is known (epochs, or `headrace run --max-batches`).
#pragma once

#include <cstdio>
#include <string>

#include "headrace/observe/report.h"

namespace headrace {

// The line's text (no newline); `rate` is the smoothed samples/s, `limit_batches` the
// run's batches when known (-1: unbounded).
std::string ProgressLine(const RunReport& report, double rate, int64_t limit_batches);

class ProgressPrinter {
 public:
  // `live`: rewrite one line (a terminal); else print a line each `period_s`.
  ProgressPrinter(std::FILE* out, bool live, double period_s, int64_t limit_batches);
  // A sample of the run (RunMonitorOptions::on_sample).
  void Update(const RunReport& report, const TimelinePoint& point);
  // Ends the live line (clears it), so what is printed next starts on a clean line.
  void Finish();

 private:
  std::FILE* out_;
  const bool live_;
  const double period_s_;
  const int64_t limit_batches_;
  double rate_ = -1;        // smoothed samples/s; -1 before the first interval
  double printed_at_ = 0;   // elapsed_s of the last plain line
  bool shown_ = false;      // a live line is on screen
};

}  // namespace headrace
