#include "headrace/formats/shard_set.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

// Its own namespace: the folder's tests compile as one unity file (CMakeLists.txt).
#include "headrace/formats/record_test_util.h"
#include "headrace/formats/source.h"

namespace headrace::shard_set_test {
namespace {

namespace fs = std::filesystem;

fs::path TempDir() {
  const char* env = std::getenv("HEADRACE_TEST_TMP");
  const fs::path dir = fs::path(env != nullptr ? env : "/tmp") /
                       ("shard_set_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

const char* kConversation =
    R"({"id": "x", "conversations": [{"from": "human", "value": "<image>\nHi?"}, )"
    R"({"from": "gpt", "value": "Hello."}]})";

// Writes a tar of (name, data) members; with `index`, its sidecar index too.
std::string WriteShard(const std::string& file,
                       const std::vector<std::pair<std::string, std::string>>& members,
                       bool index = true) {
  const fs::path path = TempDir() / file;
  auto writer = TarWriter::Open(path.string());
  EXPECT_TRUE(writer.ok());
  for (const auto& [name, data] : members) EXPECT_TRUE((*writer)->Add(name, Bytes(data)).ok());
  EXPECT_TRUE((*writer)->Close().ok());
  fs::remove(path.string() + ".idx.json");
  if (index) {
    const std::string bytes = ReadText(path);
    const TarListing listing = ListTarMembers(Bytes(bytes));
    EXPECT_TRUE(listing.status.ok());
    const auto samples = GroupSamples(listing.members);
    std::ofstream(path.string() + ".idx.json")
        << ShardIndexToJson(MakeShardIndex(file, static_cast<int64_t>(bytes.size()), samples));
  }
  return path.string();
}

TEST(ExpandShardPattern, BraceRangesKeepTheirWidthAndExpandInOrder) {
  auto names = ExpandShardPattern("s3://b/{a,b}/shard-{008..011}.tar");
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  const std::vector<std::string> want = {
      "s3://b/a/shard-008.tar", "s3://b/a/shard-009.tar", "s3://b/a/shard-010.tar",
      "s3://b/a/shard-011.tar", "s3://b/b/shard-008.tar", "s3://b/b/shard-009.tar",
      "s3://b/b/shard-010.tar", "s3://b/b/shard-011.tar"};
  EXPECT_EQ(*names, want);
  EXPECT_EQ(*ExpandShardPattern("/d/x.tar"), std::vector<std::string>{"/d/x.tar"});
}

TEST(ExpandShardPattern, BadPatternsAreConfigErrorsNamingTheKey) {
  for (const char* bad : {"s{1..}.tar", "s{3..1}.tar", "s{1..2.tar", "s}.tar", "s{}.tar",
                          "s3://b/shard-*.tar", "https://h/s-?.tar", ""}) {
    auto r = ExpandShardPattern(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("source.shards"), std::string::npos)
        << r.status().ToString();
  }
  auto s3 = ExpandShardPattern("s3://b/shard-*.tar");
  EXPECT_NE(s3.status().message().find("brace range"), std::string::npos);
}

int64_t PeakRssBytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

TEST(ExpandShardPattern, PatternsOverTheCapAreRefusedBeforeTheyExpand) {
  // Expanded first and counted after, the first took 2.6 GiB and 4 s before its refusal.
  const int64_t before = PeakRssBytes();
  for (const char* big : {"s-{0..99999}{0..99999}.tar", "s-{0..9999999}{0..9999999}.tar",
                          "{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}/s.tar",
                          "s-{0..9999999}{a,b}.tar", "s-{0..999999999999999999}.tar"}) {
    auto r = ExpandShardPattern(big);
    ASSERT_FALSE(r.ok()) << big;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << big;
    EXPECT_NE(r.status().message().find("source.shards: "), std::string::npos) << big;
    EXPECT_NE(r.status().message().find("more than 10,000,000 shards"), std::string::npos)
        << r.status().ToString();
  }
  EXPECT_LT(PeakRssBytes() - before, int64_t{64} << 20);
  auto million = ExpandShardPattern("s-{00..99}{00..99}{00..99}.tar");
  ASSERT_TRUE(million.ok());
  ASSERT_EQ(million->size(), 1'000'000u);
  EXPECT_EQ(million->at(10'203), "s-010203.tar");
  // Groups do not nest.
  auto nested = ExpandShardPattern("s-{a{0..2}}.tar");
  EXPECT_EQ(nested.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nested.status().message().find("do not nest"), std::string::npos);
}

TEST(ExpandShardPattern, GlobsMatchLocalFilesSorted) {
  const fs::path dir = TempDir() / "glob";
  fs::create_directories(dir);
  for (const char* name : {"b-1.tar", "a-2.tar", "a-1.tar", "a-1.tar.idx.json"}) {
    std::ofstream(dir / name) << "x";
  }
  auto names = ExpandShardPattern((dir / "a-*.tar").string());
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(*names, (std::vector<std::string>{(dir / "a-1.tar").string(),
                                               (dir / "a-2.tar").string()}));
  EXPECT_EQ(ExpandShardPattern((dir / "z-*.tar").string()).status().code(),
            StatusCode::kNotFound);
}

TEST(ParseShardFields, DefaultsAndCustomFields) {
  SourceSpec spec;
  auto map = ParseShardFields(spec.shard_fields);
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  ASSERT_EQ(map->fields.size(), 2u);
  EXPECT_EQ(map->fields[kImageField].name, "image");
  EXPECT_EQ(map->fields[kConversationField].kind, FieldKind::kConversation);
  auto text = ParseShardFields(spec.shard_fields + " text?=txt");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->fields[2].kind, FieldKind::kText);
  EXPECT_EQ(map->FieldOf("png"), kImageField);
  EXPECT_EQ(map->FieldOf("json"), kConversationField);
  EXPECT_EQ(map->FieldOf("mp4"), -1);
  EXPECT_FALSE(map->required[kImageField]);
  EXPECT_TRUE(map->required[kConversationField]);

  auto custom = ParseShardFields("conversation?=json.gz image=jpg depth=seg.png");
  ASSERT_TRUE(custom.ok()) << custom.status().ToString();
  EXPECT_EQ(custom->fields[2].name, "depth");
  EXPECT_EQ(custom->fields[2].kind, FieldKind::kBytes);
  EXPECT_TRUE(custom->required[kImageField]);
  EXPECT_EQ(custom->FieldOf("seg.png"), 2);
  for (const char* bad : {"image", "=jpg", "image=", "image=jpg image=png", "a=jpg b=jpg",
                          "index=bin"}) {
    auto r = ParseShardFields(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("source.shard_fields"), std::string::npos);
  }
}

TEST(LoadShardSet, RecordsFollowShardAndSampleOrderWithMemberRanges) {
  const std::string a = WriteShard("order-000.tar", {{"k0.jpg", "JPEG0"},
                                                     {"k0.json", kConversation},
                                                     {"k1.json", kConversation},
                                                     {"k1.png", "PNG1"}});
  const std::string b = WriteShard("order-001.tar", {{"k2.jpg", "JPEG2"},
                                                     {"k2.json", kConversation},
                                                     {"k2.txt", "caption"}},
                                   /*index=*/false);
  SourceSpec spec;
  spec.shards = (TempDir() / "order-{000..001}.tar").string();
  spec.shard_fields += " text?=txt";
  auto storage = MakeLocalStorage();
  auto source = LoadShardSet(*storage, spec);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(source->shards, (std::vector<std::string>{a, b}));
  EXPECT_EQ(source->shard_samples, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(source->indexed_shards, 1);
  EXPECT_EQ(source->scanned_shards, 1);
  EXPECT_EQ(source->shard_bytes[0], static_cast<int64_t>(fs::file_size(a)));
  ASSERT_EQ(source->records.size(), 3u);
  const SampleRecord& k1 = source->records[1];
  EXPECT_EQ(k1.id, "k1");
  EXPECT_EQ(k1.uri(), a + "#k1");
  ASSERT_EQ(k1.media.size(), 2u);  // in field order: image first, whatever the tar's order
  EXPECT_EQ(k1.media[0].field, kImageField);
  EXPECT_EQ(k1.media[1].field, kConversationField);
  const std::string bytes = ReadText(a);
  EXPECT_EQ(bytes.substr(k1.media[0].offset, k1.media[0].length), "PNG1");
  EXPECT_EQ(bytes.substr(k1.media[1].offset, k1.media[1].length), kConversation);
  const SampleRecord& k2 = source->records[2];
  ASSERT_EQ(k2.media.size(), 3u);
  EXPECT_EQ(k2.media[2].field, 2);
  EXPECT_EQ(ReadText(b).substr(k2.media[2].offset, k2.media[2].length), "caption");
}

TEST(ShardFieldsOf, SourceFieldsKeysAreExtensionListsAndExcludeShardFields) {
  SourceSpec spec;
  spec.fields = {SourceFieldSpec{"views", FieldKind::kImage, "jpg,png", 4, false},
                 SourceFieldSpec{"image", FieldKind::kImage, "jpg", 0, true},
                 SourceFieldSpec{"cls", FieldKind::kInt, "", 0, false},
                 SourceFieldSpec{"conversation", FieldKind::kConversation, "json", 0, false}};
  auto map = ShardFieldsOf(spec);
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->extensions[0], (std::vector<std::string>{"jpg", "png"}));
  EXPECT_EQ(map->extensions[2], (std::vector<std::string>{"cls"}));  // key = name
  EXPECT_EQ(map->conversation, 3);
  EXPECT_TRUE(map->required[1]);
  // A single field takes its extension exactly; a list `<n>.<ext>`.
  EXPECT_EQ(map->ItemOf("jpg").field, 1);
  EXPECT_EQ(map->ItemOf("0.jpg").field, 0);
  EXPECT_EQ(map->ItemOf("12.png").item, 12);
  EXPECT_EQ(map->ItemOf("x.jpg").field, -1);
  EXPECT_EQ(map->ItemOf("1.json").field, -1);
  EXPECT_EQ(map->ItemOf("png").field, -1);

  SourceSpec both = spec;
  both.shard_fields = "image=jpg";
  auto refused = ShardFieldsOf(both);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("source.fields and source.shard_fields are exclusive"),
            std::string::npos);
  SourceSpec twice = spec;
  twice.fields.push_back(SourceFieldSpec{"other", FieldKind::kBytes, "png,jpg", 0, false});
  auto dup = ShardFieldsOf(twice);
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("extension 'jpg' also feeds field 'image'"),
            std::string::npos)
      << dup.status().ToString();
}

SourceSpec ListShardSpec(const std::string& file) {
  SourceSpec spec;
  spec.shards = (TempDir() / file).string();
  spec.fields = {SourceFieldSpec{"views", FieldKind::kImage, "jpg,png", 3, false},
                 SourceFieldSpec{"conversation", FieldKind::kConversation, "json", 0, false},
                 SourceFieldSpec{"label", FieldKind::kInt, "cls", 0, false},
                 SourceFieldSpec{"caption", FieldKind::kText, "txt", 0, false},
                 SourceFieldSpec{"scores", FieldKind::kFloat, "score", 2, false}};
  return spec;
}

// The bytes of each of `record`'s media items of `field`, read from its shard.
std::vector<std::string> Items(const SampleRecord& record, int field) {
  std::vector<std::string> out;
  for (const MediaRef& m : record.media) {
    if (m.field == field) out.push_back(ReadText(m.uri).substr(m.offset, m.length));
  }
  return out;
}

TEST(LoadShardSet, ListMembersAreTheItemsInTheirNumbersOrder) {
  WriteShard("list-000.tar", {{"a.10.jpg", "A10"},  // 10 after 2: numbers, not text
                              {"a.2.png", "A2"},
                              {"a.0.jpg", "A0"},
                              {"a.json", kConversation},
                              {"a.cls", "3\n"},
                              {"a.txt", "a cat"},
                              {"a.1.score", "0.5"},
                              {"b.json", kConversation},  // no views: an empty list
                              {"c.0.jpg", "C0"},
                              {"c.1.jpg", "C1"},
                              {"c.2.jpg", "C2"},
                              {"c.3.jpg", "C3"},  // 4 items, max_items 3
                              {"d.0.jpg", "D0"},
                              {"d.0.png", "D0 again"},  // two members for item 0
                              {"e.1.jpg", "E1"}},
             /*index=*/false);
  auto storage = MakeLocalStorage();
  auto source = LoadShardSet(*storage, ListShardSpec("list-000.tar"));
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ASSERT_EQ(source->records.size(), 5u);
  const SampleRecord& a = source->records[0];
  ASSERT_TRUE(a.status.ok()) << a.status.ToString();
  EXPECT_EQ(Items(a, 0), (std::vector<std::string>{"A0", "A2", "A10"}));
  EXPECT_EQ(Items(a, 2), (std::vector<std::string>{"3\n"}));
  EXPECT_EQ(Items(a, 4), (std::vector<std::string>{"0.5"}));
  EXPECT_TRUE(source->records[1].status.ok());
  EXPECT_TRUE(Items(source->records[1], 0).empty());
  const Status& c = source->records[2].status;
  EXPECT_EQ(c.code(), StatusCode::kBadRecord);
  EXPECT_NE(c.message().find("field 'views' has 4 items, more than its max_items 3"),
            std::string::npos)
      << c.ToString();
  const Status& d = source->records[3].status;
  EXPECT_EQ(d.code(), StatusCode::kBadRecord);
  EXPECT_NE(d.message().find("are both item 0 of field 'views'"), std::string::npos)
      << d.ToString();
  EXPECT_EQ(Items(source->records[4], 0), (std::vector<std::string>{"E1"}));  // gaps allowed
  EXPECT_EQ(source->bad_samples, 2);

  // A required list with no items names the pattern.
  SourceSpec spec = ListShardSpec("list-000.tar");
  spec.fields[0].required = true;
  source = LoadShardSet(*storage, spec);
  ASSERT_TRUE(source.ok());
  EXPECT_EQ(source->records[1].status.code(), StatusCode::kMissingField);
  EXPECT_NE(source->records[1].status.message().find(".N.jpg/.N.png"), std::string::npos)
      << source->records[1].status.ToString();
}

TEST(PrepareShardSample, TextAndScalarMembersBecomeTheSamplesAttributes) {
  WriteShard("values-000.tar", {{"a.0.jpg", "A0"},
                                {"a.cls", " 7\n"},
                                {"a.txt", "a cat"},
                                {"a.0.score", "0.25"},
                                {"a.1.score", "-2"},
                                {"b.cls", "seven"},
                                {"c.0.score", "1e"}},
             /*index=*/false);
  auto storage = MakeLocalStorage();
  const SourceSpec spec = ListShardSpec("values-000.tar");
  auto source = LoadShardSet(*storage, spec);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ASSERT_EQ(source->records.size(), 3u);
  const auto prepare = [&](size_t i, Sample& sample) {
    sample.record = &source->records[i];
    std::vector<Buffer> media;
    for (const MediaRef& m : sample.record->media) {
      const std::string bytes = ReadText(m.uri).substr(m.offset, m.length);
      media.push_back(*Buffer::CopyOf(bytes.data(), bytes.size()));
    }
    FillFromRecord(std::move(media), sample);
    return PrepareShardSample(sample, spec, source->map);
  };
  Sample a;
  ASSERT_TRUE(prepare(0, a).ok());
  ASSERT_EQ(a.attributes.size(), 4u);
  EXPECT_EQ(a.attributes[0].field, 2);
  EXPECT_EQ(std::get<int64_t>(a.attributes[0].value), 7);
  EXPECT_EQ(std::get<std::string>(a.attributes[1].value), "a cat");
  EXPECT_EQ(std::get<double>(a.attributes[2].value), 0.25);
  EXPECT_EQ(std::get<double>(a.attributes[3].value), -2.0);
  EXPECT_TRUE(a.turns.empty());
  Sample b, c;
  const Status bad_int = prepare(1, b);
  EXPECT_EQ(bad_int.code(), StatusCode::kBadRecord);
  EXPECT_NE(bad_int.message().find("field 'label': member is not an integer: 'seven'"),
            std::string::npos)
      << bad_int.ToString();
  EXPECT_EQ(prepare(2, c).code(), StatusCode::kBadRecord);
}

TEST(LoadShardSet, BadSamplesAreNamedPerSampleAndNothingElseIsLost) {
  WriteShard("bad-000.tar", {{"a.jpg", "A"},
                             {"a.json", kConversation},
                             {"lonely.jpg", "no partner"},  // no .json: a required field
                             {"two.jpg", "1"},
                             {"two.png", "2"},  // two members of one field
                             {"two.json", kConversation},
                             {"b.jpg", "B"},
                             {"b.json", kConversation},
                             {"a.jpg", "again"},  // a key seen before
                             {"a.json", kConversation},
                             {"c.json", kConversation}},
             /*index=*/false);
  SourceSpec spec;
  spec.shards = (TempDir() / "bad-000.tar").string();
  auto storage = MakeLocalStorage();
  auto source = LoadShardSet(*storage, spec);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ASSERT_EQ(source->records.size(), 6u);
  std::vector<StatusCode> codes;
  for (const SampleRecord& r : source->records) codes.push_back(r.status.code());
  EXPECT_EQ(codes, (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kMissingField,
                                             StatusCode::kBadRecord, StatusCode::kOk,
                                             StatusCode::kBadRecord, StatusCode::kOk}));
  EXPECT_EQ(source->bad_samples, 3);
  const Status& lonely = source->records[1].status;
  EXPECT_EQ(source->records[1].uri(), (TempDir() / "bad-000.tar#lonely").string());
  EXPECT_NE(lonely.message().find("'lonely'"), std::string::npos) << lonely.ToString();
  EXPECT_NE(lonely.message().find(".json"), std::string::npos) << lonely.ToString();
  EXPECT_TRUE(source->records[1].media.empty());
}

TEST(LoadShardSet, ATruncatedTarKeepsTheSamplesBeforeTheDamage) {
  const std::string path = WriteShard("trunc-000.tar", {{"a.jpg", std::string(3000, 'a')},
                                                        {"a.json", kConversation},
                                                        {"b.jpg", std::string(3000, 'b')},
                                                        {"b.json", kConversation},
                                                        {"c.jpg", std::string(3000, 'c')}},
                                      /*index=*/false);
  fs::resize_file(path, fs::file_size(path) - 1024 - 2000);  // cuts c.jpg's data
  SourceSpec spec;
  spec.shards = path;
  auto storage = MakeLocalStorage();
  auto source = LoadShardSet(*storage, spec);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  // a and b are whole; c, whose member is cut, is the bad one (b was, before issue 26).
  ASSERT_EQ(source->records.size(), 3u);
  EXPECT_TRUE(source->records[0].status.ok());
  EXPECT_TRUE(source->records[1].status.ok()) << source->records[1].status.ToString();
  EXPECT_EQ(source->records[2].id, "c");
  EXPECT_EQ(source->records[2].status.code(), StatusCode::kCorruptData);
  EXPECT_NE(source->records[2].status.message().find("c.jpg"), std::string::npos)
      << source->records[2].status.ToString();
}

TEST(LoadShardSet, AMissingShardIsALoadErrorNamingIt) {
  WriteShard("miss-000.tar", {{"a.jpg", "A"}, {"a.json", kConversation}});
  SourceSpec spec;
  spec.shards = (TempDir() / "miss-{000..001}.tar").string();
  auto storage = MakeLocalStorage();
  auto source = LoadShardSet(*storage, spec);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kNotFound);
  EXPECT_NE(source.status().message().find("miss-001.tar"), std::string::npos)
      << source.status().ToString();
}

// Replaces a shard's index with `text`.
void WriteIndex(const std::string& shard, const std::string& text) {
  std::ofstream(shard + ".idx.json", std::ios::binary | std::ios::trunc) << text;
}

std::vector<std::pair<std::string, std::string>> Pairs(const std::string& prefix, int n) {
  std::vector<std::pair<std::string, std::string>> members;
  for (int i = 0; i < n; ++i) {
    const std::string key = prefix + std::to_string(i);
    members.emplace_back(key + ".jpg", "JPEG " + key);
    members.emplace_back(key + ".json", kConversation);
  }
  return members;
}

TEST(LoadShardSet, AShardWhoseIndexCannotBeTrustedIsSkippedWholeAndNamed) {
  // Shards 0 and 5 are good; 1-4 have an index that is not JSON, of an unknown version,
  // of a negative size, of a size smaller than the shard.
  std::vector<std::string> paths;
  for (int i = 0; i < 6; ++i) {
    paths.push_back(WriteShard("skip-" + std::to_string(i) + ".tar", Pairs("k" + std::to_string(i) + "_", 3)));
  }
  WriteIndex(paths[1], "{\"format\": \"headrace.shard_index\", \"vers");
  std::string v9 = ReadText(paths[2] + ".idx.json");
  v9.replace(v9.find("\"version\":1"), 11, "\"version\":9");
  WriteIndex(paths[2], v9);
  const std::string bytes_key = "\"bytes\":" + std::to_string(fs::file_size(paths[3]));
  std::string negative = ReadText(paths[3] + ".idx.json");
  negative.replace(negative.find(bytes_key), bytes_key.size(), "\"bytes\":-1");
  WriteIndex(paths[3], negative);
  std::string small = ReadText(paths[4] + ".idx.json");
  small.replace(small.find(bytes_key), bytes_key.size(), "\"bytes\":1536");
  WriteIndex(paths[4], small);
  SourceSpec spec;
  spec.shards = (TempDir() / "skip-{0..5}.tar").string();
  auto storage = MakeLocalStorage();
  auto source = LoadShardSet(*storage, spec);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(source->shard_samples, (std::vector<int64_t>{3, 0, 0, 0, 0, 3}));
  ASSERT_EQ(source->records.size(), 6u);
  EXPECT_EQ(source->records[3].id, "k5_0");
  EXPECT_EQ(source->bad_samples, 0);
  ASSERT_EQ(source->bad_shards.size(), 4u);
  for (size_t b = 0; b < 4; ++b) {
    const BadShard& bad = source->bad_shards[b];
    EXPECT_EQ(bad.shard, static_cast<int64_t>(b + 1));
    EXPECT_EQ(bad.uri, paths[b + 1]);
    EXPECT_EQ(bad.status.code(), StatusCode::kShardError);
    EXPECT_NE(bad.status.message().find(paths[b + 1] + ".idx.json"), std::string::npos)
        << bad.status.ToString();
  }
  EXPECT_NE(source->bad_shards[1].status.message().find("version"), std::string::npos);
  EXPECT_NE(source->bad_shards[3].status.message().find("the shard has"), std::string::npos)
      << source->bad_shards[3].status.ToString();
  // Every shard unreadable: nothing to run, and the message says why.
  spec.shards = (TempDir() / "skip-{1..2}.tar").string();
  auto none = LoadShardSet(*storage, spec);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("2 unreadable"), std::string::npos)
      << none.status().ToString();
}

TEST(LoadShardSet, AnIndexLargerThanItsShardCanNeedIsNotRead) {
  const std::string path = WriteShard("liar.tar", Pairs("x", 2));
  // A million samples inside a claimed terabyte: 40 MB of index for a 6 KB shard.
  std::string lying = "{\"format\":\"headrace.shard_index\",\"version\":1,\"shard\":\"liar.tar\","
                      "\"bytes\":1099511627776,\"samples\":[";
  for (int i = 0; i < 1'000'000; ++i) {
    if (i > 0) lying += ',';
    lying += "{\"key\":\"" + std::to_string(i) + "\",\"fields\":{\"jpg\":[" +
             std::to_string(512 + int64_t{i} * 1024) + ",1]}}";
  }
  lying += "]}";
  WriteIndex(path, lying);
  SourceSpec spec;
  spec.shards = "{" + path + "," + WriteShard("honest.tar", Pairs("h", 1)) + "}";
  auto storage = MakeLocalStorage();
  auto source = LoadShardSet(*storage, spec);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(source->shard_samples, (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(source->bad_shards.size(), 1u);
  EXPECT_NE(source->bad_shards[0].status.message().find(
                "the index is " + std::to_string(lying.size()) + " bytes, more than"),
            std::string::npos)
      << source->bad_shards[0].status.ToString();
}

TEST(LoadShardSet, DamageInAMembersHeaderFailsOnlyTheSampleItBelongsTo) {
  const std::string path = WriteShard("hdr.tar", Pairs("s", 3), /*index=*/false);
  std::string bytes = ReadText(path);
  const TarListing listing = ListTarMembers(Bytes(bytes));
  ASSERT_TRUE(listing.status.ok());
  ASSERT_EQ(listing.members[2].name, "s1.jpg");
  bytes[static_cast<size_t>(listing.members[2].offset - 512 + 148)] ^= 0x7;  // its checksum
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  SourceSpec spec;
  spec.shards = path;
  auto storage = MakeLocalStorage();
  auto source = LoadShardSet(*storage, spec);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  // s0 is complete and stays good; s1 is where the damage is; s2 is past it, lost.
  ASSERT_EQ(source->records.size(), 2u);
  EXPECT_TRUE(source->records[0].status.ok()) << source->records[0].status.ToString();
  EXPECT_EQ(source->records[1].id, "s1");
  EXPECT_EQ(source->records[1].status.code(), StatusCode::kCorruptData);
  EXPECT_NE(source->records[1].status.message().find("s1.jpg"), std::string::npos)
      << source->records[1].status.ToString();
  EXPECT_EQ(source->bad_samples, 1);
}

TEST(LoadShardSet, BytesThatAreNotATarAreABadShard) {
  const fs::path path = TempDir() / "nottar-1.tar";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << std::string(3000, 'z');
  WriteShard("nottar-0.tar", Pairs("n", 2), /*index=*/false);
  SourceSpec spec;
  spec.shards = (TempDir() / "nottar-{0..1}.tar").string();
  auto storage = MakeLocalStorage();
  auto source = LoadShardSet(*storage, spec);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(source->shard_samples, (std::vector<int64_t>{2, 0}));
  ASSERT_EQ(source->bad_shards.size(), 1u);
  EXPECT_EQ(source->bad_shards[0].shard, 1);
  EXPECT_NE(source->bad_shards[0].status.message().find("not a tar archive"), std::string::npos)
      << source->bad_shards[0].status.ToString();
}

TEST(ParseConversationJson, ReadsTurnsWithTheManifestKeys) {
  SourceSpec spec;
  auto turns = ParseConversationJson(Bytes(kConversation), spec);
  ASSERT_TRUE(turns.ok()) << turns.status().ToString();
  ASSERT_EQ(turns->size(), 2u);
  EXPECT_EQ((*turns)[0].role, Role::kUser);
  EXPECT_EQ((*turns)[1].text, "Hello.");
  EXPECT_EQ(ParseConversationJson(Bytes("{"), spec).status().code(), StatusCode::kBadRecord);
  EXPECT_EQ(ParseConversationJson(Bytes(R"({"conversations": [{"from": "cat", "value": ""}]})"),
                                  spec)
                .status()
                .code(),
            StatusCode::kBadRecord);
  EXPECT_EQ(ParseConversationJson(Bytes(R"({"x": 1})"), spec).status().code(),
            StatusCode::kMissingField);
}

TEST(ShardRecords, CompactRecordsAreTheSourcesRecordsFieldForField) {
  // Three shards: lists and scalars, bad samples of every kind, one indexed and one not.
  WriteShard("compact-000.tar", {{"a.10.jpg", "A10"},
                                 {"a.2.png", "A2"},
                                 {"a.json", kConversation},
                                 {"a.cls", "3\n"},
                                 {"b.json", kConversation},
                                 {"c.0.jpg", "C0"},
                                 {"c.1.jpg", "C1"},
                                 {"c.2.jpg", "C2"},
                                 {"c.3.jpg", "C3"}},
             /*index=*/true);
  WriteShard("compact-001.tar", {{"d.0.jpg", "D0"}, {"d.0.png", "D0 again"}, {"e.1.jpg", "E1"}},
             /*index=*/false);
  WriteShard("compact-002.tar", {{"f.json", kConversation}, {"f.txt", "a dog"}},
             /*index=*/true);
  SourceSpec spec = ListShardSpec("compact-{000..002}.tar");
  auto storage = MakeLocalStorage();
  Result<ShardSet> full = LoadShardSet(*storage, spec);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  ShardRecords compact;
  Result<ShardSet> lean = LoadShardSet(*storage, spec, &compact);
  ASSERT_TRUE(lean.ok()) << lean.status().ToString();
  EXPECT_TRUE(lean->records.empty());
  EXPECT_EQ(lean->shard_samples, full->shard_samples);
  EXPECT_EQ(lean->bad_samples, full->bad_samples);
  EXPECT_GE(full->bad_samples, 2);
  ASSERT_EQ(compact.size(), static_cast<int64_t>(full->records.size()));
  SampleRecord scratch;
  for (int64_t i = compact.size() - 1; i >= 0; --i) {  // backwards: each Get stands alone
    SCOPED_TRACE("record " + std::to_string(i));
    headrace::testing::ExpectSameRecord(compact.Get(i, scratch),
                                        full->records[static_cast<size_t>(i)]);
  }
  // ~70 bytes a sample against the records' hundreds.
  EXPECT_LT(compact.Memory().heap_bytes, static_cast<int64_t>(RecordsHeapBytes(full->records)));
}

}  // namespace
}  // namespace headrace::shard_set_test
