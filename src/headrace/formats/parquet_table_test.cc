#include "headrace/formats/parquet_table.h"

#include <arrow/api.h>
#include <arrow/io/memory.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <openssl/sha.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>
#include <simdjson.h>
#include <turbojpeg.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

// Its own namespace: the folder's tests compile as one unity file (CMakeLists.txt).
namespace headrace::parquet_table_test {
namespace {

std::string_view AsView(const Buffer& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// A real JPEG of w × h pixels whose colour depends on `seed`.
std::string MakeJpeg(int w, int h, int seed) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w * h * 3));
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 7 + seed * 31) & 0xff);
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &out, &size, TJSAMP_420, 85, 0), 0);
  std::string jpeg(reinterpret_cast<const char*>(out), size);
  tjFree(out);
  tjDestroy(tj);
  return jpeg;
}

// What row `i` of the test table holds.
struct Row {
  std::optional<std::string> image;  // bytes column
  std::optional<std::string> caption;
  int64_t id = 0;
  std::optional<double> score;
  bool flag = false;
  bool media_null = false;  // the struct itself
  std::optional<std::string> media_bytes;
  std::optional<std::string> media_path;
};

std::vector<Row> MakeRows(int n) {
  std::vector<Row> rows(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Row& r = rows[static_cast<size_t>(i)];
    if (i % 5 != 3) r.image = i == 7 ? std::string() : MakeJpeg(8 + i, 6 + i % 4, i);
    if (i % 4 != 2)
      r.caption = "caption " + std::to_string(i) + std::string(static_cast<size_t>(i), 'x');
    r.id = 1000000000000LL + i;
    if (i % 6 != 1) r.score = i * 0.25;
    r.flag = i % 2 == 0;
    r.media_null = i == 4;
    if (i % 3 != 0) r.media_bytes = "media-bytes-" + std::to_string(i);
    if (i % 7 != 5) r.media_path = "images/" + std::to_string(i) + ".jpg";
  }
  return rows;
}

#define ASSERT_ARROW_OK(expr) ASSERT_TRUE((expr).ok()) << (expr).ToString()

std::shared_ptr<arrow::Table> MakeTable(const std::vector<Row>& rows) {
  arrow::BinaryBuilder image;
  arrow::StringBuilder caption;
  arrow::Int64Builder id;
  arrow::DoubleBuilder score;
  arrow::BooleanBuilder flag;
  auto media_type =
      arrow::struct_({arrow::field("bytes", arrow::binary()), arrow::field("path", arrow::utf8())});
  auto media_bytes = std::make_shared<arrow::BinaryBuilder>();
  auto media_path = std::make_shared<arrow::StringBuilder>();
  arrow::StructBuilder media(media_type, arrow::default_memory_pool(), {media_bytes, media_path});
  arrow::ListBuilder tags(arrow::default_memory_pool(), std::make_shared<arrow::StringBuilder>());
  auto* tag_values = static_cast<arrow::StringBuilder*>(tags.value_builder());
  for (const Row& r : rows) {
    EXPECT_TRUE((r.image ? image.Append(*r.image) : image.AppendNull()).ok());
    EXPECT_TRUE((r.caption ? caption.Append(*r.caption) : caption.AppendNull()).ok());
    EXPECT_TRUE(id.Append(r.id).ok());
    EXPECT_TRUE((r.score ? score.Append(*r.score) : score.AppendNull()).ok());
    EXPECT_TRUE(flag.Append(r.flag).ok());
    if (r.media_null) {
      EXPECT_TRUE(media.AppendNull().ok());
    } else {
      EXPECT_TRUE(media.Append().ok());
      EXPECT_TRUE(
          (r.media_bytes ? media_bytes->Append(*r.media_bytes) : media_bytes->AppendNull()).ok());
      EXPECT_TRUE(
          (r.media_path ? media_path->Append(*r.media_path) : media_path->AppendNull()).ok());
    }
    EXPECT_TRUE(tags.Append().ok());
    EXPECT_TRUE(tag_values->Append("t").ok());
  }
  std::vector<std::shared_ptr<arrow::Array>> arrays(7);
  EXPECT_TRUE(image.Finish(&arrays[0]).ok());
  EXPECT_TRUE(caption.Finish(&arrays[1]).ok());
  EXPECT_TRUE(id.Finish(&arrays[2]).ok());
  EXPECT_TRUE(score.Finish(&arrays[3]).ok());
  EXPECT_TRUE(flag.Finish(&arrays[4]).ok());
  EXPECT_TRUE(media.Finish(&arrays[5]).ok());
  EXPECT_TRUE(tags.Finish(&arrays[6]).ok());
  auto schema =
      arrow::schema({arrow::field("image", arrow::binary()), arrow::field("caption", arrow::utf8()),
                     arrow::field("id", arrow::int64()), arrow::field("score", arrow::float64()),
                     arrow::field("flag", arrow::boolean()), arrow::field("media", media_type),
                     arrow::field("tags", arrow::list(arrow::utf8()))});
  return arrow::Table::Make(schema, arrays);
}

// The Parquet bytes of `table`, `rows_per_group` rows per row group.
Buffer WriteParquet(const arrow::Table& table, int64_t rows_per_group,
                    arrow::Compression::type codec = arrow::Compression::SNAPPY) {
  auto sink = arrow::io::BufferOutputStream::Create().ValueOrDie();
  auto properties = parquet::WriterProperties::Builder().compression(codec)->build();
  const arrow::Status status = parquet::arrow::WriteTable(table, arrow::default_memory_pool(), sink,
                                                          rows_per_group, properties);
  EXPECT_TRUE(status.ok()) << status.ToString();
  std::shared_ptr<arrow::Buffer> bytes = sink->Finish().ValueOrDie();
  return *Buffer::CopyOf(bytes->data(), static_cast<size_t>(bytes->size()));
}

// The last `n` bytes of `file`, in a buffer of their own.
Buffer Tail(const Buffer& file, size_t n) {
  return *Buffer::CopyOf(file.data() + file.size() - n, n);
}

// A row group's range, copied alone: the decoder cannot see the rest of the file.
Buffer RangeOf(const Buffer& file, const ParquetRowGroup& g) {
  return *Buffer::CopyOf(file.data() + g.offset, static_cast<size_t>(g.length));
}

void ExpectRowGroupMatches(const ParquetRowGroupData& data, const std::vector<Row>& rows);

class ParquetTableTest : public ::testing::Test {
 protected:
  static constexpr int kRows = 23;
  static constexpr int kRowsPerGroup = 5;
  void SetUp() override {
    rows_ = MakeRows(kRows);
    file_ = WriteParquet(*MakeTable(rows_), kRowsPerGroup);
    Result<ParquetLayout> layout = ReadParquetLayout(file_);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    layout_ = *layout;
  }
  std::vector<Row> rows_;
  Buffer file_;
  ParquetLayout layout_;
};

TEST_F(ParquetTableTest, LayoutHasColumnsKindsRowsAndRowGroups) {
  ASSERT_EQ(layout_.columns.size(), 7u);
  const std::vector<std::pair<std::string, ParquetColumnKind>> want = {
      {"image", ParquetColumnKind::kBytes},     {"caption", ParquetColumnKind::kString},
      {"id", ParquetColumnKind::kInt64},        {"score", ParquetColumnKind::kDouble},
      {"flag", ParquetColumnKind::kBool},       {"media", ParquetColumnKind::kBytesWithPath},
      {"tags", ParquetColumnKind::kString}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(layout_.columns[i].name, want[i].first);
    EXPECT_EQ(layout_.columns[i].kind, want[i].second)
        << want[i].first << ": " << layout_.columns[i].arrow_type;
  }
  EXPECT_EQ(layout_.columns[6].arrow_type, "list<element: string>");
  for (size_t i = 0; i < 6; ++i) EXPECT_FALSE(layout_.columns[i].list) << i;
  EXPECT_TRUE(layout_.columns[6].list);  // a list of strings
  EXPECT_EQ(layout_.rows, kRows);
  EXPECT_EQ(layout_.file_size, static_cast<int64_t>(file_.size()));
  ASSERT_EQ(layout_.row_groups.size(), 5u);
  int64_t first_row = 0;
  int64_t previous_end = 4;  // after the leading "PAR1"
  for (const ParquetRowGroup& g : layout_.row_groups) {
    EXPECT_EQ(g.first_row, first_row);
    EXPECT_EQ(g.rows, first_row + kRowsPerGroup <= kRows ? kRowsPerGroup : kRows % kRowsPerGroup);
    first_row += g.rows;
    // Inside the data, in order, not overlapping; the footer is not part of any range.
    EXPECT_GE(g.offset, previous_end);
    EXPECT_GT(g.length, 0);
    EXPECT_LE(g.offset + g.length, layout_.file_size - layout_.footer_bytes);
    EXPECT_GT(g.uncompressed_bytes, 0);
    previous_end = g.offset + g.length;
  }
  EXPECT_EQ(ParquetColumnKindName(ParquetColumnKind::kBytesWithPath), "bytes_with_path");
}

TEST_F(ParquetTableTest, LayoutFromTheTailAloneAsksForMoreBytesThenReadsIt) {
  const int64_t size = static_cast<int64_t>(file_.size());
  // Too short even for the footer length: asks for the last 8 bytes.
  Result<ParquetTailProbe> probe = ReadParquetTail(size, Tail(file_, 3));
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_EQ(probe->tail_bytes_needed, 8);
  EXPECT_FALSE(probe->layout);
  // 8 bytes: now it knows the footer's length.
  probe = ReadParquetTail(size, Tail(file_, 8));
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_EQ(probe->tail_bytes_needed, layout_.footer_bytes);
  EXPECT_FALSE(probe->layout);
  // One byte short of the footer: the same answer.
  probe = ReadParquetTail(size, Tail(file_, static_cast<size_t>(layout_.footer_bytes - 1)));
  ASSERT_TRUE(probe.ok());
  EXPECT_EQ(probe->tail_bytes_needed, layout_.footer_bytes);
  // Exactly the footer: the layout, the same as from the whole file.
  probe = ReadParquetTail(size, Tail(file_, static_cast<size_t>(layout_.footer_bytes)));
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  ASSERT_TRUE(probe->layout);
  EXPECT_EQ(probe->tail_bytes_needed, 0);
  const ParquetLayout& from_tail = *probe->layout;
  EXPECT_EQ(from_tail.rows, layout_.rows);
  ASSERT_EQ(from_tail.row_groups.size(), layout_.row_groups.size());
  for (size_t i = 0; i < from_tail.row_groups.size(); ++i) {
    EXPECT_EQ(from_tail.row_groups[i].offset, layout_.row_groups[i].offset);
    EXPECT_EQ(from_tail.row_groups[i].length, layout_.row_groups[i].length);
  }
  // And a tail-only layout decodes a row group.
  const ParquetRowGroup& g = from_tail.row_groups[2];
  const std::vector<std::string> columns = {"image", "caption", "id", "score", "flag", "media"};
  Result<ParquetRowGroupData> data =
      DecodeParquetRowGroup(from_tail, 2, RangeOf(file_, g), columns);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(data->rows, kRowsPerGroup);
  ExpectRowGroupMatches(*data, rows_);
  // The default tail read holds this footer.
  EXPECT_LT(layout_.footer_bytes, kParquetDefaultTailBytes);
}

void ExpectRowGroupMatches(const ParquetRowGroupData& data, const std::vector<Row>& rows) {
  ASSERT_EQ(data.columns.size(), 6u);
  for (const ParquetColumnValues& column : data.columns) {
    ASSERT_EQ(static_cast<int64_t>(column.values.size()), data.rows) << column.name;
  }
  for (int64_t k = 0; k < data.rows; ++k) {
    const Row& want = rows[static_cast<size_t>(data.first_row + k)];
    const size_t i = static_cast<size_t>(k);
    SCOPED_TRACE("row " + std::to_string(data.first_row + k));
    // image: bytes or null, per cell.
    const ParquetValue& image = data.columns[0].values[i];
    if (want.image) {
      ASSERT_TRUE(std::holds_alternative<Buffer>(image));
      EXPECT_EQ(AsView(std::get<Buffer>(image)), *want.image);
    } else {
      EXPECT_TRUE(std::holds_alternative<std::monostate>(image));
    }
    const ParquetValue& caption = data.columns[1].values[i];
    if (want.caption) {
      ASSERT_TRUE(std::holds_alternative<std::string>(caption));
      EXPECT_EQ(std::get<std::string>(caption), *want.caption);
    } else {
      EXPECT_TRUE(std::holds_alternative<std::monostate>(caption));
    }
    ASSERT_TRUE(std::holds_alternative<int64_t>(data.columns[2].values[i]));
    EXPECT_EQ(std::get<int64_t>(data.columns[2].values[i]), want.id);
    const ParquetValue& score = data.columns[3].values[i];
    if (want.score) {
      ASSERT_TRUE(std::holds_alternative<double>(score));
      EXPECT_EQ(std::get<double>(score), *want.score);
    } else {
      EXPECT_TRUE(std::holds_alternative<std::monostate>(score));
    }
    ASSERT_TRUE(std::holds_alternative<int64_t>(data.columns[4].values[i]));
    EXPECT_EQ(std::get<int64_t>(data.columns[4].values[i]), want.flag ? 1 : 0);
    const ParquetValue& media = data.columns[5].values[i];
    if (want.media_null) {
      EXPECT_TRUE(std::holds_alternative<std::monostate>(media));
      continue;
    }
    ASSERT_TRUE(std::holds_alternative<ParquetMedia>(media));
    const ParquetMedia& m = std::get<ParquetMedia>(media);
    ASSERT_EQ(m.bytes.has_value(), want.media_bytes.has_value());
    if (m.bytes) {
      EXPECT_EQ(AsView(*m.bytes), *want.media_bytes);
    }
    EXPECT_EQ(m.path, want.media_path);
  }
}

TEST_F(ParquetTableTest, EachRowGroupDecodesFromOnlyItsRangeToTheWrittenValues) {
  const std::vector<std::string> columns = {"image", "caption", "id", "score", "flag", "media"};
  for (int i = 0; i < static_cast<int>(layout_.row_groups.size()); ++i) {
    const ParquetRowGroup& g = layout_.row_groups[static_cast<size_t>(i)];
    Result<ParquetRowGroupData> data =
        DecodeParquetRowGroup(layout_, i, RangeOf(file_, g), columns);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    EXPECT_EQ(data->row_group, i);
    EXPECT_EQ(data->first_row, g.first_row);
    EXPECT_EQ(data->rows, g.rows);
    ExpectRowGroupMatches(*data, rows_);
    // The bytes alone are counted, and Arrow's decode memory is reported.
    int64_t bytes = 0;
    for (int64_t k = 0; k < g.rows; ++k) {
      const Row& r = rows_[static_cast<size_t>(g.first_row + k)];
      bytes += static_cast<int64_t>((r.image ? r.image->size() : 0) +
                                    (r.media_bytes && !r.media_null ? r.media_bytes->size() : 0));
    }
    EXPECT_GE(data->decoded_bytes, bytes + g.rows * 6 * static_cast<int64_t>(sizeof(ParquetValue)));
    EXPECT_GT(data->peak_decode_bytes, 0);
  }
}

TEST_F(ParquetTableTest, ThreadsDecodingOneLayoutAtOnceGetTheSameValues) {
  const std::vector<std::string> columns = {"image", "caption", "id", "score", "flag", "media"};
  std::vector<Buffer> ranges;
  for (const ParquetRowGroup& g : layout_.row_groups) ranges.push_back(RangeOf(file_, g));
  std::vector<std::thread> threads;
  std::atomic<int> decoded{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (size_t k = 0; k < ranges.size(); ++k) {
          const int i = static_cast<int>((k + static_cast<size_t>(t)) % ranges.size());
          Result<ParquetRowGroupData> data =
              DecodeParquetRowGroup(layout_, i, ranges[static_cast<size_t>(i)], columns);
          EXPECT_TRUE(data.ok()) << data.status().ToString();
          if (data.ok()) {
            ExpectRowGroupMatches(*data, rows_);
            decoded.fetch_add(1);
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(decoded.load(), 4 * 3 * static_cast<int>(ranges.size()));
}

TEST_F(ParquetTableTest, JpegBytesComeBackAsDecodableJpegs) {
  const ParquetRowGroup& g = layout_.row_groups[0];
  const std::string image[] = {"image"};
  Result<ParquetRowGroupData> data = DecodeParquetRowGroup(layout_, 0, RangeOf(file_, g), image);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  const Buffer& jpeg = std::get<Buffer>(data->columns[0].values[1]);
  tjhandle tj = tjInitDecompress();
  int w = 0, h = 0, subsampling = 0, colorspace = 0;
  EXPECT_EQ(tjDecompressHeader3(tj, jpeg.data(), jpeg.size(), &w, &h, &subsampling, &colorspace),
            0);
  tjDestroy(tj);
  EXPECT_EQ(w, 9);
  EXPECT_EQ(h, 7);
}

TEST_F(ParquetTableTest, SelectedColumnsComeInTheOrderAskedAndAllWhenNoneAsked) {
  const ParquetRowGroup& g = layout_.row_groups[1];
  const std::vector<std::string> columns = {"id", "image"};
  Result<ParquetRowGroupData> data = DecodeParquetRowGroup(layout_, 1, RangeOf(file_, g), columns);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  ASSERT_EQ(data->columns.size(), 2u);
  EXPECT_EQ(data->columns[0].name, "id");
  EXPECT_EQ(data->columns[0].kind, ParquetColumnKind::kInt64);
  EXPECT_EQ(std::get<int64_t>(data->columns[0].values[0]), rows_[5].id);
  EXPECT_EQ(data->columns[1].name, "image");
  // Every column, "tags" (a list of strings) too: a ParquetList per row, items in order.
  Result<ParquetRowGroupData> all = DecodeParquetRowGroup(layout_, 1, RangeOf(file_, g));
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->columns.size(), 7u);
  EXPECT_TRUE(all->columns[6].list);
  for (size_t r = 0; r < all->columns[6].values.size(); ++r) {
    const auto& cell = std::get<ParquetList>(all->columns[6].values[r]);
    std::vector<std::string> got;
    for (const ParquetValue& v : cell.items) got.push_back(std::get<std::string>(v));
    EXPECT_EQ(got, std::vector<std::string>{"t"}) << r;
  }
}

TEST(ParquetTable, ListsOfListsAndOfUnreadTypesAreUnsupported) {
  auto inner = std::make_shared<arrow::ListBuilder>(arrow::default_memory_pool(),
                                                    std::make_shared<arrow::Int64Builder>());
  arrow::ListBuilder outer(arrow::default_memory_pool(), inner);
  EXPECT_TRUE(outer.Append().ok());
  std::shared_ptr<arrow::Array> nested;
  EXPECT_TRUE(outer.Finish(&nested).ok());
  auto table = arrow::Table::Make(arrow::schema({arrow::field("nested", nested->type())}),
                                  {nested});
  const Buffer file = WriteParquet(*table, 10);
  Result<ParquetLayout> layout = ReadParquetLayout(file);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->columns[0].kind, ParquetColumnKind::kUnsupported);
  EXPECT_FALSE(layout->columns[0].list);
}

TEST_F(ParquetTableTest, ZstdAndUncompressedFilesDecodeTheSame) {
  for (auto codec : {arrow::Compression::ZSTD, arrow::Compression::UNCOMPRESSED,
                     arrow::Compression::GZIP, arrow::Compression::LZ4}) {
    const Buffer file = WriteParquet(*MakeTable(rows_), 10, codec);
    Result<ParquetLayout> layout = ReadParquetLayout(file);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    ASSERT_EQ(layout->row_groups.size(), 3u);
    const std::vector<std::string> columns = {"image", "caption", "id", "score", "flag", "media"};
    for (int i = 0; i < 3; ++i) {
      Result<ParquetRowGroupData> data = DecodeParquetRowGroup(
          *layout, i, RangeOf(file, layout->row_groups[static_cast<size_t>(i)]), columns);
      ASSERT_TRUE(data.ok()) << data.status().ToString();
      ExpectRowGroupMatches(*data, rows_);
    }
  }
}

TEST_F(ParquetTableTest, MissingColumnIsNotFoundNamingItAndTheColumnsThere) {
  const ParquetRowGroup& g = layout_.row_groups[0];
  const std::vector<std::string> columns = {"image", "jpg"};
  Result<ParquetRowGroupData> data = DecodeParquetRowGroup(layout_, 0, RangeOf(file_, g), columns);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(data.status().message(),
            "row group 0: no column 'jpg' in the file (columns: image, caption, id, score, flag, "
            "media, tags)");
}

TEST_F(ParquetTableTest, WrongRowGroupOrWrongBytesAreInvalidArguments) {
  const ParquetRowGroup& g = layout_.row_groups[0];
  Result<ParquetRowGroupData> data = DecodeParquetRowGroup(layout_, 5, RangeOf(file_, g));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(data.status().message().find("has 5 row groups"), std::string::npos);
  // Row group 1's bytes are not row group 0's range (a different size).
  data = DecodeParquetRowGroup(layout_, 0, RangeOf(file_, layout_.row_groups[4]));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kInvalidArgument);
  const std::vector<std::string> twice = {"id", "id"};
  data = DecodeParquetRowGroup(layout_, 0, RangeOf(file_, g), twice);
  EXPECT_EQ(data.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ParquetTableTest, RowGroupOverTheMemoryLimitIsRefusedBeforeDecoding) {
  const ParquetRowGroup& g = layout_.row_groups[0];
  // Zeros of the right size: decoding them would be kCorruptData, so the refusal below
  // comes from the footer's sizes alone.
  const Buffer zeros = *Buffer::CopyOf(std::string(static_cast<size_t>(g.length), '\0').data(),
                                       static_cast<size_t>(g.length));
  const std::vector<std::string> columns = {"image"};
  ParquetDecodeOptions options;
  options.max_uncompressed_bytes = 100;
  Result<ParquetRowGroupData> data = DecodeParquetRowGroup(layout_, 0, zeros, columns, options);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(data.status().message().find("over the limit of 100 (max_uncompressed_bytes)"),
            std::string::npos)
      << data.status().message();
  // Under the limit the same zeros are what they are: damaged pages.
  options.max_uncompressed_bytes = g.uncompressed_bytes;
  data = DecodeParquetRowGroup(layout_, 0, zeros, columns, options);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kCorruptData) << data.status().ToString();
  EXPECT_EQ(data.status().message().rfind("row group 0", 0), 0u) << data.status().message();
  // And the real bytes decode.
  data = DecodeParquetRowGroup(layout_, 0, RangeOf(file_, g), columns, options);
  EXPECT_TRUE(data.ok()) << data.status().ToString();
}

TEST(ParquetTable, DictionaryPagesThatExpandPastTheDecodeCapAreRefused) {
  // 20,000 copies of one 1 KiB string: a dictionary page of one entry and a few bytes
  // of indices in the file, 20 MB once decoded.
  arrow::StringBuilder builder;
  const std::string value(1024, 'v');
  for (int i = 0; i < 20000; ++i) ASSERT_TRUE(builder.Append(value).ok());
  std::shared_ptr<arrow::Array> array;
  ASSERT_TRUE(builder.Finish(&array).ok());
  auto table = arrow::Table::Make(arrow::schema({arrow::field("text", arrow::utf8())}), {array});
  const Buffer file = WriteParquet(*table, 20000);
  Result<ParquetLayout> layout = ReadParquetLayout(file);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const ParquetRowGroup& g = layout->row_groups[0];
  ASSERT_LT(g.uncompressed_bytes, 100000);
  ParquetDecodeOptions options;
  options.max_uncompressed_bytes = 1 << 20;  // the footer check passes; the cap is 4 MiB
  Result<ParquetRowGroupData> data =
      DecodeParquetRowGroup(*layout, 0, RangeOf(file, g), {}, options);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(data.status().message().find("decoding needs more than 4194304 bytes"),
            std::string::npos)
      << data.status().message();
  // Without the cap it decodes, and says how much it took.
  data = DecodeParquetRowGroup(*layout, 0, RangeOf(file, g));
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(std::get<std::string>(data->columns[0].values[19999]), value);
  EXPECT_GT(data->peak_decode_bytes, 20000 * 1024);
  EXPECT_GT(data->decoded_bytes, 20000 * 1024);
}

TEST_F(ParquetTableTest, TruncatedFileIsCorruptData) {
  // The whole file but its last 100 bytes: starts with PAR1, does not end in it.
  const Buffer cut = file_.Slice(0, file_.size() - 100);
  Result<ParquetLayout> layout = ReadParquetLayout(*Buffer::CopyOf(cut.data(), cut.size()));
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(layout.status().message().find("truncated"), std::string::npos);
  // A footer length larger than the file.
  Buffer tail = Tail(file_, 8);
  const uint32_t huge = 1u << 30;
  std::memcpy(tail.mutable_data(), &huge, 4);
  Result<ParquetTailProbe> probe = ReadParquetTail(static_cast<int64_t>(file_.size()), tail);
  ASSERT_FALSE(probe.ok());
  EXPECT_EQ(probe.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(probe.status().message().find("footer length says 1073741824 bytes"), std::string::npos)
      << probe.status().message();
  // A row group's range cut short is the caller's mistake (wrong size) ...
  const ParquetRowGroup& g = layout_.row_groups[1];
  Result<ParquetRowGroupData> data = DecodeParquetRowGroup(
      layout_, 1, RangeOf(file_, g).Slice(0, static_cast<size_t>(g.length / 2)));
  EXPECT_EQ(data.status().code(), StatusCode::kInvalidArgument);
  // ... while the same size with its second half zeroed is damaged data.
  Buffer damaged = RangeOf(file_, g);
  std::memset(damaged.mutable_data() + g.length / 2, 0,
              static_cast<size_t>(g.length - g.length / 2));
  data = DecodeParquetRowGroup(layout_, 1, damaged, std::vector<std::string>{"image", "caption"});
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kCorruptData) << data.status().ToString();
}

TEST_F(ParquetTableTest, GarbageIsUnsupportedOrCorruptNeverACrash) {
  std::string noise(4096, '\0');
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 2654435761u) >> 13);
  Result<ParquetLayout> layout = ReadParquetLayout(*Buffer::CopyOf(noise.data(), noise.size()));
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), StatusCode::kUnsupportedFormat);
  EXPECT_NE(layout.status().message().find("not a Parquet file"), std::string::npos);
  // Noise with a plausible footer length and the magic: the footer does not parse.
  const uint32_t length = 1000;
  std::memcpy(noise.data() + noise.size() - 8, &length, 4);
  std::memcpy(noise.data() + noise.size() - 4, "PAR1", 4);
  layout = ReadParquetLayout(*Buffer::CopyOf(noise.data(), noise.size()));
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), StatusCode::kCorruptData) << layout.status().ToString();
  EXPECT_EQ(layout.status().message().rfind("Parquet footer", 0), 0u) << layout.status().message();
  // The real footer with its bytes flipped, one at a time: never a crash, only these codes.
  const size_t footer_start = file_.size() - static_cast<size_t>(layout_.footer_bytes);
  for (size_t at = footer_start; at < file_.size() - 8; at += 7) {
    Buffer copy = *Buffer::CopyOf(file_.data(), file_.size());
    copy.mutable_data()[at] ^= 0x5a;
    Result<ParquetLayout> damaged = ReadParquetLayout(copy);
    if (!damaged.ok()) {
      const StatusCode code = damaged.status().code();
      EXPECT_TRUE(code == StatusCode::kCorruptData || code == StatusCode::kUnsupportedFormat)
          << damaged.status().ToString();
      continue;
    }
    for (int i = 0; i < static_cast<int>(damaged->row_groups.size()); ++i) {
      const ParquetRowGroup& g = damaged->row_groups[static_cast<size_t>(i)];
      const std::vector<std::string> columns = {"image", "caption", "id"};
      Result<ParquetRowGroupData> data =
          DecodeParquetRowGroup(*damaged, i, RangeOf(copy, g), columns);
      if (!data.ok()) {
        const StatusCode code = data.status().code();
        EXPECT_TRUE(code == StatusCode::kCorruptData || code == StatusCode::kUnsupportedFormat ||
                    code == StatusCode::kNotFound)
            << data.status().ToString();
      }
    }
  }
  // Too short to be anything.
  layout = ReadParquetLayout(*Buffer::CopyOf("PAR1", 4));
  EXPECT_EQ(layout.status().code(), StatusCode::kCorruptData);
  layout = ReadParquetLayout(Buffer());
  EXPECT_EQ(layout.status().code(), StatusCode::kUnsupportedFormat);
  // An encrypted footer.
  Buffer encrypted = *Buffer::CopyOf(file_.data(), file_.size());
  std::memcpy(encrypted.mutable_data() + encrypted.size() - 4, "PARE", 4);
  layout = ReadParquetLayout(encrypted);
  EXPECT_EQ(layout.status().code(), StatusCode::kUnsupportedFormat);
  EXPECT_NE(layout.status().message().find("encrypted"), std::string::npos);
  // A tail longer than the file.
  EXPECT_EQ(ReadParquetTail(3, file_).status().code(), StatusCode::kInvalidArgument);
}

TEST(ParquetTable, EmptyTableHasNoRowGroupsToRead) {
  auto table = arrow::Table::Make(arrow::schema({arrow::field("id", arrow::int64())}),
                                  {std::make_shared<arrow::Int64Array>(0, nullptr)});
  const Buffer file = WriteParquet(*table, 10);
  Result<ParquetLayout> layout = ReadParquetLayout(file);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->rows, 0);
  for (size_t i = 0; i < layout->row_groups.size(); ++i) {
    EXPECT_EQ(layout->row_groups[i].rows, 0);
    Result<ParquetRowGroupData> data =
        DecodeParquetRowGroup(*layout, static_cast<int>(i), RangeOf(file, layout->row_groups[i]));
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    EXPECT_EQ(data->columns.size(), 1u);
    EXPECT_TRUE(data->columns[0].values.empty());
  }
}

// The wheel's libparquet exports a copy of OpenSSL and of simdjson (see the top-level
// CMakeLists.txt): the engine's own calls must reach Debian's libraries.
TEST(ParquetLinkage, OpenSslAndSimdjsonResolveToDebiansLibrariesNotTheWheels) {
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&SHA256), &info), 0);
  EXPECT_NE(std::string(info.dli_fname).find("libcrypto.so"), std::string::npos) << info.dli_fname;
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&simdjson::get_active_implementation), &info), 0);
  EXPECT_NE(std::string(info.dli_fname).find("libsimdjson.so"), std::string::npos)
      << info.dli_fname;
}

}  // namespace
}  // namespace headrace::parquet_table_test
