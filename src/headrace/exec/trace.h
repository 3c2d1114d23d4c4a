// TraceRecorder: a timeline of a run in Chrome / Perfetto trace-event JSON.
//
// Open the file in ui.perfetto.dev or chrome://tracing to see the stages overlap: each
// CPU worker is a row of operator spans, reads are async spans on an "io" row, and the
// consumer's row shows its waits inside Next() against its steps between calls.
//
// Recording is off unless a recorder is passed to the engine. Appending takes a mutex;
// at the engine's event rate (a few events per sample) that costs well under a
// microsecond per event. Events past `max_events` are dropped and counted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "headrace/core/clock.h"
#include "headrace/exec/thread_annotations.h"

namespace headrace {

class TraceRecorder {
 public:
  explicit TraceRecorder(size_t max_events = 2'000'000);

  // A span [start, end) on the calling thread's row. `name` is copied (once per distinct
  // name): an op's name need not outlive the op, nor end in a NUL.
  void Span(std::string_view name, const char* category, Clock::time_point start,
            Clock::time_point end, int64_t sample_index = -1);
  // An async span (overlapping spans on one row), keyed by `id`.
  void AsyncBegin(const char* name, int64_t id, Clock::time_point at);
  void AsyncEnd(const char* name, int64_t id, Clock::time_point at);
  // Names the calling thread's row ("cpu 0", "consumer", ...).
  void NameThread(const std::string& name);

  // {"traceEvents": [...], "otherData": {...}}
  std::string ToJson() const;
  size_t dropped() const;

 private:
  struct Event {
    char phase;  // 'X' span, 'b'/'e' async, 'M' metadata
    const char* name;  // a literal, or one of names_
    const char* category;
    int tid;
    int64_t ts_ns;
    int64_t dur_ns;
    int64_t id;
    std::string label;  // thread name for 'M'
  };
  // Keeps `e` (unless the trace is full); with `copied_name`, e.name is that name's copy
  // in names_.
  void Add(Event e, std::optional<std::string_view> copied_name = std::nullopt);
  static int ThreadRow();
  static int64_t Since(Clock::time_point from, Clock::time_point to);  // nanoseconds

  const Clock::time_point origin_;
  const size_t max_events_;
  mutable Mutex mu_;
  std::vector<Event> events_ HR_GUARDED_BY(mu_);
  // The spans' names, each kept once: nodes do not move, so events point into them.
  std::unordered_set<std::string> names_ HR_GUARDED_BY(mu_);
  size_t dropped_ HR_GUARDED_BY(mu_) = 0;
};

}  // namespace headrace
