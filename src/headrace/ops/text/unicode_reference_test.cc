// The reference's Unicode data (unicode_reference.h): the cases issue 25 found, each
// measured on the `tokenizers` package (tests/python/test_real_tokenizers.py compares
// whole tokenizers on 25,000 strings each).
#include "headrace/ops/text/unicode_reference.h"

#include <chrono>
#include <string>

#include <gtest/gtest.h>

namespace headrace {
namespace {

std::string Utf8(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

std::string Nfc(std::u32string_view s) {
  std::string out;
  NormalizeAsReference(Utf8(s), NormalForm::kNfc, &out);
  return out;
}

TEST(UnicodeReference, CombiningClassesAreTheReferences) {
  EXPECT_EQ(ReferenceCombiningClass(0x0301), 230);
  EXPECT_EQ(ReferenceCombiningClass(0x0316), 220);
  EXPECT_EQ(ReferenceCombiningClass(0x0041), 0);
  // Marks of Unicode 10-14 (utf8proc: 230, 232, 7) are unknown to the reference: class 0.
  EXPECT_EQ(ReferenceCombiningClass(0x1AC1), 0);
  EXPECT_EQ(ReferenceCombiningClass(0x1DF6), 0);
  EXPECT_EQ(ReferenceCombiningClass(0x0C3C), 0);
}

TEST(UnicodeReference, NfcOrdersAndComposesOnlyWhatTheReferenceKnows) {
  EXPECT_EQ(Nfc(U"e\u0301"), Utf8(U"\u00e9"));
  EXPECT_EQ(Nfc(U"a\u0301\u0316"), Utf8(U"\u00e1\u0316"));  // 0316 first, a+0301 composes
  EXPECT_EQ(Nfc(U"\u1100\u1161\u11a8"), Utf8(U"\uac01"));   // Hangul L V T
  // U+1AC1 is a starter to the reference: it blocks, and stays where it is.
  EXPECT_EQ(Nfc(U"a\u1ac1\u0316"), Utf8(U"a\u1ac1\u0316"));
  // Composition exclusions: U+1D15F decomposes and does not compose back.
  EXPECT_EQ(Nfc(U"\U0001d15f"), Utf8(U"\U0001d158\U0001d165"));
  EXPECT_EQ(Nfc(U"\u0958"), Utf8(U"\u0915\u093c"));
  // Dives Akuru (Unicode 13) composes in Unicode, not in the reference.
  EXPECT_EQ(Nfc(U"\U00011935\U00011930"), Utf8(U"\U00011935\U00011930"));
  std::string nfkd;
  NormalizeAsReference(Utf8(U"\u00a0\ufb01\u00b2"), NormalForm::kNfkd, &nfkd);
  EXPECT_EQ(nfkd, " fi2");
}

TEST(UnicodeReference, ARunOfOutOfOrderMarksTakesLinearTime) {
  std::u32string text = U"a";
  for (int i = 0; i < 80'000; ++i) text += U"\u0301\u0316";  // 320 KB, every pair reversed
  const std::string utf8 = Utf8(text);
  const auto t0 = std::chrono::steady_clock::now();
  std::string out;
  NormalizeAsReference(utf8, NormalForm::kNfc, &out);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(out.size(), utf8.size() - 1);  // a+0301 composed, the rest reordered
  EXPECT_EQ(out.substr(out.size() - 2), Utf8(U"\u0301"));
  // utf8proc_map took 77 s (a bubble sort); ~0.03 s now. Generous for a loaded machine.
  EXPECT_LT(s, 2.0);
}

TEST(UnicodeReference, RegexesSeeNewLettersAsLettersAndU180ENotAsSpace) {
  // U+11F04 (Kawi, Unicode 15) and U+16100 (Gurung Khema, 16) are letters to the
  // reference; PCRE2 10.42 does not know them. U+180E is not white space since 6.3.
  for (char32_t cp : {0x11F04, 0x16100, 0x2EBF0, 0x180E}) {
    const char32_t sub = RegexSubstitute(cp);
    EXPECT_NE(sub, cp);
    EXPECT_EQ(Utf8(std::u32string(1, sub)).size(), Utf8(std::u32string(1, cp)).size());
  }
  EXPECT_EQ(RegexSubstitute(U'a'), U'a');
  EXPECT_EQ(RegexSubstitute(0x4E00), 0x4E00u);
  std::string out;
  EXPECT_FALSE(SubstituteForRegex("plain text \xE4\xB8\x80", &out));
  ASSERT_TRUE(SubstituteForRegex(Utf8(U"x\u180ey"), &out));
  EXPECT_EQ(out.size(), 5u);
  EXPECT_EQ(out.front(), 'x');
  EXPECT_EQ(out.back(), 'y');
}

}  // namespace
}  // namespace headrace
