#include "make_sample/make_sample_ocr.h"

#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "make_sample/make_sample.h"
#include "test_files.h"

namespace headrace {
namespace {

namespace fs = std::filesystem;

TEST(MakeSampleOcr, LinesAreFiveDistinctWordsAndTheIndex) {
  EXPECT_EQ(OcrLines(0), (std::vector<std::string>{"river silver water", "table animal 0"}));
  for (int64_t i = 0; i < 80; ++i) {
    const std::vector<std::string> lines = OcrLines(i);
    ASSERT_EQ(lines.size(), 2u);
    std::set<std::string> words;
    for (const std::string& l : lines) {
      for (size_t b = 0, e; b < l.size(); b = e + 1) {
        e = std::min(l.find(' ', b), l.size());
        words.insert(l.substr(b, e - b));
      }
    }
    EXPECT_EQ(words.size(), 6u) << "sample " << i;
    EXPECT_TRUE(words.count(std::to_string(i))) << "sample " << i;
    EXPECT_NE(OcrLines(i + 1)[1], lines[1]);
    EXPECT_EQ(OcrLines(i), lines) << "a pure function of i";
  }
}

TEST(MakeSampleOcr, WritesPagesAndTheirManifestKeys) {
  const char* env = std::getenv("HEADRACE_TEST_TMP");
  const fs::path root = fs::path(env != nullptr ? env : "/tmp") /
                        ("make_sample_ocr_test_" + std::to_string(::getpid()));
  MakeSampleOptions options;
  options.out_dir = root.string();
  options.samples = 3;
  options.threads = 2;
  options.vocab_size = 200;
  options.ocr = true;
  const auto stats = MakeSample(options);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_GT(stats->ocr_bytes, 0);
  const std::vector<std::string> manifest =
      test::Lines(test::ReadFile(root / "manifest.jsonl"));
  ASSERT_EQ(manifest.size(), 3u);
  EXPECT_NE(manifest[1].find("\"ocr_image\":\"ocr/000001.png\",\"ocr_text\":\"" +
                             OcrLines(1)[0] + "\\n" + OcrLines(1)[1] + "\""),
            std::string::npos)
      << manifest[1];
  // The page is an 8-bit gray PNG, white with some ink.
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  ASSERT_NE(png_image_begin_read_from_file(&png, (root / "ocr" / "000001.png").c_str()), 0);
  EXPECT_EQ(png.format, static_cast<png_uint_32>(PNG_FORMAT_GRAY));
  std::vector<uint8_t> pixels(PNG_IMAGE_SIZE(png));
  ASSERT_NE(png_image_finish_read(&png, nullptr, pixels.data(), 0, nullptr), 0);
  size_t ink = 0, white = 0;
  for (uint8_t p : pixels) (p < 64 ? ink : white) += p < 64 || p == 255;
  EXPECT_GT(ink, 500u);
  EXPECT_GT(white, pixels.size() / 2);
  std::error_code ignored;
  fs::remove_all(root, ignored);
}

}  // namespace
}  // namespace headrace
