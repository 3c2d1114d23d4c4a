#include "shard.h"

#include <gtest/gtest.h>
#include <simdjson.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "headrace/formats/tar_shard.h"
#include "make_sample/make_sample.h"
#include "test_files.h"

// Its own namespace: the folder's tests compile as one unity file (CMakeLists.txt).
namespace headrace::shard_test {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSamples = 12;

using test::Lines;
using test::ReadFile;

std::span<const uint8_t> Span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

class ShardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* env = std::getenv("HEADRACE_TEST_TMP");
    root_ = fs::path(env != nullptr ? env : "/tmp") / ("shard_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    MakeSampleOptions options;
    options.out_dir = (root_ / "data").string();
    options.samples = kSamples;
    options.seed = 3;
    options.threads = 2;
    options.vocab_size = 300;
    auto stats = MakeSample(options);
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }
  static fs::path Data() { return root_ / "data"; }
  static ShardOptions Options(const std::string& out, int64_t target_bytes = 200'000) {
    ShardOptions options;
    options.manifest = (Data() / "manifest.jsonl").string();
    options.out_dir = (root_ / out).string();
    options.target_bytes = target_bytes;
    return options;
  }

  static inline fs::path root_;
};

TEST_F(ShardTest, EveryMemberHoldsTheOriginalBytesAndTheIndexPointsAtThem) {
  const ShardOptions options = Options("round_trip");
  auto stats = WriteShards(options);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->samples, kSamples);
  EXPECT_GT(stats->shards, 1);  // the JPEGs total more than 200 kB
  EXPECT_TRUE(stats->skipped.empty());

  const std::vector<std::string> lines = Lines(ReadFile(Data() / "manifest.jsonl"));
  const fs::path out = options.out_dir;
  simdjson::dom::parser parser;
  simdjson::dom::object shards_json;
  const simdjson::padded_string shards_text =
      simdjson::padded_string(ReadFile(out / "shards.json"));
  ASSERT_EQ(parser.parse(shards_text).get(shards_json), simdjson::SUCCESS);
  int64_t total = 0;
  ASSERT_EQ(shards_json["samples"].get(total), simdjson::SUCCESS);
  EXPECT_EQ(total, kSamples);
  simdjson::dom::array shard_list;
  ASSERT_EQ(shards_json["shards"].get(shard_list), simdjson::SUCCESS);
  EXPECT_EQ(static_cast<int64_t>(shard_list.size()), stats->shards);

  int64_t sample = 0;
  for (simdjson::dom::element entry : shard_list) {
    std::string_view name, index_name;
    int64_t first_sample = -1, count = -1, bytes = -1;
    ASSERT_EQ(entry["shard"].get(name), simdjson::SUCCESS);
    ASSERT_EQ(entry["index"].get(index_name), simdjson::SUCCESS);
    ASSERT_EQ(entry["first_sample"].get(first_sample), simdjson::SUCCESS);
    ASSERT_EQ(entry["samples"].get(count), simdjson::SUCCESS);
    ASSERT_EQ(entry["bytes"].get(bytes), simdjson::SUCCESS);
    SCOPED_TRACE(std::string(name));
    EXPECT_EQ(first_sample, sample);
    const std::string tar = ReadFile(out / name);
    EXPECT_EQ(bytes, static_cast<int64_t>(tar.size()));
    if (count > 1) {
      EXPECT_LE(bytes, options.target_bytes);
    }

    const TarListing listing = ListTarMembers(Span(tar));
    ASSERT_TRUE(listing.status.ok()) << listing.status.ToString();
    ASSERT_EQ(static_cast<int64_t>(listing.members.size()), 2 * count);
    auto index = ParseShardIndex(ReadFile(out / index_name));
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    EXPECT_EQ(index->shard, name);
    EXPECT_EQ(index->bytes, bytes);
    ASSERT_EQ(static_cast<int64_t>(index->samples.size()), count);
    for (int64_t k = 0; k < count; ++k, ++sample) {
      char key[16];
      std::snprintf(key, sizeof key, "%09lld", static_cast<long long>(sample));
      char image[32];
      std::snprintf(image, sizeof image, "images/%06lld.jpg", static_cast<long long>(sample));
      const std::string jpeg = ReadFile(Data() / image);
      const TarMember& jpg_member = listing.members[2 * k];
      const TarMember& json_member = listing.members[2 * k + 1];
      EXPECT_EQ(jpg_member.name, std::string(key) + ".jpg");
      EXPECT_EQ(json_member.name, std::string(key) + ".json");
      EXPECT_EQ(tar.substr(jpg_member.offset, jpg_member.size), jpeg);
      EXPECT_EQ(tar.substr(json_member.offset, json_member.size), lines[sample]);

      const ShardIndex::Sample& indexed = index->samples[k];
      EXPECT_EQ(indexed.key, key);
      ASSERT_EQ(indexed.fields.size(), 2u);
      EXPECT_EQ(indexed.fields[0].name, "jpg");
      EXPECT_EQ(tar.substr(indexed.fields[0].offset, indexed.fields[0].size), jpeg);
      EXPECT_EQ(indexed.fields[1].name, "json");
      EXPECT_EQ(tar.substr(indexed.fields[1].offset, indexed.fields[1].size), lines[sample]);
    }
  }
  EXPECT_EQ(sample, kSamples);
}

TEST_F(ShardTest, SameInputGivesIdenticalFiles) {
  ASSERT_TRUE(WriteShards(Options("first")).ok());
  ASSERT_TRUE(WriteShards(Options("second")).ok());
  std::vector<std::string> names;
  for (const auto& file : fs::directory_iterator(root_ / "first")) {
    names.push_back(file.path().filename().string());
  }
  ASSERT_GE(names.size(), 5u);  // at least two shards, their indexes, shards.json
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(fs::exists(root_ / "second" / name));
    EXPECT_EQ(ReadFile(root_ / "first" / name), ReadFile(root_ / "second" / name));
  }
}

TEST_F(ShardTest, OneShardWhenTheTargetIsLarge) {
  auto stats = WriteShards(Options("one", 1LL << 30));
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->shards, 1);
  EXPECT_EQ(stats->samples, kSamples);
}

TEST_F(ShardTest, BadRecordsAreSkippedTextOnlyRecordsKept) {
  const fs::path manifest = Data() / "mixed.jsonl";
  {
    std::ofstream out(manifest, std::ios::binary);
    out << R"({"id":"a","image":"images/000000.jpg","conversations":[]})"
        << "\n"
        << "not json\n"
        << R"({"id":"b","conversations":[{"from":"human","value":"hi"}]})"
        << "\n";
  }
  ShardOptions options = Options("mixed");
  options.manifest = manifest.string();
  auto stats = WriteShards(options);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->samples, 2);
  ASSERT_EQ(stats->skipped.size(), 1u);
  EXPECT_NE(stats->skipped[0].find("line 2"), std::string::npos) << stats->skipped[0];

  const std::string tar = ReadFile(root_ / "mixed" / "shard-000000.tar");
  const TarListing listing = ListTarMembers(Span(tar));
  ASSERT_TRUE(listing.status.ok());
  ASSERT_EQ(listing.members.size(), 3u);
  EXPECT_EQ(listing.members[0].name, "000000000.jpg");
  EXPECT_EQ(listing.members[1].name, "000000000.json");
  EXPECT_EQ(listing.members[2].name, "000000002.json");  // the record's index, not a count
}

TEST_F(ShardTest, AJsonArrayManifestShardsItsElementsNamedByIndex) {
  // LLaVA's files: one array, elements over several lines, a bad one among them.
  const fs::path manifest = Data() / "array.json";
  {
    std::ofstream out(manifest, std::ios::binary);
    out << "[\n  " << R"({"id":"a","image":"images/000000.jpg",)" << "\n    "
        << R"("conversations":[{"from":"human","value":"] , ["}]})"
        << ",\n  not json,\n  "
        << R"({"id":"b","conversations":[{"from":"human","value":"hi"}]})"
        << "\n]\n";
  }
  ShardOptions options = Options("array");
  options.manifest = manifest.string();
  auto stats = WriteShards(options);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->samples, 2);
  ASSERT_EQ(stats->skipped.size(), 1u);
  EXPECT_EQ(stats->skipped[0].rfind("element 1: ", 0), 0u) << stats->skipped[0];

  const std::string tar = ReadFile(root_ / "array" / "shard-000000.tar");
  const TarListing listing = ListTarMembers(Span(tar));
  ASSERT_TRUE(listing.status.ok());
  ASSERT_EQ(listing.members.size(), 3u);
  EXPECT_EQ(listing.members[1].name, "000000000.json");
  EXPECT_EQ(listing.members[2].name, "000000002.json");
  // Each .json member is its element's text, as a JSONL line would be.
  const TarMember& json = listing.members[2];
  EXPECT_EQ(tar.substr(static_cast<size_t>(json.offset), static_cast<size_t>(json.size)),
            R"({"id":"b","conversations":[{"from":"human","value":"hi"}]})");
}

TEST_F(ShardTest, MissingMediaFailsNamingTheLine) {
  const fs::path manifest = Data() / "missing.jsonl";
  {
    std::ofstream out(manifest, std::ios::binary);
    out << R"({"id":"a","image":"images/nope.jpg","conversations":[]})"
        << "\n";
  }
  ShardOptions options = Options("missing");
  options.manifest = manifest.string();
  auto stats = WriteShards(options);
  EXPECT_EQ(stats.status().code(), StatusCode::kNotFound) << stats.status().ToString();
  EXPECT_NE(stats.status().message().find("line 1"), std::string::npos);
}


// A manifest of several media per record (made-up bytes: shard copies, never decodes).
fs::path WriteMultiMedia(const fs::path& dir, const std::string& second_image_key) {
  fs::create_directories(dir);
  for (const char* name : {"a.jpg", "a.mp4", "a.wav", "v0.png", "v1.png", "b.jpg", "c.jpg"}) {
    std::ofstream(dir / name, std::ios::binary) << "bytes of " << name;
  }
  const fs::path manifest = dir / "multi.jsonl";
  std::ofstream out(manifest, std::ios::binary);
  out << R"({"id":"0","image":"a.jpg","video":"a.mp4","audio":"a.wav","views":["v0.png","v1.png"],)"
      << R"("conversations":[{"from":"human","value":"hi"}]})" << "\n";
  out << R"({"id":"1","image":"b.jpg",")" << second_image_key
      << R"(":"c.jpg","conversations":[]})" << "\n";
  return manifest;
}

TEST_F(ShardTest, EachMediaKeyBecomesAMemberAndListItemsAreNumbered) {
  ShardOptions options = Options("multi");
  options.manifest = WriteMultiMedia(root_ / "multi_src", "poster").string();
  options.media = {"image", "video", "audio", "views:4"};
  auto stats = WriteShards(options);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  ASSERT_EQ(stats->shards, 1);
  const std::string tar = ReadFile(fs::path(options.out_dir) / "shard-000000.tar");
  const TarListing listing = ListTarMembers(Span(tar));
  ASSERT_TRUE(listing.status.ok()) << listing.status.ToString();
  std::vector<std::string> names;
  for (const TarMember& m : listing.members) {
    names.push_back(m.name);
    const std::string data = tar.substr(static_cast<size_t>(m.offset), static_cast<size_t>(m.size));
    if (m.name == "000000000.mp4") EXPECT_EQ(data, "bytes of a.mp4");
    if (m.name == "000000000.1.png") EXPECT_EQ(data, "bytes of v1.png");
    if (m.name == "000000001.jpg") EXPECT_EQ(data, "bytes of b.jpg");
  }
  // Record 1's "poster" is not a media key here: it stays in the JSON only.
  EXPECT_EQ(names, (std::vector<std::string>{"000000000.jpg", "000000000.mp4", "000000000.wav",
                                             "000000000.0.png", "000000000.1.png",
                                             "000000000.json", "000000001.jpg",
                                             "000000001.json"}));
}

TEST_F(ShardTest, TwoMediaOfOneExtensionFailNamingBothKeys) {
  ShardOptions options = Options("clash");
  options.manifest = WriteMultiMedia(root_ / "clash_src", "thumb").string();
  options.media = {"image", "thumb"};
  auto stats = WriteShards(options);
  ASSERT_EQ(stats.status().code(), StatusCode::kInvalidArgument) << stats.status().ToString();
  EXPECT_NE(stats.status().message().find("line 2: 'image' and 'thumb'"), std::string::npos)
      << stats.status().message();
}

TEST_F(ShardTest, BadMediaKeysAreRefusedBeforeAnyShard) {
  for (const std::string& bad : {"views:0", "views:x", "json", "", ":3"}) {
    ShardOptions options = Options("bad_media");
    options.media = {"image", bad};
    auto stats = WriteShards(options);
    EXPECT_EQ(stats.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(fs::exists(fs::path(options.out_dir) / "shard-000000.tar")) << bad;
  }
  ShardOptions twice = Options("bad_media");
  twice.media = {"image", "image"};
  EXPECT_EQ(WriteShards(twice).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace headrace::shard_test
