// Small shared pieces of the parameter schema: enum name tables and the range checks
// that operators' Validate and the config's validation write their messages with, so
// that every rule reads the same ("ops[1].image.resize.width: must be in [0, 16384]
// (got -5)").
#pragma once

#include <charconv>
#include <cmath>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "headrace/core/status.h"

namespace headrace {

// The names of an enum's values as configs write them. An enum used as a parameter has a
// `TableOf(E)` overload (found by argument-dependent lookup) returning its table.
template <typename E>
using EnumTable = std::span<const std::pair<E, std::string_view>>;

// "a, b, c": every name of a table.
template <typename E>
std::string AllowedNames(EnumTable<E> table) {
  std::string out;
  for (const auto& [value, name] : table) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

// The name of `value`, or "" when it has none (an out-of-range value from C++).
template <typename E>
std::string_view EnumName(E value) {
  for (const auto& [v, name] : TableOf(value)) {
    if (v == value) return name;
  }
  return {};
}

namespace schema {

inline std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

inline std::string FormatDouble(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

inline Status Invalid(const std::string& key, std::string_view what) {
  return Status::InvalidArgument(key + ": " + std::string(what));
}

template <typename T>
std::string Got(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return " (got " + FormatDouble(v) + ")";
  } else {
    return " (got " + std::to_string(v) + ")";
  }
}

template <typename T>
Status AtLeast(const std::string& key, T value, T min) {
  if (value >= min) return Status::Ok();
  return Invalid(key, "must be >= " + std::to_string(min) + Got(value));
}

template <typename T>
Status InRange(const std::string& key, T value, T min, T max) {
  if (value >= min && value <= max) return Status::Ok();
  return Invalid(key, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]" +
                          Got(value));
}

// A real-valued parameter that becomes an integer somewhere (seconds x a rate, 1 / fps, a
// span over a cell size): finite and in [min, max], or (min, max] with `min_open`, so
// that the conversion cannot overflow. NaN and infinities fail; 1e300 seconds used to
// overflow int64_t in audio.decode. `zero_means`: 0 is allowed too, meaning this.
inline Status FiniteInRange(const std::string& key, double value, double min, double max,
                            bool min_open = false, std::string_view zero_means = {}) {
  if (!zero_means.empty() && value == 0) return Status::Ok();
  const bool low_ok = min_open ? value > min : value >= min;
  if (low_ok && value <= max && std::isfinite(value)) return Status::Ok();
  std::string allowed = std::string(min_open ? "(" : "[") + FormatDouble(min) + ", " +
                        FormatDouble(max) + "]";
  if (!zero_means.empty()) allowed += ", or 0 (" + std::string(zero_means) + ")";
  return Invalid(key, "must be in " + allowed + Got(value));
}

inline Status Probability(const std::string& key, double value) {
  if (value >= 0.0 && value <= 1.0) return Status::Ok();
  return Invalid(key, "must be in [0, 1]" + Got(value));
}

inline Status NonEmpty(const std::string& key, const std::string& value, std::string_view what) {
  if (!value.empty()) return Status::Ok();
  return Invalid(key, "must not be empty (" + std::string(what) + ")");
}

template <typename E>
Status KnownEnum(const std::string& key, E value) {
  if (!EnumName(value).empty()) return Status::Ok();
  return Invalid(key, "invalid value " + std::to_string(static_cast<int>(value)) +
                          " (allowed: " + AllowedNames(TableOf(value)) + ")");
}

}  // namespace schema
}  // namespace headrace
