#include "headrace/exec/size_index.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace headrace {
namespace {

std::string TempPath(const char* name) {
  return (std::filesystem::temp_directory_path() /
          (std::string(name) + "_" + std::to_string(::getpid())))
      .string();
}

TEST(SizeIndex, WritesAndReadsEverySamplesSizes) {
  const std::vector<std::optional<SampleSize>> sizes = {
      SampleSize{.tokens = 120, .patches = {64, 256}}, std::nullopt, SampleSize{.tokens = 7}};
  const std::string path = TempPath("sizes");
  ASSERT_TRUE(SizeIndex::Of("abc123", sizes).Write(path).ok());
  Result<SizeIndex> index = SizeIndex::Read(path);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->fingerprint(), "abc123");
  ASSERT_EQ(index->size(), 3);
  EXPECT_EQ(index->At(0)->tokens, 120);
  EXPECT_EQ(index->At(0)->patches, (std::vector<int64_t>{64, 256}));
  EXPECT_FALSE(index->At(1).has_value()) << "not told when built";
  EXPECT_EQ(index->TokensAt(0), 120);
  EXPECT_FALSE(index->TokensAt(1).has_value());
  EXPECT_FALSE(index->TokensAt(3).has_value());
  EXPECT_EQ(index->At(2)->tokens, 7);
  EXPECT_TRUE(index->At(2)->patches.empty());
  EXPECT_FALSE(index->At(3).has_value());
  EXPECT_FALSE(index->At(-1).has_value());
  std::filesystem::remove(path);
}

TEST(SizeIndex, AnIndexWithoutPatchesOrSamplesReadsBack) {
  // Text-only samples: no patch at all (an empty array read into an empty vector, whose
  // data() is null: UBSan's "null pointer passed" before Reader::Take skipped n == 0).
  const std::string path = TempPath("sizes_text");
  const std::vector<std::optional<SampleSize>> text = {SampleSize{.tokens = 5},
                                                       SampleSize{.tokens = 9}};
  ASSERT_TRUE(SizeIndex::Of("t", text).Write(path).ok());
  Result<SizeIndex> index = SizeIndex::Read(path);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->At(1)->tokens, 9);
  EXPECT_TRUE(index->At(1)->patches.empty());
  ASSERT_TRUE(SizeIndex::Of("none", std::vector<std::optional<SampleSize>>{}).Write(path).ok());
  index = SizeIndex::Read(path);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->size(), 0);
  std::filesystem::remove(path);
}

TEST(SizeIndex, AMissingCutOrForeignFileIsRefusedNamingIt) {
  const std::string path = TempPath("sizes_cut");
  EXPECT_EQ(SizeIndex::Read(path).status().code(), StatusCode::kNotFound);
  const std::vector<std::optional<SampleSize>> sizes(100, SampleSize{.tokens = 5, .patches = {4}});
  ASSERT_TRUE(SizeIndex::Of("f", sizes).Write(path).ok());
  const auto full = std::filesystem::file_size(path);
  for (auto keep : {full - 1, full / 2, uintmax_t{12}, uintmax_t{3}}) {
    std::filesystem::resize_file(path, keep);
    Result<SizeIndex> index = SizeIndex::Read(path);
    ASSERT_FALSE(index.ok()) << keep << " bytes";
    EXPECT_EQ(index.status().code(), StatusCode::kCorruptData);
    EXPECT_NE(index.status().message().find(path), std::string::npos);
  }
  std::ofstream(path, std::ios::trunc) << "{\"not\": \"an index\"}";
  EXPECT_EQ(SizeIndex::Read(path).status().code(), StatusCode::kCorruptData);
  std::filesystem::remove(path);
}

TEST(SizeIndex, RangesBuiltApartJoinIntoTheWholeIndexByteForByte) {
  // What headrace.ray.build_size_index does: each worker sizes a range of samples, its
  // part travels as bytes, the driver joins the parts in order.
  std::vector<std::optional<SampleSize>> sizes;
  for (int i = 0; i < 10; ++i) {
    if (i == 4) {
      sizes.push_back(std::nullopt);
      continue;
    }
    std::vector<int64_t> patches(static_cast<size_t>(i % 3), 16 * (i + 1));
    sizes.push_back(SampleSize{.tokens = 10 + i, .patches = patches, .modalities = uint32_t(i % 2)});
  }
  const SizeIndex whole = SizeIndex::Of("fp", sizes);
  EXPECT_EQ(whole.untold(), 1);
  std::vector<SizeIndex> parts;
  for (const auto [begin, end] : {std::pair{0, 3}, std::pair{3, 3}, std::pair{3, 7}, std::pair{7, 10}}) {
    const std::string bytes =
        SizeIndex::Of("fp", std::span(sizes).subspan(begin, end - begin)).Serialize();
    Result<SizeIndex> part = SizeIndex::Parse(bytes, "part");
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    parts.push_back(*std::move(part));
  }
  Result<SizeIndex> joined = SizeIndex::Join(parts);
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  EXPECT_EQ(joined->Serialize(), whole.Serialize());
  EXPECT_EQ(joined->At(5)->patches, (std::vector<int64_t>{96, 96}));

  parts.push_back(SizeIndex::Of("another", sizes));
  Result<SizeIndex> mixed = SizeIndex::Join(parts);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("another"), std::string::npos);
  EXPECT_EQ(SizeIndex::Parse(whole.Serialize().substr(0, 40), "cut").status().code(),
            StatusCode::kCorruptData);
}

}  // namespace
}  // namespace headrace
