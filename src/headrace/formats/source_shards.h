// The tar shard source (source.shards): WebDataset shards read through a block cache,
// the records compact (shard_records.h), a sample's text members parsed when it runs
// (PrepareShardSample, shard_set.h).
#pragma once

#include "headrace/formats/shard_set.h"
#include "headrace/formats/source.h"

namespace headrace {

struct SourceKeyContext;

Result<std::shared_ptr<const Source>> OpenShardSource(const SourceSpec& spec,
                                                      const SourceOptions& options,
                                                      std::shared_ptr<Storage> storage);

// The block cache's bytes: source.cache_bytes, checked to hold a shuffle window of the
// largest shard (kInvalidArgument naming the keys), or when 0, automatic: (window + 1) ×
// the largest shard (four blocks unshuffled), at most every shard's bytes.
Result<int64_t> BlockCacheBytes(const SourceSpec& spec, bool shuffle, const ShardSet& shards);

// The shard keys' rules (source_kinds.h): source.fields first (their keys are read as
// extensions), the field map, source.shuffle_window, block_bytes, and cache_bytes: at
// least a block, and leaving memory.budget_bytes room for batches beside the I/O budget.
Status CheckShardKeys(const SourceSpec& spec, const SourceKeyContext& context);

// source.shuffle_scope in a spec of another kind: it applies to tar shards only.
Status CheckShardKeysUnused(const SourceSpec& spec);

}  // namespace headrace
