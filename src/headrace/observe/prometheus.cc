// The exposition: a walk of the report's schema (report_schema.h) that files each
// exported field's samples under its family, then writes the families in their order.
#include "headrace/observe/prometheus.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "headrace/observe/report_schema.h"

namespace headrace {
namespace report_internal {
namespace {

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string Label(std::string_view key, const std::string& value) {
  return std::string(key) + "=\"" + PrometheusEscape(value) + "\"";
}

// "a", "b" -> "a,b"; either may be empty.
std::string Join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "," + b;
}

class Exposition {
 public:
  explicit Exposition(const MetricLabels& labels) {
    for (const auto& [k, v] : labels) base_ = Join(base_, Label(k, v));
  }

  template <typename T>
  void Field(std::string_view, const T& value, const auto&... options) {
    const FieldOptions o = Options(options...);
    if (!o.written) return;
    if constexpr (std::is_convertible_v<const T&, std::string>) {
      if (!o.label.empty()) item_ = Join(item_, Label(o.label, value));
    }
    if (o.metric.family == Family::kNone) return;
    std::string& out = samples_[static_cast<size_t>(o.metric.family)];
    const std::string_view name = kFamilies[static_cast<size_t>(o.metric.family)].name;
    if constexpr (std::is_same_v<T, std::map<std::string, int64_t>>) {
      for (const auto& [key, n] : value) {
        Sample(out, name, static_cast<double>(n), Label(o.metric.label, key));
      }
    } else if constexpr (std::is_same_v<T, HistogramSnapshot>) {
      Histogram(out, std::string(name), value);
    } else if constexpr (std::is_arithmetic_v<T>) {
      Sample(out, name, static_cast<double>(value),
             o.metric.label.empty() ? "" : Label(o.metric.label, std::string(o.metric.value)));
    }
  }
  void Section(std::string_view, bool present, auto&& body) {
    if (present) body();
  }
  template <typename T>
  void List(std::string_view, const std::vector<T>& items, const auto&... options) {
    const FieldOptions o = Options(options...);
    if (!o.written) return;
    for (const T& item : items) {
      item_.clear();
      Fields(item, *this);
    }
    item_.clear();
  }
  template <typename T>
  void Keyed(std::string_view, const std::vector<T>& items, std::string T::*name,
             std::string_view label) {
    for (const T& item : items) {
      item_ = Label(label, item.*name);
      Fields(item, *this);
    }
    item_.clear();
  }
  void KeyedBy(std::string_view, std::string_view, bool, int64_t) {}

  // Each family with its HELP and TYPE lines, then its samples.
  std::string str() const {
    std::string out;
    for (size_t i = 0; i < samples_.size(); ++i) {
      const FamilyInfo& f = kFamilies[i];
      if (samples_[i].empty() && !f.always) continue;
      out += "# HELP " + std::string(f.name) + " " + std::string(f.help) + "\n# TYPE " +
             std::string(f.name) + " " + std::string(f.type) + "\n" + samples_[i];
    }
    return out;
  }

 private:
  // One sample; `extra` is the field's own label (state="busy"), after the item's.
  void Sample(std::string& out, std::string_view name, double value, const std::string& extra) {
    const std::string labels = Join(base_, Join(item_, extra));
    out += std::string(name) + (labels.empty() ? "" : "{" + labels + "}") + " " + Number(value) +
           "\n";
  }
  // Cumulative `le` buckets in seconds, their sum and count.
  void Histogram(std::string& out, const std::string& name, const HistogramSnapshot& h) {
    int64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      Sample(out, name + "_bucket", static_cast<double>(cumulative),
             "le=\"" + Number(h.bounds[i]) + "\"");
    }
    Sample(out, name + "_bucket", static_cast<double>(h.count), "le=\"+Inf\"");
    Sample(out, name + "_sum", h.sum_s, "");
    Sample(out, name + "_count", static_cast<double>(h.count), "");
  }

  std::string base_;  // the caller's constant labels, rendered
  std::string item_;  // the labels of the list item being walked (stage="read")
  std::array<std::string, std::size(kFamilies)> samples_;  // per family, rendered
};

}  // namespace
}  // namespace report_internal

std::string PrometheusEscape(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string PrometheusText(const RunReport& report, const MetricLabels& labels) {
  report_internal::Exposition e(labels);
  report_internal::Fields(report, e);
  return e.str();
}

}  // namespace headrace
