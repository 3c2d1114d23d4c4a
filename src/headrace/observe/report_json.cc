// The report's JSON, out and in: two walks of the schema (report_schema.h).
#include <simdjson.h>

#include <algorithm>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "headrace/core/json_writer.h"
#include "headrace/observe/report.h"
#include "headrace/observe/report_schema.h"

namespace headrace {
namespace report_internal {
namespace {

class JsonOut {
 public:
  JsonOut() { w_.BeginObject(); }

  template <typename T>
  void Field(std::string_view key, const T& value, const auto&... options) {
    const FieldOptions o = Options(options...);
    if (!o.written || o.live) return;
    w_.Key(key);
    if constexpr (std::is_convertible_v<const T&, std::string_view>) {
      w_.String(o.blank ? std::string_view() : std::string_view(value));
    } else {
      Write(value);
    }
  }
  void Section(std::string_view key, bool present, auto&& body) {
    if (!present) return;
    w_.Key(key).BeginObject();
    body();
    w_.EndObject();
  }
  template <typename T>
  void List(std::string_view key, const std::vector<T>& items, const auto&... options) {
    const FieldOptions o = Options(options...);
    if (!o.written) return;
    w_.Key(key).BeginArray();
    for (const T& item : items) {
      w_.BeginObject();
      Fields(item, *this);
      w_.EndObject();
    }
    w_.EndArray();
  }
  template <typename T>
  void Keyed(std::string_view key, const std::vector<T>& items, std::string T::*name,
             std::string_view /*label*/) {
    w_.Key(key).BeginObject();
    for (const T& item : items) {
      w_.Key(item.*name).BeginObject();
      Fields(item, *this);
      w_.EndObject();
    }
    w_.EndObject();
  }
  void KeyedBy(std::string_view key, std::string_view flagged_key, bool flag, int64_t value) {
    w_.Key(flag ? flagged_key : key).Int(value);
  }
  std::string str() && {
    w_.EndObject();
    return w_.str() + "\n";
  }

 private:
  void Write(double v) { w_.Double(v); }
  void Write(std::integral auto v) {
    if constexpr (std::is_same_v<decltype(v), bool>) {
      w_.Bool(v);
    } else {
      w_.Int(v);
    }
  }
  void Write(const std::map<std::string, int64_t>& counts) {
    w_.BeginObject();
    for (const auto& [key, n] : counts) w_.Key(key).Int(n);
    w_.EndObject();
  }
  void Write(const std::vector<std::string>& strings) {
    w_.BeginArray();
    for (const std::string& s : strings) w_.String(s);
    w_.EndArray();
  }
  // {"count": n, "mean": .., "p50": .., "p90": .., "p99": ..} in milliseconds.
  void Write(const HistogramSnapshot& h) {
    w_.BeginObject().Key("count").Int(h.count);
    w_.Key("mean").Double(h.Mean() * 1e3);
    w_.Key("p50").Double(h.Quantile(0.5) * 1e3);
    w_.Key("p90").Double(h.Quantile(0.9) * 1e3);
    w_.Key("p99").Double(h.Quantile(0.99) * 1e3);
    w_.EndObject();
  }
  // Columns, not one object per point: a long run's timeline stays small.
  void Write(const TimelineColumns& t) {
    w_.BeginObject().Key("stages").BeginArray();
    for (const StageReport& s : t.stages) w_.String(s.metrics.name);
    w_.EndArray();
    const auto column = [&](const char* key, double TimelinePoint::*value) {
      w_.Key(key).BeginArray();
      for (const TimelinePoint& p : t.points) w_.Double(p.*value);
      w_.EndArray();
    };
    column("t_s", &TimelinePoint::t_s);
    column("samples_per_s", &TimelinePoint::samples_per_s);
    column("wait_ratio", &TimelinePoint::wait_ratio);
    column("budget_used", &TimelinePoint::budget_used);
    // The memory columns where the points have the readings: not a sanitizer build's
    // heap, nor the points of a report from before they were sampled.
    const auto any = [&](auto known) {
      return std::any_of(t.points.begin(), t.points.end(), known);
    };
    if (any([](const TimelinePoint& p) { return p.rss_bytes > 0; })) {
      column("rss_bytes", &TimelinePoint::rss_bytes);
    }
    if (any([](const TimelinePoint& p) { return p.heap_system_bytes >= 0; })) {
      column("heap_system_bytes", &TimelinePoint::heap_system_bytes);
      column("heap_in_use_bytes", &TimelinePoint::heap_in_use_bytes);
    }
    if (any([](const TimelinePoint& p) { return p.regions_mapped_bytes > 0; })) {
      column("regions_mapped_bytes", &TimelinePoint::regions_mapped_bytes);
    }
    w_.Key("utilization").BeginArray();  // one array per stage
    for (size_t i = 0; i < t.stages.size(); ++i) {
      w_.BeginArray();
      for (const TimelinePoint& p : t.points) {
        w_.Double(i < p.utilization.size() ? p.utilization[i] : 0.0);
      }
      w_.EndArray();
    }
    w_.EndArray().EndObject();
  }

  JsonWriter w_;
};

// Reads what JsonOut wrote, leniently: a key that is not there (a report from before it
// was added) leaves its field as it was, unless the field is required.
class JsonIn {
 public:
  explicit JsonIn(simdjson::dom::element doc) : at_(doc) {}

  template <typename T>
  void Field(std::string_view key, T&& value, const auto&... options) {
    const FieldOptions o = Options(options...);
    if constexpr (kReadable<T>) {
      if (!o.live && !Read(at_[key], value) && o.required) Need(key);
    }
  }
  void Section(std::string_view key, auto&& present, auto&& body) {
    simdjson::dom::element inner;
    if (at_[key].get(inner) != simdjson::SUCCESS) return;
    if constexpr (std::is_same_v<decltype(present), bool&>) present = true;
    Within(inner, path_ + std::string(key) + ".", body);
  }
  template <typename L>
  void List(std::string_view key, L&& items, const auto&... options) {
    const FieldOptions o = Options(options...);
    simdjson::dom::array array;
    if (at_[key].get(array) != simdjson::SUCCESS) {
      if (o.required) Need(key);
      return;
    }
    if constexpr (kReadable<L>) {
      for (simdjson::dom::element e : array) {
        Within(e, path_ + std::string(key) + "[].", [&] { Fields(items.emplace_back(), *this); });
      }
    }
  }
  template <typename T>
  void Keyed(std::string_view key, std::vector<T>& items, std::string T::*name,
             std::string_view /*label*/) {
    simdjson::dom::object object;
    if (at_[key].get(object) != simdjson::SUCCESS) return;
    for (auto [item_key, e] : object) {
      T& item = items.emplace_back();
      item.*name = std::string(item_key);
      Within(e, path_, [&] { Fields(item, *this); });
    }
  }
  void KeyedBy(std::string_view key, std::string_view flagged_key, bool& flag, int64_t& value) {
    flag = at_[flagged_key].error() == simdjson::SUCCESS;
    Read(at_[flag ? flagged_key : key], value);
  }
  // The first required key found missing ("stages[].name"), or "".
  const std::string& missing() const { return missing_; }

 private:
  // A field of the report being read, not a value the schema computes or passes const.
  template <typename T>
  static constexpr bool kReadable =
      std::is_lvalue_reference_v<T> && !std::is_const_v<std::remove_reference_t<T>>;

  void Within(simdjson::dom::element e, std::string path, auto&& body) {
    std::swap(at_, e);
    std::swap(path_, path);
    body();
    std::swap(at_, e);
    std::swap(path_, path);
  }
  void Need(std::string_view key) {
    if (missing_.empty()) missing_ = path_ + std::string(key);
  }
  // A number (integers convert), a string, a map of counts or a list of strings; false
  // when the key is not there.
  template <typename T>
  static bool Read(simdjson::simdjson_result<simdjson::dom::element> e, T& out) {
    if constexpr (std::is_arithmetic_v<T>) {
      double v = 0;
      if (e.get(v) != simdjson::SUCCESS) return false;
      out = static_cast<T>(v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      std::string_view v;
      if (e.get(v) != simdjson::SUCCESS) return false;
      out = std::string(v);
    } else if constexpr (std::is_same_v<T, std::map<std::string, int64_t>>) {
      simdjson::dom::object object;
      if (e.get(object) != simdjson::SUCCESS) return false;
      for (auto [key, n] : object) {
        if (int64_t v = 0; n.get(v) == simdjson::SUCCESS) out[std::string(key)] = v;
      }
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      simdjson::dom::array array;
      if (e.get(array) != simdjson::SUCCESS) return false;
      for (simdjson::dom::element s : array) {
        if (std::string_view v; s.get(v) == simdjson::SUCCESS) out.emplace_back(v);
      }
    } else {  // written as quantiles, which cannot be turned back into buckets
      static_assert(std::is_same_v<T, HistogramSnapshot>, "a report field of a new type");
    }
    return true;
  }

  simdjson::dom::element at_;
  std::string path_;  // of the object at_ within the report ("stages[].")
  std::string missing_;
};

}  // namespace
}  // namespace report_internal

std::string RunReportToJson(const RunReport& report) {
  report_internal::JsonOut out;
  report_internal::Fields(report, out);
  return std::move(out).str();
}

Result<RunReport> RunReportFromJson(std::string_view json_text) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json_text.data(), json_text.size()).get(doc) != simdjson::SUCCESS ||
      !doc.is_object()) {
    return Status::InvalidArgument("not a JSON object");
  }
  RunReport r;
  report_internal::JsonIn in(doc);
  report_internal::Fields(r, in);
  if (!in.missing().empty()) {
    return Status::InvalidArgument("not a run report (`headrace run --report`): no '" +
                                   in.missing() + "'");
  }
  return r;
}

}  // namespace headrace
