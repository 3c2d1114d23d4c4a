// Normalization is written here, on utf8proc's per-character decompositions and pair
// compositions, because utf8proc_map cannot be given other combining classes and orders
// marks with a bubble sort: a 320 KB run of out-of-order marks took 38 s.
#include "headrace/ops/text/unicode_reference.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <vector>

namespace headrace {
namespace {

struct UnicodeRange {
  char32_t lo, hi;
  uint32_t value;
};

#include "headrace/ops/text/unicode_tables.inc"

const UnicodeRange* FindRange(std::span<const UnicodeRange> table, char32_t cp) {
  const auto it = std::upper_bound(table.begin(), table.end(), cp,
                                   [](char32_t c, const UnicodeRange& r) { return c < r.lo; });
  if (it == table.begin()) return nullptr;
  const UnicodeRange& r = *(it - 1);
  return cp <= r.hi ? &r : nullptr;
}

// Whether any code point of a 256-code-point block is substituted: most text never
// reaches the binary search.
const std::array<bool, 0x1100>& SubstitutedBlocks() {
  static const std::array<bool, 0x1100> blocks = [] {
    std::array<bool, 0x1100> b{};
    for (const UnicodeRange& r : kRegexSubstitutes) {
      for (char32_t block = r.lo >> 8; block <= (r.hi >> 8); ++block) b[block] = true;
    }
    return b;
  }();
  return blocks;
}

bool Inert(char32_t cp) { return FindRange(kInertInNormalization, cp) != nullptr; }

// Decodes the valid UTF-8 character at text[i], advancing i.
char32_t Next(std::string_view text, size_t& i) {
  utf8proc_int32_t cp = 0;
  const utf8proc_ssize_t n =
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                       static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
  i += n > 0 ? static_cast<size_t>(n) : 1;
  return cp < 0 ? 0xFFFD : static_cast<char32_t>(cp);
}

void Append(char32_t cp, std::string* out) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// The primary composite of (a, b) as utf8proc composes it (Hangul included), or 0.
// utf8proc_normalize_utf32 composes excluded composites too (U+1D158 U+1D165 gave
// U+1D15F: utf8proc_map leaves them out when decomposing), so exclusions are checked
// here. The reference composes the same pairs except those involving characters it
// does not know.
char32_t Compose(char32_t a, char32_t b) {
  if (Inert(a) || Inert(b)) return 0;
  utf8proc_int32_t pair[2] = {static_cast<utf8proc_int32_t>(a), static_cast<utf8proc_int32_t>(b)};
  if (utf8proc_normalize_utf32(pair, 2, UTF8PROC_COMPOSE) != 1) return 0;
  const auto c = static_cast<char32_t>(pair[0]);
  if (utf8proc_get_property(pair[0])->comp_exclusion) return 0;
  return Inert(c) ? 0 : c;
}

struct Mark {
  int ccc;
  char32_t cp;
};

}  // namespace

int ReferenceCombiningClass(char32_t cp) {
  if (cp < 0x300) return 0;
  const UnicodeRange* r = FindRange(kCombiningClasses, cp);
  return r == nullptr ? 0 : static_cast<int>(r->value);
}

char32_t RegexSubstitute(char32_t cp) {
  if (cp >= 0x110000 || !SubstitutedBlocks()[cp >> 8]) return cp;
  const UnicodeRange* r = FindRange(kRegexSubstitutes, cp);
  return r == nullptr ? cp : static_cast<char32_t>(r->value);
}

bool SubstituteForRegex(std::string_view text, std::string* out) {
  const auto& blocks = SubstitutedBlocks();
  bool changed = false;
  for (size_t i = 0; i < text.size();) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t at = i;
    const char32_t cp = Next(text, i);
    if (!blocks[cp >> 8]) continue;
    const char32_t sub = RegexSubstitute(cp);
    if (sub == cp) continue;
    if (!changed) {
      out->assign(text);
      changed = true;
    }
    utf8proc_uint8_t bytes[4];
    const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(sub), bytes);
    // The generator keeps UTF-8 lengths equal, so offsets do not move.
    std::memcpy(out->data() + at, bytes, static_cast<size_t>(n));
  }
  return changed;
}

void NormalizeAsReference(std::string_view text, NormalForm form, std::string* out) {
  thread_local std::vector<Mark> chars;
  chars.clear();
  const bool compat = form == NormalForm::kNfkc || form == NormalForm::kNfkd;
  const auto options = static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE |
                                                      (compat ? UTF8PROC_COMPAT : 0));
  // Decompose. 18 code points is the longest decomposition (U+FDFA, compatibility).
  for (size_t i = 0; i < text.size();) {
    const char32_t cp = Next(text, i);
    if (cp < 0xA0 || Inert(cp)) {  // nothing below U+00A0 decomposes
      chars.push_back({ReferenceCombiningClass(cp), cp});
      continue;
    }
    utf8proc_int32_t buf[32];
    int last_boundclass = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf,
                                                       32, options, &last_boundclass);
    if (n <= 0 || n > 32) {
      chars.push_back({ReferenceCombiningClass(cp), cp});
      continue;
    }
    for (utf8proc_ssize_t k = 0; k < n; ++k) {
      const auto c = static_cast<char32_t>(buf[k]);
      chars.push_back({ReferenceCombiningClass(c), c});
    }
  }
  // Canonical order: each run of non-starters sorted by class, stably.
  for (size_t i = 0; i < chars.size();) {
    if (chars[i].ccc == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < chars.size() && chars[j].ccc != 0) ++j;
    if (j - i > 1) {
      std::stable_sort(chars.begin() + static_cast<std::ptrdiff_t>(i),
                       chars.begin() + static_cast<std::ptrdiff_t>(j),
                       [](const Mark& a, const Mark& b) { return a.ccc < b.ccc; });
    }
    i = j;
  }
  if (form == NormalForm::kNfd || form == NormalForm::kNfkd) {
    for (const Mark& m : chars) Append(m.cp, out);
    return;
  }
  // Canonical composition: a character joins the last starter unless a character
  // between them has a class of 0 or at least its own.
  size_t kept = 0;
  size_t starter = SIZE_MAX;
  int last_ccc = 0;
  for (size_t i = 0; i < chars.size(); ++i) {
    const Mark m = chars[i];
    if (starter != SIZE_MAX) {
      const bool adjacent = starter + 1 == kept;
      if (adjacent || (last_ccc != 0 && last_ccc < m.ccc)) {
        if (const char32_t c = Compose(chars[starter].cp, m.cp); c != 0) {
          chars[starter].cp = c;
          continue;
        }
      }
    }
    if (m.ccc == 0) starter = kept;
    last_ccc = m.ccc;
    chars[kept++] = m;
  }
  for (size_t i = 0; i < kept; ++i) Append(chars[i].cp, out);
}

}  // namespace headrace
