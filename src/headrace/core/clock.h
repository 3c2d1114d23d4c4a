// Monotonic time helpers and process memory readings.
#pragma once

#include <chrono>
#include <cstdint>

namespace headrace {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline int64_t NanosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

// Current and peak resident set size of this process, from /proc/self/status
// (VmRSS, VmHWM). Zero when unavailable.
int64_t CurrentRssBytes();
int64_t PeakRssBytes();

// What glibc's malloc holds (mallinfo2): `system_bytes` taken from the system (its heaps'
// arenas and the chunks it mmapped), `in_use_bytes` of those in allocated chunks. Their
// difference is free memory malloc keeps, which RSS counts: a gap that grows while
// in_use does not is the heap fragmenting, not a container growing. -1 each where there
// is no such figure: a libc without mallinfo2 (it is looked up at run time, so that a
// build for an older glibc still reports it on a newer one), or a sanitizer build, whose
// allocator is not glibc's. Walks every arena under its lock: for reports, not per sample.
struct MallocHeap {
  int64_t system_bytes = -1;
  int64_t in_use_bytes = -1;
};
MallocHeap MallocHeapBytes();

}  // namespace headrace
