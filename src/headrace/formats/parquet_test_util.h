// Test helpers for the Parquet source: tables written with Arrow's writer, and an
// in-memory Storage that serves ranges, honours gates and counts requests.
#pragma once

#include <arrow/api.h>
#include <arrow/io/memory.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/formats/parquet_footer_patch.h"
#include "headrace/io/storage.h"

namespace headrace::parquet_test {

// One row of the test table.
struct Row {
  std::optional<std::string> image;  // binary column "image"
  std::string conversations;         // JSON, string column "conversations"
  std::string caption;               // string column "caption"
  int64_t label = 0;                 // int64 column "label"
  double score = 0;                  // double column "score"
  std::string id;                    // string column "id" (not a default field)
};

inline std::vector<Row> MakeRows(int n, int first = 0) {
  std::vector<Row> rows;
  for (int i = first; i < first + n; ++i) {
    Row r;
    r.image = "image-bytes-" + std::to_string(i) + std::string(static_cast<size_t>(i % 5), 'x');
    r.conversations = R"([{"from": "human", "value": "q)" + std::to_string(i) +
                      R"("}, {"from": "gpt", "value": "a)" + std::to_string(i) + R"("}])";
    r.caption = "caption " + std::to_string(i);
    r.label = i % 7;
    r.score = i * 0.5;
    r.id = "id-" + std::to_string(i);
    rows.push_back(std::move(r));
  }
  return rows;
}

inline Buffer WriteParquet(const std::vector<Row>& rows, int64_t rows_per_group) {
  arrow::BinaryBuilder image;
  arrow::StringBuilder conversations, caption, id;
  arrow::Int64Builder label;
  arrow::DoubleBuilder score;
  for (const Row& r : rows) {
    EXPECT_TRUE((r.image ? image.Append(*r.image) : image.AppendNull()).ok());
    EXPECT_TRUE(conversations.Append(r.conversations).ok());
    EXPECT_TRUE(caption.Append(r.caption).ok());
    EXPECT_TRUE(label.Append(r.label).ok());
    EXPECT_TRUE(score.Append(r.score).ok());
    EXPECT_TRUE(id.Append(r.id).ok());
  }
  std::vector<std::shared_ptr<arrow::Array>> arrays(6);
  EXPECT_TRUE(image.Finish(&arrays[0]).ok());
  EXPECT_TRUE(conversations.Finish(&arrays[1]).ok());
  EXPECT_TRUE(caption.Finish(&arrays[2]).ok());
  EXPECT_TRUE(label.Finish(&arrays[3]).ok());
  EXPECT_TRUE(score.Finish(&arrays[4]).ok());
  EXPECT_TRUE(id.Finish(&arrays[5]).ok());
  auto schema = arrow::schema(
      {arrow::field("image", arrow::binary()), arrow::field("conversations", arrow::utf8()),
       arrow::field("caption", arrow::utf8()), arrow::field("label", arrow::int64()),
       arrow::field("score", arrow::float64()), arrow::field("id", arrow::utf8())});
  auto table = arrow::Table::Make(schema, arrays);
  auto sink = arrow::io::BufferOutputStream::Create().ValueOrDie();
  const arrow::Status status =
      parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), sink, rows_per_group,
                                 parquet::WriterProperties::Builder().build());
  EXPECT_TRUE(status.ok()) << status.ToString();
  std::shared_ptr<arrow::Buffer> bytes = sink->Finish().ValueOrDie();
  return *Buffer::CopyOf(bytes->data(), static_cast<size_t>(bytes->size()));
}

// Files in memory: whole and ranged reads, gates asked with the size (a refusal is
// kCancelled), each read counted by (uri, offset).
class MemoryStorage final : public Storage {
 public:
  std::map<std::string, Buffer> files;

  void ReadAsync(std::string uri, ReadCallback done) override {
    ReadRangeAsyncGated(std::move(uri), 0, -1, std::move(done), nullptr);
  }
  void ReadAsyncGated(std::string uri, ReadCallback done, ReadGate gate) override {
    ReadRangeAsyncGated(std::move(uri), 0, -1, std::move(done), std::move(gate));
  }
  void ReadRangeAsyncGated(std::string uri, int64_t offset, int64_t length, ReadCallback done,
                           ReadGate gate) override {
    const auto it = files.find(uri);
    {
      std::lock_guard lock(mu_);
      ++reads_[{uri, offset}];
      ++requests_;
    }
    if (it == files.end()) return done(Status::NotFound("no such file: " + uri));
    const auto size = static_cast<int64_t>(it->second.size());
    if (length < 0) length = size - offset;
    if (gate && !gate(length)) return done(Status::Cancelled("gate"));
    done(it->second.Slice(static_cast<size_t>(offset), static_cast<size_t>(length)));
  }
  std::string_view name() const override { return "memory"; }

  int64_t requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  int64_t ReadsOf(const std::string& uri, int64_t offset) const {
    std::lock_guard lock(mu_);
    const auto it = reads_.find({uri, offset});
    return it == reads_.end() ? 0 : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int64_t>, int64_t> reads_;
  int64_t requests_ = 0;
};

}  // namespace headrace::parquet_test
