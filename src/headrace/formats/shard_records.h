// ShardRecords: a shard source's records, compact, each built when a sample's batch
// starts.
//
// A shard sample's record says little: a key, its shard, and each member's field and
// byte range in the tar. Held as SampleRecords that is ~400 bytes a sample (the shard's
// URI copied into every media item and into the record's location, each its own heap
// block), in every process that loads the source: each Ray worker, each rank. Here a
// sample takes its key's bytes, 8 bytes of key offset, 24 bytes a member and 8 bytes of
// member offset (~70 bytes for a LLaVA sample: image + conversation), the shard URIs
// once each, and the statuses of the bad samples only. Get() rebuilds the record the
// source made, field for field (id, location "<shard>#<key>", line = index + 1, status,
// media).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "headrace/core/record_store.h"
#include "headrace/core/sample.h"

namespace headrace {

class ShardRecords final : public RecordStore {
 public:
  // Appends the records of the next shard, in dataset order (as AppendShardRecords made
  // them: every media item of a record names `shard`).
  void AppendShard(const std::string& shard, std::span<const SampleRecord> records);
  // Gives back the slack of the growing arrays, once every shard is in.
  void ShrinkToFit();

  // Where each sample of shard `shard` (in AppendShard's order) begins in its tar (its
  // first member's offset) and how many members it reads, in sample order (samples
  // without members give none). The block layout of a shard read in a global order
  // (io/block_cache.h, SetObjectBlocks).
  std::vector<std::pair<int64_t, int>> SampleStarts(size_t shard) const;

  int64_t size() const override { return static_cast<int64_t>(key_end_.size()); }
  const SampleRecord& Get(int64_t index, SampleRecord& scratch) const override;
  RecordStoreMemory Memory() const override;

 private:
  struct Item {
    int64_t offset = 0;
    int64_t length = -1;
    int32_t field = 0;
  };
  std::vector<std::string> shards_;
  std::vector<int64_t> shard_first_;  // the first record of each shard
  std::string keys_;                  // every key, back to back
  std::vector<uint64_t> key_end_;     // per record: where its key ends in keys_
  std::vector<Item> items_;
  std::vector<uint64_t> item_end_;  // per record: where its items end in items_
  std::vector<std::pair<int64_t, Status>> bad_;  // (record, status), by record
};

}  // namespace headrace
