#include "headrace/formats/materialized.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "headrace/formats/tar_shard.h"
#include "headrace/formats/source.h"

namespace headrace {
namespace materialized_test {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  const char* tmp = std::getenv("HEADRACE_TEST_TMP");
  const fs::path dir = fs::path(tmp ? tmp : "/tmp") /
                       ("materialized_test." + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

MaterializedInfo TwoFieldInfo() {
  MaterializedInfo info;
  info.seed = 9;
  info.dataset_samples = 3;
  info.fields = {FieldSpec{"x", DType::kI32, {2}}, FieldSpec{"y", DType::kBF16, {}}};
  info.strings = {{"caption", false}, {"tags", true}};
  info.shard_samples = {2, 1};
  info.shuffle_window = 2;
  info.random_ops = {"ops[1].image.flip"};
  MaterializedInfo::Set set{0, "epoch-0", 2, {{"shard-000000.tar", 4096, 2}}, {}};
  set.skipped.push_back({1, Status::CorruptData("truncated JPEG")});
  info.sets.push_back(set);
  return info;
}

TEST(Npy, HeaderIsNumpysSpellingPaddedTo64Bytes) {
  const std::string h3 = NpyHeader(FieldSpec{"image", DType::kF32, {3, 224, 224}});
  EXPECT_EQ(h3.size() % 64, 0u);
  EXPECT_EQ(h3.back(), '\n');
  EXPECT_EQ(h3.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_NE(h3.find("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 224, 224), }"),
            std::string::npos);
  EXPECT_NE(NpyHeader(FieldSpec{"ids", DType::kI64, {128}}).find("'shape': (128,)"),
            std::string::npos);
  EXPECT_NE(NpyHeader(FieldSpec{"n", DType::kI64, {}}).find("'shape': ()"), std::string::npos);
  EXPECT_NE(NpyHeader(FieldSpec{"b", DType::kBF16, {}}).find("'<u2'"), std::string::npos);
  EXPECT_NE(NpyHeader(FieldSpec{"u", DType::kU8, {}}).find("'|u1'"), std::string::npos);
}

TEST(Npy, RowIsTheBytesAfterTheHeaderAndAnythingElseIsCorrupt) {
  const FieldSpec field{"x", DType::kI32, {2}};
  const std::string npy = NpyHeader(field) + std::string("\1\0\0\0\2\0\0\0", 8);
  auto row = NpyRow(Bytes(npy), field);
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_EQ(row->size(), 8u);
  EXPECT_EQ((*row)[4], 2);
  const auto short_row = NpyRow(Bytes(npy.substr(0, npy.size() - 1)), field);
  EXPECT_EQ(short_row.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(short_row.status().message().find("x.npy is not the i32[2] row"), std::string::npos);
  const FieldSpec wider{"x", DType::kI32, {3}};
  EXPECT_FALSE(NpyRow(Bytes(NpyHeader(wider) + std::string(8, '\0')), field).ok());
}

TEST(JoinUri, JoinsPartsAndDropsDots) {
  EXPECT_EQ(JoinUri("s3://b/p", "epoch-0/shard-000000.tar"), "s3://b/p/epoch-0/shard-000000.tar");
  EXPECT_EQ(JoinUri("/data/m/", "./materialized.json"), "/data/m/materialized.json");
  EXPECT_EQ(JoinUri("/data/m", "."), "/data/m");
  EXPECT_EQ(JoinUri("rel", "a"), "rel/a");
}

TEST(MaterializedInfo, JsonRoundTripsAndNamesItsEpochs) {
  const MaterializedInfo info = TwoFieldInfo();
  const std::string json = MaterializedInfoToJson(info);
  EXPECT_NE(json.find("\"epochs\": [\n    0\n  ]"), std::string::npos) << json;
  auto back = ParseMaterializedInfo(json, "/m/materialized.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->seed, 9u);
  EXPECT_EQ(back->dataset_samples, 3);
  ASSERT_EQ(back->fields.size(), 2u);
  EXPECT_EQ(back->fields[0].sample_shape, std::vector<int64_t>{2});
  EXPECT_EQ(back->fields[1].dtype, DType::kBF16);
  EXPECT_TRUE(back->fields[1].sample_shape.empty());
  ASSERT_EQ(back->strings.size(), 2u);
  EXPECT_TRUE(back->strings[1].list);
  EXPECT_EQ(back->shard_samples, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(back->shuffle_window, 2);
  EXPECT_EQ(back->random_ops, info.random_ops);
  ASSERT_EQ(back->sets.size(), 1u);
  EXPECT_EQ(back->sets[0].epoch, std::optional<int64_t>(0));
  ASSERT_EQ(back->sets[0].skipped.size(), 1u);
  EXPECT_EQ(back->sets[0].skipped[0].status.code(), StatusCode::kCorruptData);
  EXPECT_EQ(back->sets[0].skipped[0].status.message(), "truncated JPEG");
  EXPECT_EQ(MaterializedInfoToJson(*back), json);
}

TEST(MaterializedInfo, AnotherFormatVersionIsRefusedSayingWhich) {
  std::string json = MaterializedInfoToJson(TwoFieldInfo());
  json.replace(json.find("\"version\": 1"), 12, "\"version\": 2");
  auto parsed = ParseMaterializedInfo(json, "/m/materialized.json");
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("format version 2"), std::string::npos);
  EXPECT_NE(parsed.status().message().find("reads version 1"), std::string::npos);
  auto bad = ParseMaterializedInfo("{\"format\": \"other\"}", "/m/materialized.json");
  EXPECT_EQ(bad.status().code(), StatusCode::kBadRecord);
  EXPECT_EQ(bad.status().message().rfind("/m/materialized.json: ", 0), 0u);
}

// Writes TwoFieldInfo()'s epoch-0 set: samples 0 and 2 (1 was skipped) in one shard.
void WriteMaterialization(const fs::path& dir) {
  MaterializedInfo info = materialized_test::TwoFieldInfo();
  fs::create_directories(dir / "epoch-0");
  const fs::path shard = dir / "epoch-0" / "shard-000000.tar";
  auto writer = TarWriter::Open(shard.string());
  ASSERT_TRUE(writer.ok());
  for (const std::string key : {"000000000", "000000002"}) {
    const std::string x = NpyHeader(info.fields[0]) + std::string(8, key.back());
    const std::string y = NpyHeader(info.fields[1]) + std::string(2, '\0');
    const std::string json = "{\"strings\": {\"caption\": [\"c" + key.substr(8) +
                             "\"], \"tags\": [\"a\", \"b\"]}}";
    ASSERT_TRUE((*writer)->Add(key + ".x.npy", Bytes(x)).ok());
    ASSERT_TRUE((*writer)->Add(key + ".y.npy", Bytes(y)).ok());
    ASSERT_TRUE((*writer)->Add(key + ".json", Bytes(json)).ok());
  }
  auto size = (*writer)->Close();
  ASSERT_TRUE(size.ok());
  std::ifstream in(shard, std::ios::binary);
  std::ostringstream tar;
  tar << in.rdbuf();
  const std::string bytes = tar.str();
  const TarListing listing = ListTarMembers(Bytes(bytes));
  ASSERT_TRUE(listing.status.ok());
  const auto samples = GroupSamples(listing.members);
  WriteText(shard.string() + ".idx.json",
            ShardIndexToJson(MakeShardIndex("shard-000000.tar", *size, samples)));
  WriteText(shard.string() + ".ids.json", "[\"id-0\", \"id-2\"]");
  info.sets[0].shards[0].bytes = *size;
  WriteText(dir / "materialized.json", MaterializedInfoToJson(info));
}

TEST(LoadMaterializedIndex, PlacesRecordsAtTheirIndexAndSkippedOnesFailAsBefore) {
  const fs::path dir = TempDir("load");
  WriteMaterialization(dir);
  auto storage = MakeLocalStorage();
  auto source = LoadMaterializedIndex(*storage, dir.string());
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ASSERT_EQ(source->records.size(), 1u);
  const std::vector<SampleRecord>& records = source->records[0];
  ASSERT_EQ(records.size(), 3u);
  EXPECT_TRUE(records[0].status.ok());
  EXPECT_EQ(records[0].id, "id-0");
  ASSERT_EQ(records[0].media.size(), 3u);  // x, y, json
  EXPECT_EQ(records[0].media[2].field, 2);
  EXPECT_EQ(records[2].id, "id-2");
  EXPECT_EQ(records[2].location, (dir / "epoch-0" / "shard-000000.tar").string() + "#000000002");
  EXPECT_EQ(records[1].status.code(), StatusCode::kCorruptData);
  EXPECT_EQ(records[1].status.message(), "truncated JPEG");

  // The .json member's strings become the sample's attributes, in info.strings order.
  Sample sample;
  sample.record = &records[0];
  std::vector<Buffer> media(2);
  const std::string json = "{\"strings\": {\"caption\": [\"c\"], \"tags\": [\"a\", \"b\"]}}";
  auto bytes = Buffer::Allocate(json.size());
  ASSERT_TRUE(bytes.ok());
  std::memcpy(bytes->mutable_data(), json.data(), json.size());
  media.push_back(*bytes);
  FillFromRecord(std::move(media), sample);
  ASSERT_TRUE(PrepareMaterializedSample(sample).ok());
  ASSERT_EQ(sample.attributes.size(), 3u);
  EXPECT_EQ(sample.attributes[0].field, 0);
  EXPECT_EQ(std::get<std::string>(sample.attributes[2].value), "b");
  EXPECT_EQ(sample.attributes[2].field, 1);
}

// Rewrites dir/materialized.json with `edit` applied to what it declares.
template <typename Edit>
void EditInfo(const fs::path& dir, Edit edit) {
  std::ifstream in(dir / "materialized.json", std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  auto info = ParseMaterializedInfo(text.str(), "materialized.json");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  edit(*info);
  WriteText(dir / "materialized.json", MaterializedInfoToJson(*info));
}

// A configuration error (exit 2) naming the field, `what` in its message.
void ExpectRefused(const fs::path& dir, const std::string& field, const std::string& what) {
  auto storage = MakeLocalStorage();
  auto source = LoadMaterializedIndex(*storage, dir.string());
  ASSERT_FALSE(source.ok()) << field;
  EXPECT_EQ(source.status().code(), StatusCode::kInvalidArgument) << source.status().ToString();
  EXPECT_NE(source.status().message().find(field + " "), std::string::npos)
      << source.status().ToString();
  EXPECT_NE(source.status().message().find(what), std::string::npos)
      << source.status().ToString();
}

TEST(LoadMaterializedIndex, CountsTheFilesDoNotHoldAreRefusedBeforeAllocatingThem) {
  // Believed, each ended in std::bad_alloc: one record per declared sample per set.
  for (const int64_t lie : {int64_t{1} << 31, int64_t{1'000'000'000'000}}) {
    const fs::path dir = TempDir("lie-" + std::to_string(lie));
    WriteMaterialization(dir);
    EditInfo(dir, [&](MaterializedInfo& info) { info.dataset_samples = lie; });
    ExpectRefused(dir, "dataset_samples", "declares " + std::to_string(lie) + " samples");
    // Told consistently in materialized.json: the shard's own index says otherwise.
    EditInfo(dir, [&](MaterializedInfo& info) {
      info.shard_samples = {lie - 1, 1};
      info.sets[0].samples = info.sets[0].shards[0].samples = lie - 1;
    });
    ExpectRefused(dir, "sets[0].shards[0].samples", "idx.json holds 2");
    EditInfo(dir, [&](MaterializedInfo& info) { info.shard_samples = {lie, 1}; });
    ExpectRefused(dir, "order.shard_samples", "more than dataset_samples");
  }
  const fs::path dir = TempDir("lie-set");
  WriteMaterialization(dir);
  EditInfo(dir, [&](MaterializedInfo& info) { info.sets[0].samples = 7; });
  ExpectRefused(dir, "sets[0].samples", "declares 7 samples, its shards 2");
  EditInfo(dir, [&](MaterializedInfo& info) {
    info.sets[0].samples = 2;
    info.sets[0].shards[0].samples = -1;
  });
  ExpectRefused(dir, "sets[0].shards[0].samples", "past dataset_samples");
}

TEST(LoadMaterializedIndex, ASetFolderOutsideTheMaterializationIsRefused) {
  // A complete materialization at root, and another at root/inner whose set folder is
  // root's: followed, "../epoch-0" read root's shards.
  const fs::path root = TempDir("outside");
  WriteMaterialization(root);
  const fs::path inner = root / "inner";
  fs::create_directories(inner);
  fs::copy_file(root / "materialized.json", inner / "materialized.json");
  for (const std::string& dir : std::vector<std::string>{"../epoch-0", "..", "epoch-0/../../epoch-0",
                                (root / "epoch-0").string(), "s3://b/epoch-0"}) {
    EditInfo(inner, [&](MaterializedInfo& info) { info.sets[0].dir = dir; });
    ExpectRefused(inner, "sets[0].dir", "leaves the materialization's folder");
  }
  EditInfo(inner, [&](MaterializedInfo& info) {
    info.sets[0].dir = "epoch-0";
    info.sets[0].shards[0].name = "..";
  });
  ExpectRefused(inner, "sets[0].shards[0].shard", "is not a file name");
}

TEST(LoadMaterializedIndex, AFolderWithoutMaterializedJsonIsNotFoundNamingIt) {
  const fs::path dir = TempDir("empty");
  auto storage = MakeLocalStorage();
  auto source = LoadMaterializedIndex(*storage, dir.string());
  EXPECT_EQ(source.status().code(), StatusCode::kNotFound);
  EXPECT_NE(source.status().message().find(dir.string() + " holds no materialized.json"),
            std::string::npos);
}

}  // namespace materialized_test
}  // namespace headrace

namespace headrace {
namespace {

TEST(MaterializedInfo, KeepsWhichRaggedFieldsAreATokenSequencesRows) {
  MaterializedInfo info = materialized_test::TwoFieldInfo();
  info.fields = {FieldSpec{"input_ids", DType::kI64, {}, FieldLayout::kRagged, "", "input_ids"},
                 FieldSpec{"input_ids_lengths", DType::kI32, {}, FieldLayout::kLengths},
                 FieldSpec{"labels", DType::kI64, {}, FieldLayout::kRagged, "", "input_ids"},
                 FieldSpec{"labels_lengths", DType::kI32, {}, FieldLayout::kLengths},
                 FieldSpec{"pixel_values", DType::kF32, {4}, FieldLayout::kRagged},
                 FieldSpec{"pixel_values_lengths", DType::kI32, {}, FieldLayout::kLengths}};
  auto back = ParseMaterializedInfo(MaterializedInfoToJson(info), "/m/materialized.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->fields.size(), 6u);
  EXPECT_EQ(back->fields[0].tokens_of, "input_ids");  // packing lays these out in rows
  EXPECT_EQ(back->fields[2].tokens_of, "input_ids");
  EXPECT_EQ(back->fields[4].tokens_of, "");           // patches: concatenated
}

}  // namespace
}  // namespace headrace
