#include "headrace/core/strings.h"

namespace headrace {

namespace {

// The UTF-8 sequence starting at text[i]: how many bytes its lead byte asks for (0: not a
// lead byte) and how many of them, the lead included, are there and valid.
struct Utf8Start {
  size_t wanted = 0, valid = 0;
};

Utf8Start ReadUtf8Start(std::string_view text, size_t i) {
  const uint8_t c = static_cast<uint8_t>(text[i]);
  if (c < 0x80) return {1, 1};
  size_t n;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return {};
  }
  // Maximal subpart: how many continuation bytes are valid decides what one U+FFFD covers.
  size_t k = 1;
  for (; k < n && i + k < text.size(); ++k) {
    const uint8_t cc = static_cast<uint8_t>(text[i + k]);
    if (cc < (k == 1 ? lo : 0x80) || cc > (k == 1 ? hi : 0xBF)) break;
  }
  return {n, k};
}

}  // namespace

size_t ValidSequenceLength(std::string_view text, size_t i) {
  const Utf8Start start = ReadUtf8Start(text, i);
  return start.wanted != 0 && start.valid == start.wanted ? start.wanted : 0;
}

size_t InvalidSubpartLength(std::string_view text, size_t i) {
  const Utf8Start start = ReadUtf8Start(text, i);
  return start.wanted == 0 ? 1 : start.valid;
}

bool SanitizeUtf8(std::string_view text, std::string* out) {
  size_t i = 0;
  while (i < text.size()) {
    // ASCII runs are by far the common case.
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = ValidSequenceLength(text, i);
    if (n == 0) break;
    i += n;
  }
  if (i == text.size()) return false;
  out->assign(text.substr(0, i));
  while (i < text.size()) {
    const size_t n = ValidSequenceLength(text, i);
    if (n > 0) {
      out->append(text.substr(i, n));
      i += n;
    } else {
      out->append("\xEF\xBF\xBD");
      i += InvalidSubpartLength(text, i);
    }
  }
  return true;
}

std::string QuoteForMessage(std::string_view s, size_t max_bytes) {
  size_t n = std::min(s.size(), max_bytes);
  // Never cut inside a UTF-8 sequence: back up to the start of the character.
  while (n < s.size() && n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  out.reserve(n + 24);
  for (const char ch : s.substr(0, n)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  out += "'";
  if (n < s.size()) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace headrace
