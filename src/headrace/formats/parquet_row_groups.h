// ParquetRowGroupCache: each Parquet row group read once and decoded once, however many
// of its samples are in flight, within a byte bound that is part of memory.budget_bytes.
//
//   engine read of a record's row-group MediaRef (parquet_file_set.h)
//      ──▶ ReadRangeAsyncGated(file, group offset, length): this cache, as the Storage
//            absent    ─▶ gate(length) (the sample's I/O budget charge), one ranged read
//                         of the group from the base storage; the group is Fetching
//            Fetching  ─▶ waits for that read (gate(0): nothing more is charged)
//            Fetched, Decoding ─▶ gate(0), the fetched bytes (shared, not copied)
//            Decoded, Failed   ─▶ gate(0), no bytes (Prepare uses the cache)
//   the source's Fill (source_parquet.cc; CPU thread, before the chain) ──▶ Prepare(sample)
//            Decoded   ─▶ the sample's cells are taken from it
//            Decoding  ─▶ waits until the thread decoding it is done, then as Decoded
//            Fetched / absent ─▶ this thread decodes it (DecodeParquetRowGroup) from the
//                         group's bytes (the cache's, else the sample's own; when both
//                         were dropped meanwhile, one blocking ranged read), then Decoded
//            Failed    ─▶ the group's status, for each of its samples
//
// Memory. The cache holds fetched bytes until the group is decoded, then the decoded
// columns (ParquetRowGroupData::decoded_bytes); the sum is kept at or below
// `capacity_bytes` by dropping the least recently used groups that nobody is fetching or
// decoding. A group is dropped as soon as all its rows have been prepared in one epoch
// (each row is a sample once per epoch), so in order (or a shuffle window's order) the
// cache holds about the groups in flight, not the bound. (A rank's share of an epoch never
// uses every row: there the bound alone decides.) Samples keep only slices of the cells they
// use (a dropped group's columns live until those samples end). A group whose selected
// columns' uncompressed size exceeds the capacity is refused before it is decoded
// (kResourceExhausted naming both sizes); Arrow's own allocations while decoding are
// capped at 4x that (parquet_table.h). The first sample of a group is charged its bytes
// in the engine's I/O budget while they are in flight; the others nothing.
//
// Threads: every method is thread-safe. Callbacks run on the base storage's threads (or
// inline, on the caller's, when the group is already here), never under the cache's lock.
// Prepare blocks its CPU thread only while another thread decodes the same group (or, in
// the rare dropped case, for one read). The destructor must run after every read has
// completed.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <string>
#include <unordered_map>
#include <vector>

#include "headrace/formats/parquet_file_set.h"
#include "headrace/io/storage.h"

namespace headrace {

struct RowGroupCacheStats {
  int64_t fetches = 0;       // row-group reads from the base storage (its requests)
  int64_t fetch_waits = 0;   // reads that waited for another sample's fetch
  int64_t fetch_hits = 0;    // reads answered from the cache
  int64_t decodes = 0;       // row groups decoded
  int64_t decode_waits = 0;  // samples that waited for another thread's decode
  int64_t refetches = 0;     // blocking reads of a group dropped between read and prepare
  int64_t evictions = 0;     // groups dropped by the capacity bound (not by completion)
  int64_t bytes_held = 0;
  int64_t peak_bytes = 0;
  int64_t capacity_bytes = 0;
};

class ParquetRowGroupCache final : public Storage {
 public:
  ParquetRowGroupCache(std::shared_ptr<Storage> base, std::shared_ptr<const ParquetFileSet> source,
                       SourceSpec spec, int64_t capacity_bytes);
  ~ParquetRowGroupCache() override;

  // The source's Fill: puts the sample's cells in place (FillSampleFromRowGroup)
  // and drops its reference to the group's fetched bytes.
  Status Prepare(Sample& sample);

  void ReadAsync(std::string uri, ReadCallback done) override;
  void ReadAsyncGated(std::string uri, ReadCallback done, ReadGate gate) override;
  // A row group's exact range (as its records name it) goes through the cache; any
  // other range passes through to the base storage.
  void ReadRangeAsyncGated(std::string uri, int64_t offset, int64_t length, ReadCallback done,
                           ReadGate gate) override;
  void SizeAsync(std::string uri, SizeCallback done, ReadGate wanted) override {
    base_->SizeAsync(std::move(uri), std::move(done), std::move(wanted));
  }
  std::string_view name() const override { return base_->name(); }
  std::vector<StorageStats> Stats() const override { return base_->Stats(); }

  RowGroupCacheStats CacheStats() const;

 private:
  // Where a row group is in its life; absent from `groups_`: not here.
  enum class GroupState {
    kFetching,  // one ranged read in flight; later reads queue behind it
    kFetched,   // its bytes are here, not decoded yet
    kDecoding,  // one CPU thread decodes it; other samples of it wait
    kDecoded,   // its decoded columns are here
    kFailed,    // decoding failed: every sample of it gets `status`
  };
  struct Waiter {
    ReadCallback done;
    ReadGate gate;
  };
  struct Entry {
    GroupState state = GroupState::kFetching;
    Buffer bytes;                     // kFetched, kDecoding: the group's file bytes
    std::vector<Waiter> waiters;      // kFetching
    std::shared_ptr<const ParquetRowGroupData> data;  // kDecoded
    Status status;                    // kFailed
    int64_t held = 0;                 // bytes counted against the capacity
    // Samples prepared from it, per epoch: when one epoch has used every row, it goes.
    std::map<int64_t, int64_t> prepared;
    bool in_lru = false;
    std::list<size_t>::iterator lru;  // valid when in_lru
  };

  void OnFetched(size_t group, Result<Buffer> bytes);
  // Counts `entry`'s bytes as `held` and drops least recently used groups over capacity.
  void SetHeldLocked(size_t group, Entry& entry, int64_t held);
  void TouchLocked(size_t group, Entry& entry);
  void EraseLocked(size_t group);
  // Decodes `group` from `bytes` on this thread.
  Result<std::shared_ptr<const ParquetRowGroupData>> Decode(size_t group, const Buffer& bytes);
  // One blocking ranged read of `group`, for a group dropped before its sample got here.
  Result<Buffer> Refetch(size_t group);

  const std::shared_ptr<Storage> base_;
  const std::shared_ptr<const ParquetFileSet> source_;
  const SourceSpec spec_;
  const int64_t capacity_;
  std::vector<std::string> column_names_;
  // (file URI, offset) of each group's range → group index.
  std::map<std::pair<std::string, int64_t>, size_t> range_to_group_;

  mutable std::mutex mu_;
  std::condition_variable decoded_cv_;               // a decode finished
  std::unordered_map<size_t, Entry> groups_;         // guarded by mu_
  std::list<size_t> lru_;                            // guarded by mu_: oldest first
  int64_t held_ = 0;                                 // guarded by mu_
  RowGroupCacheStats stats_;                         // guarded by mu_
};

}  // namespace headrace
