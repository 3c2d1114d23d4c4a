// The VLM mix (SampleMix::kVlm, make_sample.h): its shapes' distribution, the records
// written (placeholders equal to images, in order; files of the declared sizes) and
// determinism.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/rng.h"
#include "make_sample/make_sample.h"
#include "test_files.h"

namespace headrace {
namespace make_sample_vlm_test {

namespace fs = std::filesystem;
using test::Lines;
using test::ReadFile;

constexpr int64_t kSamples = 40;
constexpr uint64_t kSeed = 3;

int64_t Count(std::string_view text, std::string_view what) {
  int64_t n = 0;
  for (size_t at = text.find(what); at != std::string_view::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(VlmShape, SpreadsTurnsImagesSizesAndVideosOverTheirRanges) {
  constexpr int kKeys = 4000;
  std::map<int, int> pairs, images;
  std::set<std::pair<int, int>> aspects;  // reduced width:height
  int videos = 0, tall = 0, wide = 0;
  int min_side = kVlmMaxSide, max_side = 0;
  for (int i = 0; i < kKeys; ++i) {
    const VlmSampleShape shape = VlmShape(HashKeys(kSeed, static_cast<uint64_t>(i)));
    ASSERT_GE(shape.pairs, 1);
    ASSERT_LE(shape.pairs, kVlmMaxPairs);
    ASSERT_LE(static_cast<int>(shape.images.size()), kVlmMaxImages);
    ++pairs[shape.pairs];
    ++images[static_cast<int>(shape.images.size())];
    videos += shape.video;
    for (const auto& [w, h] : shape.images) {
      ASSERT_GE(std::min(w, h), kVlmMinSide) << w << "x" << h;
      ASSERT_LE(std::max(w, h), kVlmMaxSide) << w << "x" << h;
      min_side = std::min({min_side, w, h});
      max_side = std::max({max_side, w, h});
      tall += h > w;
      wide += w >= 2 * h;
    }
  }
  // Every count of pictures, and turns from one to twenty, with one the commonest.
  for (int n = 0; n <= kVlmMaxImages; ++n) EXPECT_GT(images[n], kKeys / 20) << n << " images";
  EXPECT_GT(images[1], images[2]);
  EXPECT_NEAR(pairs[1], kKeys * 0.368, kKeys * 0.04);
  EXPECT_GT(pairs[kVlmMaxPairs], 0);
  int long_ones = 0;
  for (const auto& [n, count] : pairs) long_ones += n >= 10 ? count : 0;
  EXPECT_GT(long_ones, kKeys / 10);
  EXPECT_NEAR(videos, kKeys * 0.15, kKeys * 0.03);
  // Sizes fill 200..2000; portraits and wide panoramas both appear.
  EXPECT_LT(min_side, 260);
  EXPECT_GT(max_side, 1940);
  EXPECT_GT(tall, 500);
  EXPECT_GT(wide, 500);
}

TEST(VlmShape, IsAPureFunctionOfTheKey) {
  for (uint64_t i = 0; i < 50; ++i) {
    const VlmSampleShape a = VlmShape(HashKeys(kSeed, i)), b = VlmShape(HashKeys(kSeed, i));
    EXPECT_EQ(a.pairs, b.pairs);
    EXPECT_EQ(a.images, b.images);
    EXPECT_EQ(a.video, b.video);
  }
}

class MakeSampleVlmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* env = std::getenv("HEADRACE_TEST_TMP");
    root_ = fs::path(env != nullptr ? env : "/tmp") /
            ("make_sample_vlm_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    auto stats = MakeSample(Options("two_threads", 2));
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    stats_ = *stats;
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  static MakeSampleOptions Options(const std::string& name, int threads, uint64_t seed = kSeed) {
    MakeSampleOptions options;
    options.out_dir = (root_ / name).string();
    options.samples = kSamples;
    options.seed = seed;
    options.threads = threads;
    options.vocab_size = 500;
    options.mix = SampleMix::kVlm;
    return options;
  }
  static fs::path Dir() { return root_ / "two_threads"; }

  static inline fs::path root_;
  static inline MakeSampleStats stats_;
};

TEST_F(MakeSampleVlmTest, EachRecordHasItsShapesPicturesAndOnePlaceholderEach) {
  const std::vector<std::string> lines = Lines(ReadFile(Dir() / "manifest.jsonl"));
  ASSERT_EQ(static_cast<int64_t>(lines.size()), kSamples);
  std::unique_ptr<void, int (*)(void*)> tj(tjInitDecompress(), &tjDestroy);
  ASSERT_NE(tj, nullptr);
  simdjson::dom::parser parser;
  int64_t images = 0, videos = 0;
  std::set<size_t> counts;
  for (int64_t i = 0; i < kSamples; ++i) {
    SCOPED_TRACE(lines[i]);
    const VlmSampleShape shape = VlmShape(HashKeys(kSeed, static_cast<uint64_t>(i)));
    simdjson::dom::element record;
    ASSERT_EQ(parser.parse(lines[i]).get(record), simdjson::SUCCESS);
    std::string_view ignored;
    EXPECT_NE(record["image"].get(ignored), simdjson::SUCCESS) << "no single-image key";

    simdjson::dom::array paths;
    ASSERT_EQ(record["images"].get(paths), simdjson::SUCCESS);
    ASSERT_EQ(paths.size(), shape.images.size());
    counts.insert(paths.size());
    size_t k = 0;
    for (simdjson::dom::element p : paths) {
      std::string_view path;
      ASSERT_EQ(p.get(path), simdjson::SUCCESS);
      char want[64];
      std::snprintf(want, sizeof(want), "images/%06lld_%zu.jpg", static_cast<long long>(i), k);
      EXPECT_EQ(path, want);
      const std::string jpeg = ReadFile(Dir() / path);
      int width = 0, height = 0, subsampling = 0, colorspace = 0;
      ASSERT_EQ(tjDecompressHeader3(tj.get(), reinterpret_cast<const unsigned char*>(jpeg.data()),
                                    jpeg.size(), &width, &height, &subsampling, &colorspace),
                0);
      EXPECT_EQ(std::pair(width, height), shape.images[k]);
      ++k;
    }
    images += static_cast<int64_t>(k);

    std::string_view video;
    const bool has_video = record["video"].get(video) == simdjson::SUCCESS;
    EXPECT_EQ(has_video, shape.video);
    if (has_video) {
      EXPECT_TRUE(fs::is_regular_file(Dir() / video)) << video;
      ++videos;
    }

    simdjson::dom::array turns;
    ASSERT_EQ(record["conversations"].get(turns), simdjson::SUCCESS);
    EXPECT_EQ(turns.size(), 2u * shape.pairs);
    int64_t placeholders = 0, video_placeholders = 0, t = 0;
    for (simdjson::dom::element turn : turns) {
      std::string_view from, value;
      ASSERT_EQ(turn["from"].get(from), simdjson::SUCCESS);
      ASSERT_EQ(turn["value"].get(value), simdjson::SUCCESS);
      EXPECT_EQ(from, t % 2 == 0 ? "human" : "gpt");
      EXPECT_FALSE(value.empty());
      if (t % 2 == 1) {
        EXPECT_EQ(Count(value, "<"), 0) << "an answer with a placeholder";
      }
      // Image k is introduced with its name: placeholders come in the pictures' order.
      for (size_t at = value.find("<image>\n"); at != std::string_view::npos;
           at = value.find("<image>\n", at + 1)) {
        ++placeholders;
      }
      // A question opening with pictures asks about the last of them, by name when the
      // sample has several pictures or a video too.
      if (paths.size() + has_video > 1 && Count(value, "<image>") > 0) {
        const std::string last = "<image>\nPicture " + std::to_string(placeholders) + ": ";
        EXPECT_NE(value.find(last), std::string_view::npos) << last;
      }
      video_placeholders += Count(value, "<video>");
      if (t == 0 && has_video) {
        EXPECT_TRUE(value.starts_with("<video>\n"));
      }
      if (t == 0 && paths.size() == 0 && !has_video) {
        EXPECT_TRUE(value.starts_with("Picture this: A ")) << "a text-only sample's scene";
      }
      ++t;
    }
    EXPECT_EQ(placeholders, static_cast<int64_t>(paths.size()));
    EXPECT_EQ(Count(lines[i], "<image>"), placeholders) << "no placeholder but '<image>\\n'";
    EXPECT_EQ(video_placeholders, has_video ? 1 : 0);
  }
  EXPECT_GE(counts.size(), 4u) << "40 samples should show most picture counts";
  EXPECT_EQ(stats_.images, images);
  EXPECT_EQ(stats_.videos, videos);
  EXPECT_GT(videos, 0);
  EXPECT_TRUE(fs::is_regular_file(Dir() / "tokenizer.model"));
}

TEST_F(MakeSampleVlmTest, OutputIsAPureFunctionOfSamplesAndSeed) {
  auto stats = MakeSample(Options("one_thread", 1));
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  const fs::path other = root_ / "one_thread";
  EXPECT_EQ(ReadFile(other / "manifest.jsonl"), ReadFile(Dir() / "manifest.jsonl"));
  EXPECT_EQ(ReadFile(other / "tokenizer.model"), ReadFile(Dir() / "tokenizer.model"));
  for (const char* folder : {"images", "videos"}) {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(Dir() / folder)) {
      names.insert(entry.path().filename().string());
    }
    for (const auto& entry : fs::directory_iterator(other / folder)) {
      EXPECT_TRUE(names.count(entry.path().filename().string())) << entry.path();
    }
    for (const std::string& name : names) {
      EXPECT_EQ(ReadFile(other / folder / name), ReadFile(Dir() / folder / name)) << name;
    }
  }
  EXPECT_EQ(stats->image_bytes, stats_.image_bytes);

  auto seeded = MakeSample(Options("seed_4", 2, /*seed=*/4));
  ASSERT_TRUE(seeded.ok()) << seeded.status().ToString();
  EXPECT_NE(ReadFile(root_ / "seed_4" / "manifest.jsonl"), ReadFile(Dir() / "manifest.jsonl"));
}

TEST_F(MakeSampleVlmTest, RefusesOtherMediaAndAFixedSize) {
  for (auto set : {+[](MakeSampleOptions& o) { o.video = true; },
                   +[](MakeSampleOptions& o) { o.audio = true; },
                   +[](MakeSampleOptions& o) { o.ocr = true; },
                   +[](MakeSampleOptions& o) { o.pointcloud = true; },
                   +[](MakeSampleOptions& o) { o.width = 64, o.height = 48; }}) {
    MakeSampleOptions options = Options("refused", 1);
    set(options);
    EXPECT_EQ(MakeSample(options).status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace make_sample_vlm_test
}  // namespace headrace
