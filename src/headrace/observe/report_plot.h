// A picture of a run report (the JSON `headrace run --report` writes): per-stage
// utilization and the consumer's wait over time, throughput, and memory against the
// budget, as a self-contained SVG, or an HTML page holding it with the report's summary.
//
// Drawn as SVG text by hand: the picture is a few polylines and rectangles, and SVG is
// what every browser shows without a plotting library in the way. A report without a
// timeline (one written before timelines, or a run shorter than one sample) gets bars of
// each stage's busy / starved / blocked time instead.
#pragma once

#include <string>

#include "headrace/core/status.h"

namespace headrace {

enum class PlotFormat { kSvg, kHtml };

// kInvalidArgument when `report_json` is not a run report (naming what is missing).
Result<std::string> PlotRunReport(const std::string& report_json, PlotFormat format);

}  // namespace headrace
