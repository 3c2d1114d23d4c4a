// headrace report REPORT.json --plot OUT.svg|OUT.html: a picture of a run report.
#include <cstdio>
#include <string>

#include "commands.h"
#include "headrace/observe/report_plot.h"

namespace headrace::tools {

int ReportCommand(const Args& args) {
  constexpr const char* kUsage =
      "usage: headrace report REPORT.json --plot OUT.svg|OUT.html\n"
      "  draws per-stage utilization and the trainer's wait over time, throughput and\n"
      "  memory against the budget, from `headrace run --report`'s JSON\n";
  std::string report_path, plot_path;
  ArgReader r{args};
  while (!r.done()) {
    const std::string flag = r.peek();
    if (flag == "--plot") {
      if (!r.Value(flag, &plot_path)) return 2;
    } else if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!flag.empty() && flag[0] == '-') {
      std::fprintf(stderr, "headrace report: unknown flag '%s' (allowed: --plot)\n%s",
                   flag.c_str(), kUsage);
      return 2;
    } else if (report_path.empty()) {
      report_path = flag, ++r.i;
    } else {
      std::fprintf(stderr, "headrace report: unexpected argument '%s'\n%s", flag.c_str(), kUsage);
      return 2;
    }
  }
  if (report_path.empty() || plot_path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const auto ends_with = [&](const char* suffix) {
    const std::string s = suffix;
    return plot_path.size() > s.size() && plot_path.compare(plot_path.size() - s.size(), s.size(), s) == 0;
  };
  PlotFormat format;
  if (ends_with(".svg")) {
    format = PlotFormat::kSvg;
  } else if (ends_with(".html") || ends_with(".htm")) {
    format = PlotFormat::kHtml;
  } else {
    std::fprintf(stderr,
                 "headrace report: --plot %s: the name must end in .svg or .html (the formats "
                 "drawn)\n",
                 plot_path.c_str());
    return 2;
  }
  if (!CheckWritable("headrace report", "--plot", plot_path)) return 2;
  std::string json;
  if (!ReadSmallFile("headrace report", "REPORT", report_path, &json)) return 2;
  auto picture = PlotRunReport(json, format);
  if (!picture.ok()) {
    std::fprintf(stderr, "headrace report: %s: %s\n", report_path.c_str(),
                 picture.status().message().c_str());
    return 2;
  }
  if (!WriteTextFile(plot_path, *picture)) return 1;
  std::printf("headrace report: wrote %s\n", plot_path.c_str());
  return 0;
}

}  // namespace headrace::tools
