#include "headrace/formats/source_shards.h"

#include <algorithm>

#include "headrace/formats/shard_records.h"
#include "headrace/formats/source_kinds.h"
#include "headrace/io/block_cache.h"
#include "headrace/ops/schema.h"

namespace headrace {
namespace {

class ShardSource final : public RecordSource {
 public:
  ShardSource(const SourceSpec& spec, std::shared_ptr<BlockCache> cache,
                 std::shared_ptr<const RecordStore> records, ShardFieldMap map)
      : RecordSource(spec, cache, {std::move(records)}),
        cache_(std::move(cache)),
        map_(std::move(map)) {
    set_values_need_reads(true);  // a shard's values are members, read with its media
  }

  Status Fill(std::vector<Buffer> media, Sample& sample) const override {
    FillFromRecord(std::move(media), sample);
    return PrepareShardSample(sample, spec_, map_);
  }
  const BlockCache* block_cache() const override { return cache_.get(); }

 private:
  std::shared_ptr<BlockCache> cache_;
  ShardFieldMap map_;
};

// A shard read in a global order: each sample's members are one block of their own.
struct SampleBlocks {
  std::vector<std::vector<std::pair<int64_t, int>>> starts;  // per shard: SetObjectBlocks'
  int64_t largest = 0;                       // the largest sample's block
  int64_t total = 0;                         // every shard's bytes
  int64_t blocks = 0;
};

SampleBlocks SampleBlocksOf(const ShardRecords& records, const ShardSet& shards) {
  SampleBlocks out;
  out.starts.resize(shards.shards.size());
  for (size_t i = 0; i < shards.shards.size(); ++i) {
    std::vector<std::pair<int64_t, int>>& starts = out.starts[i] = records.SampleStarts(i);
    // Block k runs from sample k's first member to sample k + 1's (its last to the
    // tar's end); the tar headers before a sample's first member are the previous
    // block's tail, a few hundred bytes.
    int64_t previous = 0;
    for (const auto& [start, members] : starts) {
      out.largest = std::max(out.largest, start - previous);
      previous = start;
    }
    out.largest = std::max(out.largest, shards.shard_bytes[i] - previous);
    out.total += shards.shard_bytes[i];
    out.blocks += static_cast<int64_t>(starts.size()) + 1;
  }
  return out;
}

// The cache of a global order: blocks are read by the samples in flight, each once, and
// stay only until newer ones need their room. Enough for the samples a run has in flight
// (SourceOptions::samples_in_flight, at the mean block) and twice the largest block, at
// most every shard's bytes; source.cache_bytes must hold the largest block.
Result<int64_t> SampleBlockCacheBytes(const SourceSpec& src, const SourceOptions& options,
                                      const SampleBlocks& blocks) {
  if (src.cache_bytes > 0) {
    if (src.cache_bytes < blocks.largest) {
      return Status::InvalidArgument(
          "source.cache_bytes (" + std::to_string(src.cache_bytes) +
          ") cannot hold the largest sample of the shards (" + std::to_string(blocks.largest) +
          " bytes), which source.shuffle_scope: global reads whole; raise source.cache_bytes");
    }
    return src.cache_bytes;
  }
  const int64_t mean = blocks.total / std::max<int64_t>(1, blocks.blocks);
  const int64_t in_flight = std::max<int64_t>(options.samples_in_flight, 16) * mean;
  return std::max<int64_t>(1, std::min(blocks.total, std::max(in_flight, 2 * blocks.largest)));
}

}  // namespace

Result<int64_t> BlockCacheBytes(const SourceSpec& src, bool shuffle, const ShardSet& shards) {
  const int64_t block = src.block_bytes;
  // A shard's blocks hold exactly its bytes: the last block is cut at its size.
  int64_t largest = 0;
  int64_t total = 0;
  for (const int64_t bytes : shards.shard_bytes) {
    largest = std::max(largest, bytes);
    total += bytes;
  }
  const int64_t one_block = std::max<int64_t>(1, std::min(block, largest));
  const auto window = std::min<int64_t>(src.shuffle_window,
                                        static_cast<int64_t>(shards.shard_bytes.size()));
  // Shuffled, a window's samples come in any order: every block of its shards is in use
  // until the window ends. In order, a member's one or two blocks are.
  const int64_t needed = shuffle ? window * largest : std::min(total, 2 * one_block);
  if (src.cache_bytes > 0) {
    if (src.cache_bytes < needed) {
      return Status::InvalidArgument(
          "source.cache_bytes (" + std::to_string(src.cache_bytes) + ") cannot hold a window of " +
          std::to_string(window) + " shards (source.shuffle_window) of up to " +
          std::to_string(largest) + " bytes: it needs " +
          std::to_string(needed) +
          "; raise source.cache_bytes, lower source.shuffle_window, or write smaller shards");
    }
    return src.cache_bytes;
  }
  // One shard more than the window: the next window's first blocks load while the last
  // samples of this one are still read.
  const int64_t automatic = shuffle ? std::min(total, (window + 1) * largest)
                                    : std::min(total, 4 * one_block);
  return std::max<int64_t>(automatic, 1);
}

Result<std::shared_ptr<const Source>> OpenShardSource(const SourceSpec& spec,
                                                      const SourceOptions& options,
                                                      std::shared_ptr<Storage> storage) {
  // The records compact (~70 bytes a sample, not ~400), each built when its batch starts.
  auto compact = std::make_shared<ShardRecords>();
  HR_ASSIGN_OR_RETURN(ShardSet shards, LoadShardSet(*storage, spec, compact.get()));
  if (options.fail_on_bad_shard && !shards.bad_shards.empty()) {
    const Status& first = shards.bad_shards.front().status;
    return Status::CorruptData("source.shards: " + first.message() +
                               " (errors.on_bad_shard: fail; skip goes on without it)");
  }
  // A global order reads each sample's members as one block of their own; in order, or
  // shuffled within windows of shards, aligned blocks serve many samples each.
  const bool global = options.shuffle && spec.shuffle_scope == ShuffleScope::kGlobal;
  SampleBlocks blocks;
  if (global) blocks = SampleBlocksOf(*compact, shards);
  HR_ASSIGN_OR_RETURN(const int64_t cache_bytes,
                      global ? SampleBlockCacheBytes(spec, options, blocks)
                             : BlockCacheBytes(spec, options.shuffle, shards));
  auto cache = std::make_shared<BlockCache>(std::move(storage),
                                            BlockCacheOptions{spec.block_bytes, cache_bytes});
  int64_t layout_bytes = 0;
  for (size_t i = 0; i < shards.shards.size(); ++i) {
    if (global) {
      layout_bytes += static_cast<int64_t>(blocks.starts[i].size() * (sizeof(int64_t) + sizeof(int)));
      cache->SetObjectBlocks(shards.shards[i], shards.shard_bytes[i], std::move(blocks.starts[i]));
    } else {
      cache->SetObjectSize(shards.shards[i], shards.shard_bytes[i]);
    }
  }
  const int64_t heap_bytes = static_cast<int64_t>(ShardSetMemoryBytes(shards)) +
                             compact->Memory().heap_bytes + layout_bytes;
  auto source = std::make_shared<ShardSource>(spec, std::move(cache), std::move(compact),
                                                 std::move(shards.map));
  SourceInfo& info = source->mutable_info();
  info.description = "shards " + spec.shards + " (" + std::to_string(shards.shards.size()) +
                     " shards, " + std::to_string(shards.indexed_shards) + " indexed, " +
                     std::to_string(shards.scanned_shards) + " scanned" +
                     (global ? ", shuffled globally" : "") +
                     (shards.bad_shards.empty()
                          ? std::string()
                          : ", " + std::to_string(shards.bad_shards.size()) + " unreadable") +
                     ")";
  info.path = spec.shards;
  info.bad_records = shards.bad_samples;
  info.bad_shards = std::move(shards.bad_shards);
  info.heap_bytes = heap_bytes;
  info.cache_bytes = cache_bytes;
  // Global: one permutation of every sample, as a manifest's (no shards in the order).
  source->mutable_order() =
      global ? OrderShape{} : OrderShape{std::move(shards.shard_samples), spec.shuffle_window};
  return std::shared_ptr<const Source>(std::move(source));
}

using schema::AtLeast;
using schema::Got;
using schema::InRange;
using schema::Invalid;

Status CheckShardKeys(const SourceSpec& src, const SourceKeyContext& context) {
  HR_RETURN_IF_ERROR(CheckSourceFields(src));  // before its keys are read as extensions
  if (Result<ShardFieldMap> fields = ShardFieldsOf(src); !fields.ok()) {
    return fields.status();
  }
  HR_RETURN_IF_ERROR(InRange<int64_t>("source.shuffle_window", src.shuffle_window, 1, 1'000'000));
  HR_RETURN_IF_ERROR(
      InRange<int64_t>("source.block_bytes", src.block_bytes, 4096, int64_t{1} << 30));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("source.cache_bytes", src.cache_bytes, 0));
  // A global order's blocks are its samples (source_shards.cc checks they fit), not
  // source.block_bytes.
  if (src.cache_bytes > 0 && src.cache_bytes < src.block_bytes &&
      src.shuffle_scope == ShuffleScope::kWindow) {
    return Invalid("source.cache_bytes", "must hold at least one block (source.block_bytes " +
                                             std::to_string(src.block_bytes) + ")" +
                                             Got(src.cache_bytes));
  }
  const int64_t io = context.io_budget_bytes;
  if (src.cache_bytes > 0 && src.cache_bytes + io >= context.memory_budget_bytes) {
    return Invalid("source.cache_bytes",
                   "the block cache (source.cache_bytes " + std::to_string(src.cache_bytes) +
                       ") plus execution.io_budget_bytes (" + std::to_string(io) +
                       ") leaves nothing of memory.budget_bytes (" +
                       std::to_string(context.memory_budget_bytes) +
                       ") for batches: raise memory.budget_bytes or lower source.cache_bytes "
                       "(and source.shuffle_window)");
  }
  return Status::Ok();
}

Status CheckShardKeysUnused(const SourceSpec& spec) {
  if (spec.shuffle_scope == ShuffleScope::kWindow) return Status::Ok();
  return Invalid("source.shuffle_scope",
                 "applies to tar shards (source.shards) only; a manifest's shuffle is global "
                 "already, Parquet's groups are its row groups");
}

}  // namespace headrace
