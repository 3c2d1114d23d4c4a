#include "headrace/core/strings.h"

#include <gtest/gtest.h>

#include "headrace/core/sample.h"

namespace headrace {
namespace {

TEST(QuoteForMessage, QuotesShortTextWhole) {
  EXPECT_EQ(QuoteForMessage("images/a.jpg"), "'images/a.jpg'");
}

TEST(QuoteForMessage, CutsLongTextAndSaysHowLongItWas) {
  const std::string huge(1 << 20, 'a');
  const std::string quoted = QuoteForMessage(huge);
  EXPECT_LT(quoted.size(), 260u);
  EXPECT_EQ(quoted.substr(0, 4), "'aaa");
  EXPECT_NE(quoted.find("'...(1048576 bytes)"), std::string::npos);
}

TEST(QuoteForMessage, NeverCutsInsideAUtf8Character) {
  const std::string s = std::string(9, 'a') + "\xC3\xA9" + "zzz";  // 'é' at bytes 9-10
  EXPECT_EQ(QuoteForMessage(s, 10), "'aaaaaaaaa'...(14 bytes)");
}

TEST(QuoteForMessage, ShowsControlBytes) {
  EXPECT_EQ(QuoteForMessage(std::string_view("a\0b\n", 4)), "'a\\x00b\\x0a'");
}

TEST(SanitizeUtf8, ReplacesEachMaximalInvalidSubpartAsPythonDoes) {
  std::string out;
  EXPECT_FALSE(SanitizeUtf8("plain ünï 猫", &out));
  ASSERT_TRUE(SanitizeUtf8("a\xff" "b\xe2\x82" "c\xed\xa0\x80", &out));
  // One U+FFFD per maximal invalid subpart; a surrogate's three bytes are three.
  EXPECT_EQ(out, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(SampleError, ToStringShortensAHugeUri) {
  const SampleError short_uri{0, 3, "/data/x.jpg", Status::NotFound("gone")};
  EXPECT_EQ(short_uri.ToString(), "epoch 0, index 3, /data/x.jpg: not_found: gone");
  const SampleError huge{1, 2, "/data/" + std::string(1 << 20, 'x'), Status::NotFound("gone")};
  EXPECT_LT(huge.ToString().size(), 300u);
  EXPECT_NE(huge.ToString().find("(1048582 bytes)"), std::string::npos);
}

}  // namespace
}  // namespace headrace
