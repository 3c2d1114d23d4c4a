#include "make_sample/make_sample.h"
#include "test_files.h"

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <simdjson.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace headrace {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSamples = 24;

using test::Lines;
using test::ReadFile;

std::string Id(int64_t i) {
  char id[16];
  std::snprintf(id, sizeof(id), "%06lld", static_cast<long long>(i));
  return id;
}

class MakeSampleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* env = std::getenv("HEADRACE_TEST_TMP");
    root_ = fs::path(env != nullptr ? env : "/tmp") /
            ("make_sample_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    auto stats = MakeSample(Options("two_threads", /*threads=*/2));
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    stats_ = *stats;
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  static MakeSampleOptions Options(const std::string& name, int threads, uint64_t seed = 1,
                                   int64_t samples = kSamples) {
    MakeSampleOptions options;
    options.out_dir = (root_ / name).string();
    options.samples = samples;
    options.seed = seed;
    options.threads = threads;
    options.vocab_size = 500;
    return options;
  }
  static fs::path Dir() { return root_ / "two_threads"; }

  static inline fs::path root_;
  static inline MakeSampleStats stats_;
};

TEST_F(MakeSampleTest, WritesOneLlavaRecordPerSample) {
  const std::vector<std::string> lines = Lines(ReadFile(Dir() / "manifest.jsonl"));
  ASSERT_EQ(static_cast<int64_t>(lines.size()), kSamples);
  simdjson::dom::parser parser;
  for (int64_t i = 0; i < kSamples; ++i) {
    SCOPED_TRACE(lines[i]);
    simdjson::dom::element record;
    ASSERT_EQ(parser.parse(lines[i]).get(record), simdjson::SUCCESS);
    std::string_view id, image;
    ASSERT_EQ(record["id"].get(id), simdjson::SUCCESS);
    ASSERT_EQ(record["image"].get(image), simdjson::SUCCESS);
    EXPECT_EQ(id, Id(i));
    EXPECT_EQ(image, "images/" + Id(i) + ".jpg");
    EXPECT_TRUE(fs::is_regular_file(Dir() / image));

    simdjson::dom::array turns;
    ASSERT_EQ(record["conversations"].get(turns), simdjson::SUCCESS);
    ASSERT_GE(turns.size(), 2u);
    ASSERT_LE(turns.size(), 6u);
    ASSERT_EQ(turns.size() % 2, 0u);
    int64_t k = 0;
    for (simdjson::dom::element turn : turns) {
      std::string_view from, value;
      ASSERT_EQ(turn["from"].get(from), simdjson::SUCCESS);
      ASSERT_EQ(turn["value"].get(value), simdjson::SUCCESS);
      EXPECT_EQ(from, k % 2 == 0 ? "human" : "gpt");
      EXPECT_FALSE(value.empty());
      // Exactly one image placeholder, opening the first question.
      EXPECT_EQ(value.starts_with("<image>\n"), k == 0) << value;
      if (k > 0) {
        EXPECT_EQ(value.find("<image>"), std::string_view::npos) << value;
      }
      ++k;
    }
  }
}

TEST_F(MakeSampleTest, ImagesAreJpegsOfTheDeclaredSizesAndAspects) {
  std::unique_ptr<void, int (*)(void*)> tj(tjInitDecompress(), &tjDestroy);
  ASSERT_NE(tj, nullptr);
  const std::set<std::pair<int, int>> aspects = {{1, 1}, {4, 3}, {3, 2}, {16, 9},
                                                 {3, 4}, {2, 3}, {9, 16}};
  std::set<std::pair<int, int>> seen;
  int64_t bytes = 0;
  for (int64_t i = 0; i < kSamples; ++i) {
    const std::string jpeg = ReadFile(Dir() / "images" / (Id(i) + ".jpg"));
    bytes += static_cast<int64_t>(jpeg.size());
    const auto* data = reinterpret_cast<const unsigned char*>(jpeg.data());
    int width = 0, height = 0, subsampling = 0, colorspace = 0;
    ASSERT_EQ(tjDecompressHeader3(tj.get(), data, jpeg.size(), &width, &height, &subsampling,
                                  &colorspace),
              0);
    EXPECT_EQ(subsampling, TJSAMP_420);
    const int long_side = std::max(width, height);
    EXPECT_GE(long_side, 320);
    EXPECT_LE(long_side, 1600);
    bool matched = false;
    for (const auto& [aw, ah] : aspects) {
      // The short side is rounded to a whole pixel.
      if (std::abs(static_cast<double>(width) * ah / aw - height) <= 1.0) {
        matched = true;
        seen.insert({aw, ah});
      }
    }
    EXPECT_TRUE(matched) << width << "x" << height;

    std::vector<unsigned char> pixels(static_cast<size_t>(width) * height * 3);
    EXPECT_EQ(
        tjDecompress2(tj.get(), data, jpeg.size(), pixels.data(), width, 0, height, TJPF_RGB, 0), 0)
        << tjGetErrorStr2(tj.get());
  }
  EXPECT_GE(seen.size(), 4u) << "24 images should show a mix of aspect ratios";
  EXPECT_EQ(stats_.samples, kSamples);
  EXPECT_EQ(stats_.image_bytes, bytes);
}

TEST_F(MakeSampleTest, OutputIsTheSameForAnyThreadCount) {
  auto stats = MakeSample(Options("one_thread", /*threads=*/1));
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  const fs::path other = root_ / "one_thread";
  EXPECT_EQ(ReadFile(other / "manifest.jsonl"), ReadFile(Dir() / "manifest.jsonl"));
  EXPECT_EQ(ReadFile(other / "tokenizer.model"), ReadFile(Dir() / "tokenizer.model"));
  for (int64_t i = 0; i < kSamples; ++i) {
    const std::string name = Id(i) + ".jpg";
    EXPECT_EQ(ReadFile(other / "images" / name), ReadFile(Dir() / "images" / name)) << name;
  }
  EXPECT_EQ(stats->image_bytes, stats_.image_bytes);
}

TEST_F(MakeSampleTest, DifferentSeedsGiveDifferentData) {
  auto stats = MakeSample(Options("seed_2", /*threads=*/2, /*seed=*/2, /*samples=*/4));
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  const fs::path other = root_ / "seed_2";
  EXPECT_NE(Lines(ReadFile(other / "manifest.jsonl"))[0],
            Lines(ReadFile(Dir() / "manifest.jsonl"))[0]);
  EXPECT_NE(ReadFile(other / "images" / "000000.jpg"), ReadFile(Dir() / "images" / "000000.jpg"));
}

TEST_F(MakeSampleTest, TokenizerKeepsTemplateSymbolsWhole) {
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load((Dir() / "tokenizer.model").string()).ok());
  EXPECT_TRUE(fs::is_regular_file(Dir() / "tokenizer.vocab"));
  EXPECT_EQ(sp.unk_id(), 0);
  EXPECT_EQ(sp.bos_id(), 1);
  EXPECT_EQ(sp.eos_id(), 2);
  EXPECT_EQ(sp.pad_id(), 3);

  std::vector<std::string> pieces;
  ASSERT_TRUE(sp.Encode("<image>\nWhat colour is the bus?", &pieces).ok());
  ASSERT_FALSE(pieces.empty());
  EXPECT_EQ(pieces[0], "<image>");
  for (const char* symbol : {"<image>", "<|system|>", "<|user|>", "<|assistant|>"}) {
    ASSERT_TRUE(sp.Encode(symbol, &pieces).ok());
    EXPECT_EQ(pieces, std::vector<std::string>{symbol});
  }
  // Whitespace survives, so a "\n" turn end is a token of its own.
  std::vector<int> ids;
  ASSERT_TRUE(sp.Encode("\n", &ids).ok());
  EXPECT_EQ(ids.size(), 1u);
  // The vocabulary learned words of the conversations, not just characters.
  EXPECT_GT(sp.GetPieceSize(), 100);
}

TEST_F(MakeSampleTest, RejectsBadOptions) {
  MakeSampleOptions options;
  EXPECT_EQ(MakeSample(options).status().code(), StatusCode::kInvalidArgument);
  options = Options("bad", 1);
  options.samples = 0;
  EXPECT_EQ(MakeSample(options).status().code(), StatusCode::kInvalidArgument);
  options = Options("bad", -1);
  EXPECT_EQ(MakeSample(options).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace headrace
