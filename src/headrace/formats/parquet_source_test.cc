#include "headrace/formats/parquet_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "headrace/formats/parquet_test_util.h"

namespace headrace {
namespace {

using ::testing::HasSubstr;
using parquet_test::MakeRows;
using parquet_test::MemoryStorage;
using parquet_test::WriteParquet;

SourceSpec ParquetSpec(const std::string& pattern) {
  SourceSpec spec;
  spec.parquet = pattern;
  return spec;
}

// Two files: 40 rows in groups of 16 (16, 16, 8), then 20 rows (16, 4).
void AddTwoFiles(MemoryStorage& storage) {
  storage.files["/d/part-0.parquet"] = WriteParquet(MakeRows(40), 16);
  storage.files["/d/part-1.parquet"] = WriteParquet(MakeRows(20, 40), 16);
}

TEST(ParquetSource, RecordsComeFromFootersAloneInFileThenRowOrder) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  Result<ParquetSource> source = LoadParquetSource(storage, ParquetSpec("/d/part-{0..1}.parquet"));
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ASSERT_EQ(source->records.size(), 60u);
  EXPECT_EQ(source->group_rows, (std::vector<int64_t>{16, 16, 8, 16, 4}));
  EXPECT_EQ(source->records[0].uri(), "/d/part-0.parquet#row 0");
  EXPECT_EQ(source->records[41].uri(), "/d/part-1.parquet#row 1");
  // Every record of a group names the group's one range; no row group was read.
  const ParquetRowGroup& g1 = source->layouts[0].row_groups[1];
  for (int64_t i = 16; i < 32; ++i) {
    ASSERT_EQ(source->records[i].media.size(), 1u);
    const MediaRef& ref = source->records[i].media[0];
    EXPECT_EQ(ref.field, kRowGroupField);
    EXPECT_EQ(ref.offset, g1.offset);
    EXPECT_EQ(ref.length, g1.length);
    EXPECT_EQ(source->GroupOf(i), 1u);
  }
  EXPECT_EQ(source->GroupOf(59), 4u);
  EXPECT_EQ(storage.ReadsOf("/d/part-0.parquet", g1.offset), 0);
  // Per file: the size probe and one tail read.
  EXPECT_EQ(storage.requests(), 4);
}

TEST(ParquetSource, DefaultFieldsMapColumnsByNameImageAndConversationFirst) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  Result<ParquetSource> source = LoadParquetSource(storage, ParquetSpec("/d/part-0.parquet"));
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  std::vector<std::pair<std::string, FieldKind>> got;
  for (const SourceFieldSpec& f : source->fields) got.emplace_back(f.name, f.kind);
  // `id` is the engine's own batch field: not read.
  EXPECT_EQ(got, (std::vector<std::pair<std::string, FieldKind>>{
                     {"image", FieldKind::kImage},
                     {"conversation", FieldKind::kConversation},
                     {"caption", FieldKind::kText},
                     {"label", FieldKind::kInt},
                     {"score", FieldKind::kFloat}}));
  EXPECT_EQ(source->fields[1].key, "conversations");
  ASSERT_EQ(source->columns.size(), 5u);
  EXPECT_EQ(source->columns[0].column, "image");
}

TEST(ParquetSource, AMissingColumnIsAConfigErrorNamingItAndTheColumnsThere) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  SourceSpec spec = ParquetSpec("/d/part-0.parquet");
  spec.fields = {SourceFieldSpec{"image", FieldKind::kImage, "jpg", 0, false}};
  Result<ParquetSource> source = LoadParquetSource(storage, spec);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(source.status().message(), HasSubstr("no column 'jpg'"));
  EXPECT_THAT(source.status().message(), HasSubstr("image (bytes), conversations (string)"));
}

TEST(ParquetSource, AColumnOfTheWrongKindIsAConfigError) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  SourceSpec spec = ParquetSpec("/d/part-0.parquet");
  spec.fields = {SourceFieldSpec{"n", FieldKind::kInt, "caption", 0, false}};
  Result<ParquetSource> source = LoadParquetSource(storage, spec);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(source.status().message(), HasSubstr("kind int cannot take"));
}

TEST(ParquetSource, AFileThatDoesNotExistIsNotFoundNamingIt) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  Result<ParquetSource> source = LoadParquetSource(storage, ParquetSpec("/d/part-{0..2}.parquet"));
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(source.status().message(), HasSubstr("/d/part-2.parquet"));
}

TEST(ParquetSource, BytesThatAreNotParquetFailTheLoad) {
  MemoryStorage storage;
  storage.files["/d/x.parquet"] = *Buffer::CopyOf("not parquet at all", 18);
  Result<ParquetSource> source = LoadParquetSource(storage, ParquetSpec("/d/x.parquet"));
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kUnsupportedFormat);
  EXPECT_THAT(source.status().message(), HasSubstr("/d/x.parquet"));
}

TEST(ParquetSource, PatternErrorsNameTheParquetKey) {
  MemoryStorage storage;
  Result<ParquetSource> source = LoadParquetSource(storage, ParquetSpec("s3://b/*.parquet"));
  ASSERT_FALSE(source.ok());
  EXPECT_THAT(source.status().message(), HasSubstr("source.parquet"));
}

TEST(ParquetSource, FillSamplePutsARowsCellsIntoTheSample) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  Result<ParquetSource> source = LoadParquetSource(storage, ParquetSpec("/d/part-0.parquet"));
  ASSERT_TRUE(source.ok());
  std::vector<std::string> columns;
  for (const ParquetFieldColumn& c : source->columns) columns.push_back(c.column);
  const ParquetLayout& layout = source->layouts[0];
  const Buffer& file = storage.files["/d/part-0.parquet"];
  const ParquetRowGroup& rg = layout.row_groups[1];
  Result<ParquetRowGroupData> data = DecodeParquetRowGroup(
      layout, 1, file.Slice(static_cast<size_t>(rg.offset), static_cast<size_t>(rg.length)),
      columns);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  Sample sample;
  sample.index = 19;
  sample.record = &source->records[19];
  ASSERT_TRUE(FillSampleFromRowGroup(*source, ParquetSpec(""), *data, 3, sample).ok());
  const Buffer* image = sample.MediaOf(0);
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(image->data()), image->size()),
            *MakeRows(1, 19)[0].image);
  ASSERT_EQ(sample.Conversation().size(), 2u);
  EXPECT_EQ(sample.Conversation()[1].role, Role::kAssistant);
  EXPECT_EQ(sample.Conversation()[1].text, "a19");
  ASSERT_EQ(sample.Attributes().size(), 3u);
  EXPECT_EQ(std::get<std::string>(sample.Attributes()[0].value), "caption 19");
  EXPECT_EQ(std::get<int64_t>(sample.Attributes()[1].value), 19 % 7);
  EXPECT_EQ(std::get<double>(sample.Attributes()[2].value), 9.5);
}

TEST(ParquetSource, ANullCellOfARequiredFieldIsThatSamplesError) {
  std::vector<parquet_test::Row> rows = MakeRows(4);
  rows[2].image.reset();
  MemoryStorage storage;
  storage.files["/d/n.parquet"] = WriteParquet(rows, 4);
  SourceSpec spec = ParquetSpec("/d/n.parquet");
  spec.fields = {SourceFieldSpec{"image", FieldKind::kImage, "", 0, true}};
  Result<ParquetSource> source = LoadParquetSource(storage, spec);
  ASSERT_TRUE(source.ok());
  const ParquetRowGroup& rg = source->layouts[0].row_groups[0];
  Result<ParquetRowGroupData> data = DecodeParquetRowGroup(
      source->layouts[0], 0,
      storage.files["/d/n.parquet"].Slice(static_cast<size_t>(rg.offset),
                                          static_cast<size_t>(rg.length)),
      std::vector<std::string>{"image"});
  ASSERT_TRUE(data.ok());
  Sample good, bad;
  good.record = &source->records[1];
  bad.record = &source->records[2];
  EXPECT_TRUE(FillSampleFromRowGroup(*source, spec, *data, 1, good).ok());
  const Status status = FillSampleFromRowGroup(*source, spec, *data, 2, bad);
  EXPECT_EQ(status.code(), StatusCode::kMissingField);
  EXPECT_THAT(status.message(), HasSubstr("column 'image' is null"));
}

TEST(ParquetSource, ConversationCellsAreAnArrayOrAnObject) {
  SourceSpec spec;
  Result<std::vector<Turn>> array =
      ParseConversationCell(R"( [{"from": "human", "value": "hi"}])", spec);
  ASSERT_TRUE(array.ok());
  EXPECT_EQ(array->at(0).text, "hi");
  Result<std::vector<Turn>> object =
      ParseConversationCell(R"({"conversations": [{"from": "gpt", "value": "yo"}]})", spec);
  ASSERT_TRUE(object.ok());
  EXPECT_EQ(object->at(0).role, Role::kAssistant);
  EXPECT_FALSE(ParseConversationCell("[{\"from\": \"alien\", \"value\": \"x\"}]", spec).ok());
  EXPECT_FALSE(ParseConversationCell("not json", spec).ok());
}

}  // namespace
}  // namespace headrace
