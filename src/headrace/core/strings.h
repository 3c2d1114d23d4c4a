// Small string helpers shared by the parsers (config, credentials, HTTP headers) and the
// report writers.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

namespace headrace {

// `s` without leading and trailing spaces, tabs, CRs and LFs.
inline std::string_view TrimWhitespace(std::string_view s) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// ASCII case-insensitive equality.
inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// --- UTF-8 (the rules of Python's bytes.decode("utf-8", "replace")) ---

// Length of the valid UTF-8 sequence at text[i], 0 when it is not valid there.
size_t ValidSequenceLength(std::string_view text, size_t i);

// Bytes of the maximal invalid subpart at text[i] (at least 1): what one U+FFFD replaces.
size_t InvalidSubpartLength(std::string_view text, size_t i);

// Makes `text` valid UTF-8: each maximal invalid subsequence becomes U+FFFD, as Python's
// bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do. Returns false
// (and leaves *out untouched) when `text` is already valid. `out` must not view `text`.
bool SanitizeUtf8(std::string_view text, std::string* out);

// `s` in single quotes for an error message, cut to at most `max_bytes` (at a UTF-8
// character boundary) with "...(N bytes)" after a cut, so that a huge path or field
// from untrusted input cannot flood a log; NUL and other control bytes are shown as
// "\xHH". Use it wherever a message quotes a URI, a path or a manifest value.
std::string QuoteForMessage(std::string_view s, size_t max_bytes = 200);

// A string's bytes as the span byte writers take.
inline std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// printf into a string, for the text of reports and messages (at most 511 characters).
template <typename... Args>
std::string StrFormat(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

}  // namespace headrace
