#include "headrace/formats/source_shards.h"

#include <algorithm>

#include "headrace/formats/shard_records.h"
#include "headrace/io/block_cache.h"

namespace headrace {
namespace {

class TarShardSource final : public RecordSource {
 public:
  TarShardSource(const SourceSpec& spec, std::shared_ptr<BlockCache> cache,
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

}  // namespace

Result<int64_t> BlockCacheBytes(const SourceSpec& src, bool shuffle, const ShardSource& shards) {
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
  HR_ASSIGN_OR_RETURN(ShardSource shards, LoadShardSource(*storage, spec, compact.get()));
  if (options.fail_on_bad_shard && !shards.bad_shards.empty()) {
    const Status& first = shards.bad_shards.front().status;
    return Status::CorruptData("source.shards: " + first.message() +
                               " (errors.on_bad_shard: fail; skip goes on without it)");
  }
  HR_ASSIGN_OR_RETURN(const int64_t cache_bytes, BlockCacheBytes(spec, options.shuffle, shards));
  auto cache = std::make_shared<BlockCache>(std::move(storage),
                                            BlockCacheOptions{spec.block_bytes, cache_bytes});
  for (size_t i = 0; i < shards.shards.size(); ++i) {
    cache->SetObjectSize(shards.shards[i], shards.shard_bytes[i]);
  }
  const int64_t heap_bytes =
      static_cast<int64_t>(ShardSourceMemoryBytes(shards)) + compact->Memory().heap_bytes;
  auto source = std::make_shared<TarShardSource>(spec, std::move(cache), std::move(compact),
                                                 std::move(shards.map));
  SourceInfo& info = source->mutable_info();
  info.description = "shards " + spec.shards + " (" + std::to_string(shards.shards.size()) +
                     " shards, " + std::to_string(shards.indexed_shards) + " indexed, " +
                     std::to_string(shards.scanned_shards) + " scanned" +
                     (shards.bad_shards.empty()
                          ? std::string()
                          : ", " + std::to_string(shards.bad_shards.size()) + " unreadable") +
                     ")";
  info.path = spec.shards;
  info.bad_records = shards.bad_samples;
  info.bad_shards = std::move(shards.bad_shards);
  info.heap_bytes = heap_bytes;
  info.cache_bytes = cache_bytes;
  source->mutable_order() = OrderShape{std::move(shards.shard_samples), spec.shuffle_window};
  return std::shared_ptr<const Source>(std::move(source));
}

}  // namespace headrace
