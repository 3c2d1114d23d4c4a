#include "headrace/ops/ocr/render.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace headrace {
namespace {

// Pixels darker than mid-gray, per column band [x0, x1).
int InkIn(const ImageView& v, int x0, int x1) {
  int n = 0;
  for (int y = 0; y < v.height; ++y) {
    for (int x = x0; x < x1; ++x) n += v.row(y)[x * v.channels] < 128;
  }
  return n;
}

TEST(RenderText, InkWhereTheTextIsMarginsBlank) {
  const std::vector<std::string> lines = {"Hello", "a much longer second line"};
  const auto image = RenderText(lines, {.pixel_size = 20, .margin = 10});
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  const ImageView v = image->view();
  EXPECT_EQ(v.channels, 1);
  EXPECT_GT(v.width, 200);                // sized by the longer line
  EXPECT_GT(v.height, 2 * 20);            // two lines
  EXPECT_EQ(InkIn(v, 0, 10), 0);          // left margin
  EXPECT_EQ(InkIn(v, v.width - 10, v.width), 0);
  EXPECT_GT(InkIn(v, 10, 60), 50);        // "He..."
  // The first line is short: its right part is blank in the top half.
  int top_right = 0;
  for (int y = 0; y < v.height / 2; ++y) {
    for (int x = v.width / 2; x < v.width; ++x) top_right += v.row(y)[x] < 128;
  }
  EXPECT_EQ(top_right, 0);
}

TEST(RenderText, RgbHasEqualChannelsAndBlankIsBlank) {
  const auto rgb = RenderText(std::vector<std::string>{"x"}, {.channels = 3});
  ASSERT_TRUE(rgb.ok());
  const ImageView v = rgb->view();
  for (int y = 0; y < v.height; ++y) {
    for (int x = 0; x < v.width; ++x) {
      ASSERT_EQ(v.row(y)[3 * x], v.row(y)[3 * x + 1]);
      ASSERT_EQ(v.row(y)[3 * x], v.row(y)[3 * x + 2]);
    }
  }
  EXPECT_GT(InkIn(v, 0, v.width), 0);
  const auto blank = RenderText({}, {.margin = 5});
  ASSERT_TRUE(blank.ok());
  EXPECT_EQ(InkIn(blank->view(), 0, blank->width()), 0);
}

TEST(RenderText, BadOptionsAndMissingFontsAreNamed) {
  const std::vector<std::string> lines = {"x"};
  const auto font = RenderText(lines, {.font = "/no/such/font.ttf"});
  ASSERT_FALSE(font.ok());
  EXPECT_NE(font.status().message().find("/no/such/font.ttf"), std::string::npos);
  EXPECT_EQ(RenderText(lines, {.pixel_size = 1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RenderText(lines, {.channels = 2}).status().code(), StatusCode::kInvalidArgument);
}

// The wheel points HEADRACE_FONT at the DejaVu Sans it ships (python/headrace/_cli.py).
TEST(RenderText, DefaultFontIsHeadraceFontWhenSet) {
  ASSERT_EQ(unsetenv("HEADRACE_FONT"), 0);
  EXPECT_EQ(DefaultFont(), kDejaVuSans);
  ASSERT_EQ(setenv("HEADRACE_FONT", "", 1), 0);
  EXPECT_EQ(DefaultFont(), kDejaVuSans);
  ASSERT_EQ(setenv("HEADRACE_FONT", "/opt/fonts/Bundled.ttf", 1), 0);
  EXPECT_EQ(DefaultFont(), "/opt/fonts/Bundled.ttf");
  EXPECT_EQ(RenderTextOptions{}.font, "/opt/fonts/Bundled.ttf");
  ASSERT_EQ(unsetenv("HEADRACE_FONT"), 0);
}

}  // namespace
}  // namespace headrace
