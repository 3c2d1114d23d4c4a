// The Prometheus text exposition (format 0.0.4) of a run: what a metrics endpoint serves.
//
// Every metric starts with `headrace_` and carries the constant labels the caller gives
// (node, rank, role: what tells one worker's series from another's in a cluster). Counters
// end in `_total` and only grow while a loader lives; gauges are values now; histograms
// are the engine's latency histograms (core/histogram.h) with cumulative `le` buckets in
// seconds. See README.md for the list.
#pragma once

#include <map>
#include <string>

#include "headrace/observe/report.h"

namespace headrace {

using MetricLabels = std::map<std::string, std::string>;

std::string PrometheusText(const RunReport& report, const MetricLabels& labels);

// `value` escaped for a label value (backslash, double quote, newline).
std::string PrometheusEscape(const std::string& value);

}  // namespace headrace
