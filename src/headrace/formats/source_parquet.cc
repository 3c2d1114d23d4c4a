#include "headrace/formats/source_parquet.h"

#include <algorithm>
#include <limits>

#include "headrace/formats/parquet_records.h"
#include "headrace/formats/parquet_row_groups.h"
#include "headrace/formats/source_kinds.h"
#include "headrace/ops/schema.h"

namespace headrace {
namespace {

class ParquetSource final : public RecordSource {
 public:
  ParquetSource(const SourceSpec& spec, std::shared_ptr<ParquetRowGroupCache> cache,
                    std::shared_ptr<const RecordStore> records)
      : RecordSource(spec, cache, {std::move(records)}), cache_(std::move(cache)) {
    set_values_need_reads(true);  // a row's cells come with its row group's read
  }

  Status Fill(std::vector<Buffer> media, Sample& sample) const override {
    FillFromRecord(std::move(media), sample);
    return cache_->Prepare(sample);
  }
  const ParquetRowGroupCache* row_group_cache() const override { return cache_.get(); }

 private:
  std::shared_ptr<ParquetRowGroupCache> cache_;
};

}  // namespace

int64_t RowGroupCacheBytes(const SourceSpec& src, const SourceOptions& options,
                           const ParquetFileSet& source) {
  int64_t largest = 0;  // what one group holds at most: its bytes, then its cells
  int64_t total = 0;
  int64_t fewest_rows = std::numeric_limits<int64_t>::max();
  for (size_t g = 0; g < source.groups.size(); ++g) {
    const ParquetFileSet::Group& group = source.groups[g];
    const ParquetRowGroup& rg = source.layouts[group.file].row_groups[group.row_group];
    // A decoded cell costs its bytes plus its slot (ParquetValue).
    const int64_t held =
        std::max(rg.length, rg.uncompressed_bytes + rg.rows * int64_t{sizeof(ParquetValue)});
    largest = std::max(largest, held);
    total += held;
    if (rg.rows > 0) fewest_rows = std::min(fewest_rows, rg.rows);
  }
  if (src.cache_bytes > 0) return src.cache_bytes;
  // The groups the samples in flight span: the batches admitted ahead (prefetch depth) in
  // order, plus a shuffle window, whose samples come in any order.
  const int64_t in_flight = options.samples_in_flight;
  const int64_t groups_in_flight =
      (fewest_rows == std::numeric_limits<int64_t>::max() ? 1 : in_flight / fewest_rows + 2) +
      (options.shuffle ? src.shuffle_window : 0);
  int64_t automatic = largest;
  if (groups_in_flight > 0 && largest <= total / groups_in_flight) {
    automatic = groups_in_flight * largest;
  } else {
    automatic = total;
  }
  // At most half the budget: the rest is batches and the I/O budget. A group that does
  // not fit is each of its samples' error, naming the sizes (parquet_row_groups.h).
  return std::max<int64_t>(1, std::min(automatic, options.memory_budget_bytes / 2));
}

Result<std::shared_ptr<const Source>> OpenParquetSource(const SourceSpec& spec,
                                                        const SourceOptions& options,
                                                        std::shared_ptr<Storage> storage) {
  // Compact: a regular row's record is made when its batch starts (parquet_records.h).
  // A row group is never decoded into more than the cache may hold: what it declares
  // is checked against that before anything is sized by it.
  const int64_t max_group_bytes =
      spec.cache_bytes > 0 ? spec.cache_bytes : options.memory_budget_bytes / 2;
  HR_ASSIGN_OR_RETURN(ParquetFileSet parquet,
                      LoadParquetFileSet(*storage, spec, /*compact=*/true, max_group_bytes));
  if (options.fail_on_bad_shard && !parquet.bad_files.empty()) {
    const Status& first = parquet.bad_files.front().status;
    return Status::CorruptData("source.parquet: " + first.message() +
                               " (errors.on_bad_shard: fail; skip goes on without it)");
  }
  const int64_t cache_bytes = RowGroupCacheBytes(spec, options, parquet);
  SourceSpec resolved = spec;
  resolved.fields = parquet.fields;  // what the planner sees: the columns' fields
  SourceInfo info;
  info.description = "parquet " + spec.parquet + " (" + std::to_string(parquet.files.size()) +
                     " files, " + std::to_string(parquet.groups.size()) + " row groups" +
                     (parquet.bad_files.empty()
                          ? std::string()
                          : ", " + std::to_string(parquet.bad_files.size()) + " unreadable") +
                     ")";
  info.path = spec.parquet;
  info.bad_records = parquet.bad_records;
  info.bad_shards = parquet.bad_files;
  info.heap_bytes = static_cast<int64_t>(ParquetFileSetMemoryBytes(parquet));
  info.cache_bytes = cache_bytes;
  OrderShape order{parquet.group_rows, spec.shuffle_window};
  auto loaded = std::make_shared<const ParquetFileSet>(std::move(parquet));
  auto records = std::make_shared<ParquetRecords>(loaded);
  auto cache = std::make_shared<ParquetRowGroupCache>(std::move(storage), std::move(loaded),
                                                      spec, cache_bytes);
  auto source = std::make_shared<ParquetSource>(resolved, std::move(cache), std::move(records));
  source->mutable_info() = std::move(info);
  source->mutable_order() = std::move(order);
  return std::shared_ptr<const Source>(std::move(source));
}

Status CheckParquetKeys(const SourceSpec& spec, const SourceKeyContext& /*context*/) {
  HR_RETURN_IF_ERROR(
      schema::InRange<int64_t>("source.shuffle_window", spec.shuffle_window, 1, 1'000'000));
  return schema::AtLeast<int64_t>("source.cache_bytes", spec.cache_bytes, 0);
}

}  // namespace headrace
