// ParquetRecords: a Parquet source's records, made when a sample's batch starts.
//
// A row's record is a function of where it is: "<file>#row N" as its id and location,
// line N + 1, and its row group's byte range as its one media item (the cells come from
// the decoded group at run time). Held as SampleRecords that is ~300-450 bytes a row
// (three copies of the file's URI on the heap) in every process that loads the source;
// here a row costs nothing, except what path columns hold (read at load time: their
// URIs are data): each URI's bytes once and 16 bytes an item, plus 8 bytes a row. Bad
// rows are kept as they are.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "headrace/core/record_store.h"
#include "headrace/formats/parquet_file_set.h"

namespace headrace {

class ParquetRecords final : public RecordStore {
 public:
  // `source` loaded compact (LoadParquetFileSet(..., compact = true)).
  explicit ParquetRecords(std::shared_ptr<const ParquetFileSet> source)
      : source_(std::move(source)) {}

  int64_t size() const override { return source_->num_rows; }
  const SampleRecord& Get(int64_t index, SampleRecord& scratch) const override;
  RecordStoreMemory Memory() const override;

 private:
  std::shared_ptr<const ParquetFileSet> source_;
};

}  // namespace headrace
