#include "headrace/observe/report_plot.h"

#include <simdjson.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "headrace/core/strings.h"

namespace headrace {
namespace {

struct Series {
  std::string name;
  std::string color;
  std::vector<double> values;
};

struct Report {
  double samples_per_s = 0, wait_time_ratio = 0, elapsed_s = 0;
  int64_t samples = 0;
  std::string bottleneck, advice;
  struct Stage {
    std::string name;
    double busy = 0, starved = 0, blocked = 0, utilization = 0;
  };
  std::vector<Stage> stages;
  std::vector<double> t;
  std::vector<Series> utilization;  // per stage
  std::vector<double> wait, rate, budget;
};

const char* kColors[] = {"#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"};

std::string Escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else if (c == '"') {
      out += "&quot;";
    } else {
      out += c;
    }
  }
  return out;
}

Status Numbers(simdjson::dom::element e, std::vector<double>* out) {
  simdjson::dom::array a;
  if (e.get_array().get(a) != simdjson::SUCCESS) return Status::InvalidArgument("not an array");
  for (simdjson::dom::element v : a) {
    double d = 0;
    if (v.get_double().get(d) != simdjson::SUCCESS) return Status::InvalidArgument("not a number");
    out->push_back(d);
  }
  return Status::Ok();
}

// Reads number `key` of `e` into `out` when present; leaves it otherwise.
void Optional(simdjson::dom::element e, const char* key, double* out) {
  double v = 0;
  if (e[key].get_double().get(v) == simdjson::SUCCESS) *out = v;
}

Result<Report> Parse(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json.data(), json.size()).get(doc) != simdjson::SUCCESS || !doc.is_object()) {
    return Status::InvalidArgument("not JSON: expected a run report (headrace run --report)");
  }
  Report r;
  double samples = 0;
  if (doc["samples_per_s"].get_double().get(r.samples_per_s) != simdjson::SUCCESS ||
      doc["wait_time_ratio"].get_double().get(r.wait_time_ratio) != simdjson::SUCCESS ||
      doc["samples"].get_double().get(samples) != simdjson::SUCCESS) {
    return Status::InvalidArgument(
        "not a run report: samples, samples_per_s and wait_time_ratio are missing");
  }
  r.samples = static_cast<int64_t>(samples);
  Optional(doc, "elapsed_s", &r.elapsed_s);
  std::string_view text;
  if (doc["bottleneck"].get_string().get(text) == simdjson::SUCCESS) r.bottleneck = text;
  if (doc["advice"].get_string().get(text) == simdjson::SUCCESS) r.advice = text;
  simdjson::dom::array stages;
  if (doc["stages"].get_array().get(stages) == simdjson::SUCCESS) {
    for (simdjson::dom::element s : stages) {
      Report::Stage st;
      if (s["name"].get_string().get(text) == simdjson::SUCCESS) st.name = text;
      Optional(s, "busy_s", &st.busy);
      Optional(s, "starved_s", &st.starved);
      Optional(s, "blocked_s", &st.blocked);
      Optional(s, "utilization", &st.utilization);
      r.stages.push_back(std::move(st));
    }
  }
  simdjson::dom::object timeline;
  if (doc["timeline"].get_object().get(timeline) == simdjson::SUCCESS) {
    std::vector<std::string> names;
    simdjson::dom::array a;
    if (timeline["stages"].get_array().get(a) == simdjson::SUCCESS) {
      for (simdjson::dom::element n : a) {
        if (n.get_string().get(text) == simdjson::SUCCESS) names.emplace_back(text);
      }
    }
    const auto column = [&](const char* key, std::vector<double>* out) {
      simdjson::dom::element e;
      if (timeline[key].get(e) != simdjson::SUCCESS) {
        return Status::InvalidArgument(std::string(key) + " is missing");
      }
      return Numbers(e, out).WithContext(key);
    };
    Status ok = column("t_s", &r.t);
    if (ok.ok()) ok = column("wait_ratio", &r.wait);
    if (ok.ok()) ok = column("samples_per_s", &r.rate);
    if (ok.ok()) ok = column("budget_used", &r.budget);
    if (ok.ok() && timeline["utilization"].get_array().get(a) == simdjson::SUCCESS) {
      size_t i = 0;
      for (simdjson::dom::element per_stage : a) {
        Series s{i < names.size() ? names[i] : "stage " + std::to_string(i),
                 kColors[i % std::size(kColors)],
                 {}};
        if (ok.ok()) ok = Numbers(per_stage, &s.values);
        r.utilization.push_back(std::move(s));
        ++i;
      }
    }
    if (!ok.ok()) return Status::InvalidArgument("timeline: " + ok.message());
    for (const auto* v : {&r.wait, &r.rate, &r.budget}) {
      if (v->size() != r.t.size()) {
        return Status::InvalidArgument("timeline: columns of different lengths");
      }
    }
  }
  return r;
}

// An x/y panel at (x, y) of w × h: axes, a title, ticks at the ends.
class Panel {
 public:
  Panel(std::string* svg, double x, double y, double w, double h, double t_max, double y_max)
      : svg_(svg), x_(x), y_(y), w_(w), h_(h), t_max_(std::max(t_max, 1e-9)),
        y_max_(std::max(y_max, 1e-9)) {}

  void Axes(const std::string& title, const std::string& y_label_max) {
    *svg_ += "<rect x=\"" + StrFormat("%.1f", x_) + "\" y=\"" + StrFormat("%.1f", y_) + "\" width=\"" +
             StrFormat("%.1f", w_) + "\" height=\"" + StrFormat("%.1f", h_) +
             "\" fill=\"#fafafa\" stroke=\"#999\"/>\n";
    Text(x_, y_ - 6, title, "start", 13, "bold");
    Text(x_ - 4, y_ + 10, y_label_max, "end", 11);
    Text(x_ - 4, y_ + h_, "0", "end", 11);
    Text(x_ + w_, y_ + h_ + 14, StrFormat("%.0f s", t_max_), "end", 11);
  }
  void Line(const std::vector<double>& t, const std::vector<double>& v, const std::string& color,
            bool filled) {
    if (t.empty()) return;
    std::string points;
    if (filled) points += StrFormat("%.1f,", X(t.front())) + StrFormat("%.1f ", Y(0));
    for (size_t i = 0; i < t.size() && i < v.size(); ++i) {
      points += StrFormat("%.1f,", X(t[i])) + StrFormat("%.1f ", Y(v[i]));
    }
    if (filled) points += StrFormat("%.1f,", X(t.back())) + StrFormat("%.1f", Y(0));
    *svg_ += filled ? "<polygon fill=\"" + color + "\" fill-opacity=\"0.25\" stroke=\"none\""
                    : "<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1.5\"";
    *svg_ += " points=\"" + points + "\"/>\n";
  }
  void Text(double x, double y, const std::string& s, const char* anchor, int size,
            const char* weight = "normal") {
    *svg_ += "<text x=\"" + StrFormat("%.1f", x) + "\" y=\"" + StrFormat("%.1f", y) + "\" text-anchor=\"" +
             anchor + "\" font-size=\"" + std::to_string(size) + "\" font-weight=\"" + weight +
             "\">" + Escape(s) + "</text>\n";
  }
  void Legend(double x, double y, const std::string& name, const std::string& color) {
    *svg_ += "<rect x=\"" + StrFormat("%.1f", x) + "\" y=\"" + StrFormat("%.1f", y - 9) +
             "\" width=\"10\" height=\"10\" fill=\"" + color + "\"/>\n";
    Text(x + 14, y, name, "start", 11);
  }

 private:
  double X(double t) const { return x_ + w_ * std::clamp(t / t_max_, 0.0, 1.0); }
  double Y(double v) const { return y_ + h_ * (1 - std::clamp(v / y_max_, 0.0, 1.0)); }
  std::string* svg_;
  double x_, y_, w_, h_, t_max_, y_max_;
};

std::string Svg(const Report& r) {
  constexpr double kWidth = 900, kLeft = 70, kPlotW = 640, kPanelH = 150;
  const bool timeline = !r.t.empty();
  const double height = timeline ? 3 * (kPanelH + 60) + 70 : 90 + 40.0 * r.stages.size() + 60;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + StrFormat("%.0f", kWidth) +
                    "\" height=\"" + StrFormat("%.0f", height) +
                    "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" "
                    "fill=\"white\"/>\n";
  Panel header(&svg, kLeft, 0, kPlotW, 0, 1, 1);
  header.Text(kLeft, 24,
              "headrace run: " + std::to_string(r.samples) + " samples, " +
                  StrFormat("%.1f samples/s", r.samples_per_s) + ", trainer waits " +
                  StrFormat("%.1f%%", 100 * r.wait_time_ratio) + ", bottleneck " +
                  (r.bottleneck.empty() ? "?" : r.bottleneck),
              "start", 15, "bold");
  if (!timeline) {
    // Totals only: one bar per stage, busy / starved / blocked.
    double y = 70;
    header.Text(kLeft, y - 14, "stage time (no timeline in this report): busy, starved, blocked",
                "start", 13, "bold");
    for (const Report::Stage& s : r.stages) {
      const double total = std::max(1e-9, s.busy + s.starved + s.blocked);
      double x = kLeft + 60;
      header.Text(kLeft + 52, y + 14, s.name, "end", 12);
      for (const auto& [v, color] : {std::pair{s.busy, "#2ca02c"}, std::pair{s.starved, "#bbbbbb"},
                                     std::pair{s.blocked, "#d62728"}}) {
        const double w = (kPlotW - 60) * v / total;
        svg += "<rect x=\"" + StrFormat("%.1f", x) + "\" y=\"" + StrFormat("%.1f", y) + "\" width=\"" +
               StrFormat("%.1f", w) + "\" height=\"20\" fill=\"" + color + "\"/>\n";
        x += w;
      }
      header.Text(kLeft + kPlotW + 8, y + 14, StrFormat("%.0f%% busy", 100 * s.utilization), "start",
                  11);
      y += 40;
    }
    header.Legend(kLeft + 60, y + 10, "busy", "#2ca02c");
    header.Legend(kLeft + 140, y + 10, "starved", "#bbbbbb");
    header.Legend(kLeft + 230, y + 10, "blocked", "#d62728");
    return svg + "</svg>\n";
  }
  const double t_max = r.t.back();
  double y = 70;
  Panel util(&svg, kLeft, y, kPlotW, kPanelH, t_max, 1.0);
  util.Axes("stage utilization and the trainer's wait, per interval", "100%");
  util.Line(r.t, r.wait, "#d62728", /*filled=*/true);
  double legend_y = y + 12;
  util.Legend(kLeft + kPlotW + 14, legend_y, "trainer waiting", "#d62728");
  for (const Series& s : r.utilization) {
    util.Line(r.t, s.values, s.color, false);
    legend_y += 16;
    util.Legend(kLeft + kPlotW + 14, legend_y, s.name + " busy", s.color);
  }
  y += kPanelH + 60;
  const double rate_max = *std::max_element(r.rate.begin(), r.rate.end());
  Panel rate(&svg, kLeft, y, kPlotW, kPanelH, t_max, rate_max * 1.1);
  rate.Axes("samples/s delivered", StrFormat("%.0f", rate_max * 1.1));
  rate.Line(r.t, r.rate, "#1f77b4", false);
  y += kPanelH + 60;
  const double budget_max = std::max(1.0, *std::max_element(r.budget.begin(), r.budget.end()));
  Panel budget(&svg, kLeft, y, kPlotW, kPanelH, t_max, budget_max);
  budget.Axes("memory in flight / memory.budget_bytes", StrFormat("%.0f%%", 100 * budget_max));
  budget.Line(r.t, r.budget, "#9467bd", true);
  return svg + "</svg>\n";
}

}  // namespace

Result<std::string> PlotRunReport(const std::string& report_json, PlotFormat format) {
  HR_ASSIGN_OR_RETURN(Report r, Parse(report_json));
  const std::string svg = Svg(r);
  if (format == PlotFormat::kSvg) return svg;
  std::string html =
      "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>headrace run</title>"
      "<style>body{font-family:sans-serif;margin:2em}td{padding:2px 12px}</style></head>"
      "<body>\n" +
      svg + "<table>\n";
  html += "<tr><td>samples</td><td>" + std::to_string(r.samples) + "</td></tr>\n";
  html += "<tr><td>elapsed</td><td>" + StrFormat("%.2f s", r.elapsed_s) + "</td></tr>\n";
  html += "<tr><td>throughput</td><td>" + StrFormat("%.1f samples/s", r.samples_per_s) + "</td></tr>\n";
  html += "<tr><td>wait-time ratio</td><td>" + StrFormat("%.2f%%", 100 * r.wait_time_ratio) +
          "</td></tr>\n";
  for (const Report::Stage& s : r.stages) {
    html += "<tr><td>stage " + Escape(s.name) + "</td><td>" +
            StrFormat("%.0f%% busy", 100 * s.utilization) + StrFormat(", %.2f s starved", s.starved) +
            StrFormat(", %.2f s blocked", s.blocked) + "</td></tr>\n";
  }
  html += "<tr><td>bottleneck</td><td>" + Escape(r.bottleneck) + "</td></tr>\n";
  html += "<tr><td>advice</td><td>" + Escape(r.advice) + "</td></tr>\n</table>\n</body></html>\n";
  return html;
}

}  // namespace headrace
