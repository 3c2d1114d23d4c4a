// RecordStore: a dataset's records by index, however the source keeps them.
//
// The engine asks for each sample's record once, when its batch starts, and keeps it
// for the batch's life. A store either holds every record parsed (VectorRecords: fast;
// a parsed manifest's and a materialization's form) or keeps something smaller and
// builds the record on request (formats/manifest_lines.h: a JSONL manifest's lines;
// shard_records.h, parquet_records.h: a shard's or a row's place), so that a process's
// memory does not grow with the parsed dataset. Each source (formats/source.h) owns its
// store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "headrace/core/sample.h"

namespace headrace {

// What a store holds in memory, for the run report.
struct RecordStoreMemory {
  // Private heap bytes: parsed records, or a lazy store's index and, when the source's
  // bytes could not be mapped, its copy of them.
  int64_t heap_bytes = 0;
  // Bytes of a file mapped read-only (the page cache): shared by every process on the
  // machine that maps the same file, and given back by the kernel under pressure.
  int64_t mapped_bytes = 0;
};

class RecordStore {
 public:
  virtual ~RecordStore() = default;
  // Records in the dataset; their indices are [0, size()).
  virtual int64_t size() const = 0;
  // The record at `index` (in range): either one the store holds, or `scratch` filled
  // in. A record that cannot be parsed is returned with its status set, as a parsed
  // source holds it. Thread-safe; `scratch` is the caller's own.
  virtual const SampleRecord& Get(int64_t index, SampleRecord& scratch) const = 0;
  virtual RecordStoreMemory Memory() const = 0;
};

// Records held parsed, in a vector shared with whoever made them (the source).
class VectorRecords final : public RecordStore {
 public:
  explicit VectorRecords(std::shared_ptr<const std::vector<SampleRecord>> records,
                         int64_t heap_bytes = 0)
      : records_(std::move(records)), heap_bytes_(heap_bytes) {}

  int64_t size() const override { return static_cast<int64_t>(records_->size()); }
  const SampleRecord& Get(int64_t index, SampleRecord& /*scratch*/) const override {
    return (*records_)[static_cast<size_t>(index)];
  }
  RecordStoreMemory Memory() const override { return {heap_bytes_, 0}; }
  const std::vector<SampleRecord>& records() const { return *records_; }

 private:
  std::shared_ptr<const std::vector<SampleRecord>> records_;
  int64_t heap_bytes_ = 0;
};

}  // namespace headrace
