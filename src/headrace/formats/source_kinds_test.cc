#include "headrace/formats/source_kinds.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "headrace/formats/parquet_test_util.h"

namespace headrace {
namespace source_kinds_test {
namespace fs = std::filesystem;

// A blend entry named `name` over `source`, weight 1.
MixEntrySpec Entry(std::string name, SourceSpec source = {}) {
  MixEntrySpec e;
  e.name = std::move(name);
  e.source = std::move(source);
  return e;
}

TEST(SourceKinds, EachIsSelectedByItsKeyAndASpecWithNoneIsAManifest) {
  std::set<std::string_view> keys;
  for (const SourceKind& kind : SourceKinds()) {
    EXPECT_TRUE(keys.insert(kind.key).second) << kind.key;
    EXPECT_NE(kind.open, nullptr) << kind.key;
    EXPECT_NE(kind.check_keys, nullptr) << kind.key;
  }
  EXPECT_EQ(SourceKindOf(SourceSpec{}).key, "manifest");
  SourceSpec spec;
  spec.shards = "s-{0..1}.tar";
  EXPECT_EQ(SourceKindOf(spec).key, "shards");
  spec.parquet = "p.parquet";  // several: the last in the table (validation names it)
  EXPECT_EQ(SourceKindOf(spec).key, "parquet");
  spec.mix = {Entry("a")};  // a blend outranks any key beside it
  EXPECT_EQ(SourceKindOf(spec).key, "mix");
  EXPECT_TRUE(SourceKindOf(spec).blend);
}

TEST(SourceKinds, OnlyAManifestHasAMediaRootAndABlendsIsItsEntriesCommonFolder) {
  SourceSpec a;
  a.manifest = "/data/vqa/a.jsonl";
  SourceSpec b;
  b.manifest = "/data/ocr/b.jsonl";
  SourceSpec shards;
  shards.shards = "/elsewhere/s-{0..1}.tar";
  SourceSpec mix;
  mix.mix = {Entry("a", a), Entry("b", b), Entry("s", shards)};
  const SourceKind& kind = SourceKindOf(mix);
  ASSERT_NE(kind.media_root, nullptr);
  EXPECT_EQ(*kind.media_root(mix), "/data");
  EXPECT_EQ(*SourceKindOf(a).media_root(a), "/data/vqa");
  EXPECT_EQ(SourceKindOf(shards).media_root, nullptr);
}

TEST(ReadPolicy, AParquetSourcesReadsAreBoundedByItsCacheAndABlendTakesTheLoosest) {
  const fs::path dir =
      fs::temp_directory_path() / ("source_kinds_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const Buffer bytes = parquet_test::WriteParquet(parquet_test::MakeRows(4), 2);
  std::ofstream(dir / "p.parquet", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  std::ofstream(dir / "m.jsonl") << R"({"id": "0", "conversations": [{"from": "human", "value": "hi"}]})"
                                 << "\n";
  SourceSpec parquet;
  parquet.parquet = (dir / "p.parquet").string();
  SourceSpec manifest;
  manifest.manifest = (dir / "m.jsonl").string();
  SourceOptions options;
  options.memory_budget_bytes = int64_t{64} << 20;
  options.samples_in_flight = 4;

  auto p = OpenSource(parquet, options, MakeLocalStorage());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->read_policy(), ReadPolicy::kBoundedByCache);
  auto m = OpenSource(manifest, options, MakeLocalStorage());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->read_policy(), ReadPolicy::kHeldToIoBudget);

  SourceSpec mix;
  mix.mix = {Entry("m", manifest)};
  auto alone = OpenSource(mix, options, MakeLocalStorage());
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_EQ((*alone)->read_policy(), ReadPolicy::kHeldToIoBudget);
  mix.mix.push_back(Entry("p", parquet));
  mix.mix[1].source.fields = ResolvedFields(manifest);  // the same layout as the manifest's
  auto both = OpenSource(mix, options, MakeLocalStorage());
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ((*both)->read_policy(), ReadPolicy::kBoundedByCache);
  fs::remove_all(dir);
}

}  // namespace source_kinds_test
}  // namespace headrace
