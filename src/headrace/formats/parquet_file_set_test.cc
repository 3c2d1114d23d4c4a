#include "headrace/formats/parquet_file_set.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "headrace/formats/parquet_records.h"
#include "headrace/formats/parquet_test_util.h"
#include "headrace/formats/record_test_util.h"

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

TEST(ParquetFileSet, RecordsComeFromFootersAloneInFileThenRowOrder) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, ParquetSpec("/d/part-{0..1}.parquet"));
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

TEST(ParquetFileSet, DefaultFieldsMapColumnsByNameImageAndConversationFirst) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, ParquetSpec("/d/part-0.parquet"));
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

TEST(ParquetFileSet, AMissingColumnIsAConfigErrorNamingItAndTheColumnsThere) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  SourceSpec spec = ParquetSpec("/d/part-0.parquet");
  spec.fields = {SourceFieldSpec{"image", FieldKind::kImage, "jpg", 0, false}};
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, spec);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(source.status().message(), HasSubstr("no column 'jpg'"));
  EXPECT_THAT(source.status().message(), HasSubstr("image (bytes), conversations (string)"));
}

TEST(ParquetFileSet, AColumnOfTheWrongKindIsAConfigError) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  SourceSpec spec = ParquetSpec("/d/part-0.parquet");
  spec.fields = {SourceFieldSpec{"n", FieldKind::kInt, "caption", 0, false}};
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, spec);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(source.status().message(), HasSubstr("kind int cannot take"));
}

TEST(ParquetFileSet, AFileThatDoesNotExistIsNotFoundNamingIt) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, ParquetSpec("/d/part-{0..2}.parquet"));
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(source.status().message(), HasSubstr("/d/part-2.parquet"));
}

TEST(ParquetFileSet, BytesThatAreNotParquetFailTheLoad) {
  MemoryStorage storage;
  storage.files["/d/x.parquet"] = *Buffer::CopyOf("not parquet at all", 18);
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, ParquetSpec("/d/x.parquet"));
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kUnsupportedFormat);
  EXPECT_THAT(source.status().message(), HasSubstr("/d/x.parquet"));
}

TEST(ParquetFileSet, AFileWhoseFooterDoesNotFitItIsSkippedWholeAndNamed) {
  MemoryStorage storage;
  const Buffer good = WriteParquet(MakeRows(40), 16);
  storage.files["/d/f-0.parquet"] = good;
  // A footer length longer than the file.
  std::string footer_len(reinterpret_cast<const char*>(good.data()), good.size());
  footer_len.replace(footer_len.size() - 8, 4, "\xff\xff\xff\x0f", 4);
  storage.files["/d/f-1.parquet"] = *Buffer::CopyOf(footer_len.data(), footer_len.size());
  // Its column chunks' pages past the file's end.
  storage.files["/d/f-2.parquet"] = FooterPatcher::SetI64(
      FooterPatcher::SetI64(good, {4, 1, 3, 9}, 1 << 30), {4, 1, 3, 11}, 1 << 30);
  // Row groups (and the file) that declare 2^31 and 2^40 rows: more than their column
  // chunks hold.
  Buffer rows31 = FooterPatcher::SetI64(WriteParquet(MakeRows(8), 100), {4, 3}, int64_t{1} << 31);
  storage.files["/d/f-3.parquet"] = FooterPatcher::SetI64(rows31, {3}, int64_t{1} << 31);
  Buffer rows40 = FooterPatcher::SetI64(WriteParquet(MakeRows(8), 100), {4, 3}, int64_t{1} << 40);
  storage.files["/d/f-4.parquet"] = FooterPatcher::SetI64(rows40, {3}, int64_t{1} << 40);
  storage.files["/d/f-5.parquet"] = WriteParquet(MakeRows(20, 40), 16);
  Result<ParquetFileSet> source =
      LoadParquetFileSet(storage, ParquetSpec("/d/f-{0..5}.parquet"), /*compact=*/true);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(source->num_rows, 60);
  EXPECT_EQ(source->group_rows, (std::vector<int64_t>{16, 16, 8, 16, 4}));
  ASSERT_EQ(source->bad_files.size(), 4u);
  for (size_t b = 0; b < 4; ++b) {
    const BadShard& bad = source->bad_files[b];
    EXPECT_EQ(bad.shard, static_cast<int64_t>(b + 1));
    EXPECT_EQ(bad.uri, "/d/f-" + std::to_string(b + 1) + ".parquet");
    EXPECT_EQ(bad.status.code(), StatusCode::kShardError);
    EXPECT_THAT(bad.status.message(), HasSubstr(bad.uri));
  }
  EXPECT_THAT(source->bad_files[2].status.message(), HasSubstr("declares 2147483648 rows"));
  EXPECT_THAT(source->bad_files[3].status.message(), HasSubstr("declares 1099511627776 rows"));
  // The records after the skipped files follow on: f-5's first row is record 40.
  SampleRecord record;
  MakeParquetRecord(*source, 40, record);
  EXPECT_EQ(record.location, "/d/f-5.parquet#row 0");
}

TEST(ParquetFileSet, RowsNoCacheCouldDecodeSkipTheFileBeforeAnythingIsSizedByThem) {
  // A footer that lies consistently: every column chunk holds as many values as the row
  // group declares rows, so only the rows' cost gives it away.
  MemoryStorage storage;
  storage.files["/d/g-0.parquet"] = WriteParquet(MakeRows(8), 100);
  for (const int64_t rows : {int64_t{1} << 31, int64_t{1} << 40}) {
    Buffer lying = FooterPatcher::SetI64(WriteParquet(MakeRows(8), 100), {4, 1, 3, 5}, rows);
    lying = FooterPatcher::SetI64(lying, {4, 3}, rows);
    storage.files["/d/g-1.parquet"] = FooterPatcher::SetI64(lying, {3}, rows);
    Result<ParquetFileSet> source = LoadParquetFileSet(storage, ParquetSpec("/d/g-{0..1}.parquet"),
                                                     /*compact=*/true, int64_t{64} << 20);
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    EXPECT_EQ(source->num_rows, 8);
    ASSERT_EQ(source->bad_files.size(), 1u);
    EXPECT_THAT(source->bad_files[0].status.message(),
                HasSubstr("declares " + std::to_string(rows) + " rows"));
    EXPECT_THAT(source->bad_files[0].status.message(), HasSubstr("source.cache_bytes"));
  }
}

TEST(ParquetFileSet, PatternErrorsNameTheParquetKey) {
  MemoryStorage storage;
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, ParquetSpec("s3://b/*.parquet"));
  ASSERT_FALSE(source.ok());
  EXPECT_THAT(source.status().message(), HasSubstr("source.parquet"));
}

TEST(ParquetFileSet, FillSamplePutsARowsCellsIntoTheSample) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, ParquetSpec("/d/part-0.parquet"));
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
  ASSERT_EQ(sample.turns.size(), 2u);
  EXPECT_EQ(sample.turns[1].role, Role::kAssistant);
  EXPECT_EQ(sample.turns[1].text, "a19");
  ASSERT_EQ(sample.attributes.size(), 3u);
  EXPECT_EQ(std::get<std::string>(sample.attributes[0].value), "caption 19");
  EXPECT_EQ(std::get<int64_t>(sample.attributes[1].value), 19 % 7);
  EXPECT_EQ(std::get<double>(sample.attributes[2].value), 9.5);
}

TEST(ParquetFileSet, ANullCellOfARequiredFieldIsThatSamplesError) {
  std::vector<parquet_test::Row> rows = MakeRows(4);
  rows[2].image.reset();
  MemoryStorage storage;
  storage.files["/d/n.parquet"] = WriteParquet(rows, 4);
  SourceSpec spec = ParquetSpec("/d/n.parquet");
  spec.fields = {SourceFieldSpec{"image", FieldKind::kImage, "", 0, true}};
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, spec);
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

TEST(ParquetFileSet, ConversationCellsAreAnArrayOrAnObject) {
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

// A table of list columns, one row per entry of `views` (nullopt: a null list; an item
// nullopt: a null item): views list<binary>, hf list<struct<bytes, path>>, paths
// list<string>, boxes list<int64>, scores list<double>, tags list<string>, and a plain
// image column. Row i's other lists have i % 3 items.
using Items = std::optional<std::vector<std::optional<std::string>>>;
Buffer WriteListTable(const std::vector<Items>& views) {
  auto pool = arrow::default_memory_pool();
  auto struct_type = arrow::struct_(
      {arrow::field("bytes", arrow::binary()), arrow::field("path", arrow::utf8())});
  arrow::ListBuilder views_b(pool, std::make_shared<arrow::BinaryBuilder>(pool));
  arrow::ListBuilder paths_b(pool, std::make_shared<arrow::StringBuilder>(pool));
  arrow::ListBuilder tags_b(pool, std::make_shared<arrow::StringBuilder>(pool));
  arrow::ListBuilder boxes_b(pool, std::make_shared<arrow::Int64Builder>(pool));
  arrow::ListBuilder scores_b(pool, std::make_shared<arrow::DoubleBuilder>(pool));
  auto hf_item = std::make_shared<arrow::StructBuilder>(
      struct_type, pool,
      std::vector<std::shared_ptr<arrow::ArrayBuilder>>{
          std::make_shared<arrow::BinaryBuilder>(pool),
          std::make_shared<arrow::StringBuilder>(pool)});
  arrow::ListBuilder hf_b(pool, hf_item);
  arrow::BinaryBuilder image_b;
  auto* views_v = static_cast<arrow::BinaryBuilder*>(views_b.value_builder());
  auto* paths_v = static_cast<arrow::StringBuilder*>(paths_b.value_builder());
  auto* tags_v = static_cast<arrow::StringBuilder*>(tags_b.value_builder());
  auto* boxes_v = static_cast<arrow::Int64Builder*>(boxes_b.value_builder());
  auto* scores_v = static_cast<arrow::DoubleBuilder*>(scores_b.value_builder());
  auto* hf_bytes = static_cast<arrow::BinaryBuilder*>(hf_item->field_builder(0));
  auto* hf_path = static_cast<arrow::StringBuilder*>(hf_item->field_builder(1));
  for (size_t i = 0; i < views.size(); ++i) {
    const int n = static_cast<int>(i % 3);
    if (views[i]) {
      EXPECT_TRUE(views_b.Append().ok());
      for (const auto& item : *views[i]) {
        EXPECT_TRUE((item ? views_v->Append(*item) : views_v->AppendNull()).ok());
      }
    } else {
      EXPECT_TRUE(views_b.AppendNull().ok());
    }
    EXPECT_TRUE(paths_b.Append().ok());
    EXPECT_TRUE(tags_b.Append().ok());
    EXPECT_TRUE(boxes_b.Append().ok());
    EXPECT_TRUE(scores_b.Append().ok());
    EXPECT_TRUE(hf_b.Append().ok());
    for (int k = 0; k < n; ++k) {
      const std::string tag = std::to_string(i) + "." + std::to_string(k);
      EXPECT_TRUE(paths_v->Append("img/" + tag + ".jpg").ok());
      EXPECT_TRUE(tags_v->Append("t" + tag).ok());
      EXPECT_TRUE(boxes_v->Append(static_cast<int64_t>(10 * i + k)).ok());
      EXPECT_TRUE(scores_v->Append(i + k * 0.25).ok());
      EXPECT_TRUE(hf_item->Append().ok());
      EXPECT_TRUE(hf_bytes->Append("hf " + tag).ok());
      EXPECT_TRUE(hf_path->Append(tag + ".png").ok());
    }
    EXPECT_TRUE(image_b.Append("image " + std::to_string(i)).ok());
  }
  std::vector<std::shared_ptr<arrow::Array>> arrays(7);
  EXPECT_TRUE(views_b.Finish(&arrays[0]).ok());
  EXPECT_TRUE(hf_b.Finish(&arrays[1]).ok());
  EXPECT_TRUE(paths_b.Finish(&arrays[2]).ok());
  EXPECT_TRUE(boxes_b.Finish(&arrays[3]).ok());
  EXPECT_TRUE(scores_b.Finish(&arrays[4]).ok());
  EXPECT_TRUE(tags_b.Finish(&arrays[5]).ok());
  EXPECT_TRUE(image_b.Finish(&arrays[6]).ok());
  auto schema = arrow::schema({arrow::field("views", arrays[0]->type()),
                               arrow::field("hf", arrays[1]->type()),
                               arrow::field("paths", arrays[2]->type()),
                               arrow::field("boxes", arrays[3]->type()),
                               arrow::field("scores", arrays[4]->type()),
                               arrow::field("tags", arrays[5]->type()),
                               arrow::field("image", arrow::binary())});
  auto table = arrow::Table::Make(schema, arrays);
  auto sink = arrow::io::BufferOutputStream::Create().ValueOrDie();
  EXPECT_TRUE(parquet::arrow::WriteTable(*table, pool, sink, 4).ok());
  std::shared_ptr<arrow::Buffer> bytes = sink->Finish().ValueOrDie();
  return *Buffer::CopyOf(bytes->data(), static_cast<size_t>(bytes->size()));
}

std::vector<Items> ViewsOfRows(int n) {
  std::vector<Items> views;
  for (int i = 0; i < n; ++i) {
    std::vector<std::optional<std::string>> items;
    for (int k = 0; k < i % 3; ++k) {
      items.emplace_back("view " + std::to_string(i) + "." + std::to_string(k));
    }
    views.emplace_back(std::move(items));
  }
  return views;
}

// Decodes row `row`'s group of `source` (file `uri` in `storage`) and fills a sample.
Status FillRow(MemoryStorage& storage, const ParquetFileSet& source, const SourceSpec& spec,
               int64_t row, Sample& sample) {
  const size_t g = source.GroupOf(row);
  const ParquetLayout& layout = source.layouts[source.groups[g].file];
  const ParquetRowGroup& rg = layout.row_groups[source.groups[g].row_group];
  std::vector<std::string> columns;
  for (const ParquetFieldColumn& c : source.columns) columns.push_back(c.column);
  Result<ParquetRowGroupData> data = DecodeParquetRowGroup(
      layout, source.groups[g].row_group,
      storage.files[source.files[source.groups[g].file]].Slice(static_cast<size_t>(rg.offset),
                                                               static_cast<size_t>(rg.length)),
      columns);
  if (!data.ok()) return data.status();
  sample.index = row;
  sample.record = &source.records[row];
  return FillSampleFromRowGroup(source, spec, *data, row - source.groups[g].first_record, sample);
}

std::vector<std::string> MediaItems(const Sample& sample, int field) {
  std::vector<std::string> out;
  sample.ForEachMedia(field, [&](const Buffer& b, std::string_view) {
    out.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
  });
  return out;
}

SourceSpec ListSpec() {
  SourceSpec spec = ParquetSpec("/d/lists.parquet");
  spec.fields = {SourceFieldSpec{"views", FieldKind::kImage, "", 3, false},
                 SourceFieldSpec{"hf", FieldKind::kImage, "", 2, false},
                 SourceFieldSpec{"boxes", FieldKind::kInt, "", 3, false},
                 SourceFieldSpec{"scores", FieldKind::kFloat, "", 3, false},
                 SourceFieldSpec{"tags", FieldKind::kString, "", 2, false},
                 SourceFieldSpec{"image", FieldKind::kImage, "", 0, false}};
  return spec;
}

TEST(ParquetFileSet, ListColumnsGiveTheirItemsInListOrder) {
  MemoryStorage storage;
  storage.files["/d/lists.parquet"] = WriteListTable(ViewsOfRows(10));
  const SourceSpec spec = ListSpec();
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, spec);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_TRUE(source->layouts[0].FindColumn("hf")->list);
  EXPECT_EQ(source->layouts[0].FindColumn("hf")->kind, ParquetColumnKind::kBytesWithPath);
  for (int64_t row : {0, 1, 5, 8}) {
    Sample sample;
    ASSERT_TRUE(FillRow(storage, *source, spec, row, sample).ok()) << row;
    const int n = static_cast<int>(row % 3);
    std::vector<std::string> views, hf, tags;
    std::vector<int64_t> boxes;
    std::vector<double> scores;
    for (int k = 0; k < n; ++k) {
      const std::string tag = std::to_string(row) + "." + std::to_string(k);
      views.push_back("view " + tag);
      hf.push_back("hf " + tag);
      tags.push_back("t" + tag);
      boxes.push_back(10 * row + k);
      scores.push_back(static_cast<double>(row) + k * 0.25);
    }
    EXPECT_EQ(MediaItems(sample, 0), views) << row;
    EXPECT_EQ(MediaItems(sample, 1), hf) << row;
    EXPECT_EQ(MediaItems(sample, 5), std::vector<std::string>{"image " + std::to_string(row)});
    std::vector<std::string> got_tags;
    std::vector<int64_t> got_boxes;
    std::vector<double> got_scores;
    for (const Attribute& a : sample.attributes) {
      if (a.field == 2) got_boxes.push_back(std::get<int64_t>(a.value));
      if (a.field == 3) got_scores.push_back(std::get<double>(a.value));
      if (a.field == 4) got_tags.push_back(std::get<std::string>(a.value));
    }
    EXPECT_EQ(got_boxes, boxes);
    EXPECT_EQ(got_scores, scores);
    EXPECT_EQ(got_tags, tags);
  }
}

TEST(ParquetFileSet, ABadListCellIsThatSamplesNamedError) {
  std::vector<Items> views = ViewsOfRows(8);
  views[1] = std::nullopt;                                          // null list: empty
  views[2] = std::vector<std::optional<std::string>>{"a", "b", "c", "d"};  // over max_items 3
  views[4] = std::vector<std::optional<std::string>>{"a", std::nullopt};  // a null item
  MemoryStorage storage;
  storage.files["/d/lists.parquet"] = WriteListTable(views);
  SourceSpec spec = ListSpec();
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, spec);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  Sample null_list, over, null_item, fine;
  ASSERT_TRUE(FillRow(storage, *source, spec, 1, null_list).ok());
  EXPECT_TRUE(MediaItems(null_list, 0).empty());
  Status status = FillRow(storage, *source, spec, 2, over);
  EXPECT_EQ(status.code(), StatusCode::kBadRecord);
  EXPECT_THAT(status.message(), HasSubstr("column 'views' has 4 items, more than its max_items 3"));
  status = FillRow(storage, *source, spec, 4, null_item);
  EXPECT_EQ(status.code(), StatusCode::kMissingField);
  EXPECT_THAT(status.message(), HasSubstr("column 'views' item 1 is null"));
  ASSERT_TRUE(FillRow(storage, *source, spec, 5, fine).ok());
  EXPECT_EQ(MediaItems(fine, 0).size(), 2u);
  // Required: a null or empty list is the sample's error.
  spec.fields[0].required = true;
  source = LoadParquetFileSet(storage, spec);
  ASSERT_TRUE(source.ok());
  Sample empty;
  status = FillRow(storage, *source, spec, 1, empty);
  EXPECT_EQ(status.code(), StatusCode::kMissingField);
  EXPECT_THAT(status.message(), HasSubstr("column 'views' is null"));
  status = FillRow(storage, *source, spec, 0, empty);
  EXPECT_THAT(status.message(), HasSubstr("column 'views' is an empty list"));
}

TEST(ParquetFileSet, APathListBecomesTheRecordsMediaRefsAtLoad) {
  MemoryStorage storage;
  storage.files["/d/lists.parquet"] = WriteListTable(ViewsOfRows(6));
  SourceSpec spec = ParquetSpec("/d/lists.parquet");
  spec.fields = {SourceFieldSpec{"frames", FieldKind::kImage, "paths", 2, false}};
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, spec);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_TRUE(source->columns.empty());  // nothing left for run time
  const SampleRecord& r5 = source->records[5];
  ASSERT_TRUE(r5.status.ok());
  ASSERT_EQ(r5.media.size(), 2u);
  EXPECT_EQ(r5.media[0].uri, "/d/img/5.0.jpg");
  EXPECT_EQ(r5.media[1].uri, "/d/img/5.1.jpg");
  EXPECT_EQ(r5.media[1].field, 0);
  EXPECT_TRUE(source->records[3].media.empty());
  // One item too many is that record's error, named by its row.
  spec.fields[0].max_items = 1;
  source = LoadParquetFileSet(storage, spec);
  ASSERT_TRUE(source.ok());
  EXPECT_EQ(source->bad_records, 2);  // rows 2 and 5
  EXPECT_EQ(source->records[2].status.code(), StatusCode::kBadRecord);
  EXPECT_THAT(source->records[2].status.message(), HasSubstr("#row 2"));
  EXPECT_THAT(source->records[2].status.message(), HasSubstr("more than its max_items 1"));
}

TEST(ParquetFileSet, ListColumnsAndListFieldsMustMatch) {
  MemoryStorage storage;
  storage.files["/d/lists.parquet"] = WriteListTable(ViewsOfRows(3));
  // Defaults read no list column.
  Result<ParquetFileSet> defaults = LoadParquetFileSet(storage, ParquetSpec("/d/lists.parquet"));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  ASSERT_EQ(defaults->columns.size(), 1u);
  EXPECT_EQ(defaults->columns[0].column, "image");
  SourceSpec spec = ParquetSpec("/d/lists.parquet");
  spec.fields = {SourceFieldSpec{"views", FieldKind::kImage, "", 0, false}};
  Result<ParquetFileSet> source = LoadParquetFileSet(storage, spec);
  EXPECT_EQ(source.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(source.status().message(), HasSubstr("a list: declare the field a list"));
  spec.fields = {SourceFieldSpec{"image", FieldKind::kImage, "", 2, false}};
  source = LoadParquetFileSet(storage, spec);
  EXPECT_EQ(source.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(source.status().message(), HasSubstr("not a list, which a list field"));
  spec.fields = {SourceFieldSpec{"boxes", FieldKind::kText, "", 3, false}};
  source = LoadParquetFileSet(storage, spec);
  EXPECT_THAT(source.status().message(), HasSubstr("kind text cannot take"));
}

// Every record of `compact` as `full` holds it.
void ExpectSameRecords(const ParquetFileSet& full, std::shared_ptr<const ParquetFileSet> lean) {
  ASSERT_TRUE(lean->records.empty());
  ASSERT_EQ(lean->num_rows, static_cast<int64_t>(full.records.size()));
  EXPECT_EQ(lean->bad_records, full.bad_records);
  const ParquetRecords store(lean);
  ASSERT_EQ(store.size(), lean->num_rows);
  SampleRecord scratch;
  for (int64_t i = store.size() - 1; i >= 0; --i) {
    SCOPED_TRACE("row " + std::to_string(i));
    headrace::testing::ExpectSameRecord(store.Get(i, scratch),
                                        full.records[static_cast<size_t>(i)]);
  }
}

TEST(ParquetRecords, CompactRecordsAreTheLoadedOnesAndRegularRowsCostNothing) {
  MemoryStorage storage;
  AddTwoFiles(storage);
  const SourceSpec spec = ParquetSpec("/d/part-{0..1}.parquet");
  Result<ParquetFileSet> full = LoadParquetFileSet(storage, spec);
  Result<ParquetFileSet> lean = LoadParquetFileSet(storage, spec, /*compact=*/true);
  ASSERT_TRUE(full.ok() && lean.ok());
  EXPECT_TRUE(lean->irregular.empty());
  auto shared = std::make_shared<const ParquetFileSet>(*std::move(lean));
  ExpectSameRecords(*full, shared);
  // The regular rows hold nothing: the compact source is smaller by the records.
  EXPECT_LT(ParquetFileSetMemoryBytes(*shared) + 60 * 100, ParquetFileSetMemoryBytes(*full));

  // Path lists are data: those rows, and the bad ones, are kept as they are.
  storage.files["/d/lists.parquet"] = WriteListTable(ViewsOfRows(6));
  SourceSpec paths = ParquetSpec("/d/lists.parquet");
  paths.fields = {SourceFieldSpec{"frames", FieldKind::kImage, "paths", 1, false}};
  full = LoadParquetFileSet(storage, paths);
  lean = LoadParquetFileSet(storage, paths, /*compact=*/true);
  ASSERT_TRUE(full.ok() && lean.ok());
  EXPECT_EQ(full->bad_records, 2);
  EXPECT_EQ(lean->irregular.size(), 2u);  // the bad rows; the good ones' paths compact
  EXPECT_EQ(lean->path_item_end.size(), 6u);
  auto with_paths = std::make_shared<const ParquetFileSet>(*std::move(lean));
  ExpectSameRecords(*full, with_paths);
  EXPECT_LT(ParquetFileSetMemoryBytes(*with_paths), ParquetFileSetMemoryBytes(*full));
  // One item a row: each good row's path, resolved, in the compact arena.
  paths.fields[0].max_items = 2;
  full = LoadParquetFileSet(storage, paths);
  lean = LoadParquetFileSet(storage, paths, /*compact=*/true);
  ASSERT_TRUE(full.ok() && lean.ok());
  EXPECT_TRUE(lean->irregular.empty());
  ExpectSameRecords(*full, std::make_shared<const ParquetFileSet>(*std::move(lean)));
}

}  // namespace
}  // namespace headrace
