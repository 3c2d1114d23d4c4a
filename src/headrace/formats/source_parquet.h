// The Parquet source (source.parquet): rows of Parquet files, each row group read and
// decoded once through a cache (parquet_row_groups.h) that is part of the memory budget.
#pragma once

#include "headrace/formats/parquet_file_set.h"
#include "headrace/formats/source.h"

namespace headrace {

struct SourceKeyContext;

Result<std::shared_ptr<const Source>> OpenParquetSource(const SourceSpec& spec,
                                                        const SourceOptions& options,
                                                        std::shared_ptr<Storage> storage);

// The row-group cache's bytes: source.cache_bytes, or when 0, automatic: the row groups
// the samples in flight span (options.samples_in_flight, plus source.shuffle_window groups
// when shuffled) × the largest group (its bytes or its decoded cells), at most every
// group's and at most half of the memory budget.
int64_t RowGroupCacheBytes(const SourceSpec& spec, const SourceOptions& options,
                           const ParquetFileSet& source);

// The Parquet keys' rules (source_kinds.h): source.shuffle_window (row groups) and
// source.cache_bytes.
Status CheckParquetKeys(const SourceSpec& spec, const SourceKeyContext& context);

}  // namespace headrace
