#include "headrace/exec/trace.h"

#include <atomic>

#include "headrace/core/json_writer.h"

namespace headrace {

TraceRecorder::TraceRecorder(size_t max_events) : origin_(Clock::now()), max_events_(max_events) {}

int TraceRecorder::ThreadRow() {
  // Small stable row numbers instead of OS thread ids, so rows sort by creation.
  static std::atomic<int> next{1};
  thread_local int row = next.fetch_add(1);
  return row;
}

void TraceRecorder::Add(Event e, std::optional<std::string_view> copied_name) {
  MutexLock lock(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  if (copied_name.has_value()) e.name = names_.emplace(*copied_name).first->c_str();
  events_.push_back(std::move(e));
}

int64_t TraceRecorder::Since(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
}

void TraceRecorder::Span(std::string_view name, const char* category, Clock::time_point start,
                         Clock::time_point end, int64_t sample_index) {
  Add(Event{'X', nullptr, category, ThreadRow(), Since(origin_, start), Since(start, end),
            sample_index, {}},
      name);
}

void TraceRecorder::AsyncBegin(const char* name, int64_t id, Clock::time_point at) {
  Add(Event{'b', name, "io", 0, Since(origin_, at), 0, id, {}});
}

void TraceRecorder::AsyncEnd(const char* name, int64_t id, Clock::time_point at) {
  Add(Event{'e', name, "io", 0, Since(origin_, at), 0, id, {}});
}

void TraceRecorder::NameThread(const std::string& name) {
  Add(Event{'M', "thread_name", "", ThreadRow(), 0, 0, -1, name});
}

size_t TraceRecorder::dropped() const {
  MutexLock lock(mu_);
  return dropped_;
}

std::string TraceRecorder::ToJson() const {
  MutexLock lock(mu_);
  JsonWriter w(/*pretty=*/false);
  w.BeginObject().Key("traceEvents").BeginArray();
  for (const Event& e : events_) {
    w.BeginObject();
    w.Key("ph").String(std::string(1, e.phase)).Key("name").String(e.name);
    w.Key("pid").Int(1).Key("tid").Int(e.tid);
    if (e.phase == 'M') {
      w.Key("args").BeginObject().Key("name").String(e.label).EndObject();
    } else {
      w.Key("cat").String(e.category).Key("ts").Double(e.ts_ns / 1e3);
      if (e.phase == 'X') w.Key("dur").Double(e.dur_ns / 1e3);
      if (e.phase == 'b' || e.phase == 'e') w.Key("id").Int(e.id);
      if (e.phase == 'X' && e.id >= 0) {
        w.Key("args").BeginObject().Key("sample").Int(e.id).EndObject();
      }
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("otherData").BeginObject().Key("dropped_events").Int(static_cast<int64_t>(dropped_));
  w.EndObject().EndObject();
  return w.str();
}

}  // namespace headrace
