#include "headrace/core/strings.h"

namespace headrace {

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
