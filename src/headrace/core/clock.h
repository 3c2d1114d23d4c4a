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

}  // namespace headrace
