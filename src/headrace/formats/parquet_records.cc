#include "headrace/formats/parquet_records.h"

#include <algorithm>

#include "headrace/formats/shard_set.h"

namespace headrace {

const SampleRecord& ParquetRecords::Get(int64_t index, SampleRecord& scratch) const {
  const auto& irregular = source_->irregular;
  const auto it = std::lower_bound(irregular.begin(), irregular.end(), index,
                                   [](const auto& entry, int64_t i) { return entry.first < i; });
  if (it != irregular.end() && it->first == index) return it->second;
  scratch = SampleRecord{};
  MakeParquetRecord(*source_, index, scratch, /*with_paths=*/true);
  return scratch;
}

RecordStoreMemory ParquetRecords::Memory() const {
  return {static_cast<int64_t>(sizeof(*this) + ParquetFileSetMemoryBytes(*source_)), 0};
}

}  // namespace headrace
