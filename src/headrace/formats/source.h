// Source: one dataset format, opened once, immutable and thread-safe afterwards.
//
//   OpenSource(spec, options, storage)            (source_kinds.h: the kinds, in one table)
//     └─ a kind's Open: reads the index (a manifest, shard sidecars, Parquet footers,
//        materialized.json), resolves the fields, sizes its cache; fails before any
//        work, naming the key
//   engine, per sample, when its batch starts:  records(epoch).Get(index)  → SampleRecord
//   engine, per sample, once its media are read (CPU thread):
//        Fill(record's media bytes, sample)  → sample.media / turns / attributes
//
// What a source owns: its records (core/record_store.h: parsed, or built on request),
// the order shape the epoch order needs (records per shard or row group, the shuffle
// window), the storage its reads go through (a block cache, a row-group cache), the
// fields it declares, and how a sample's values are put in place. So nothing above it
// knows which format it reads, and Sample has one form for all of them.
//
// Threads: Open runs on the caller's thread; afterwards every method is const and safe
// from any thread. A Source outlives every engine that runs over it (they share it).
//
// A new format: a `source_<kind>.{h,cc}` pair with a class deriving from Source (or
// RecordSource), its Open and its keys' rules, and one entry in the table of kinds
// (source_kinds.{h,cc}; formats/README.md has a worked example). The source conformance battery (source_conformance_test.cc) then
// checks it against the manifest form of the same data.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/record_store.h"
#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/formats/order_shape.h"
#include "headrace/formats/source_spec.h"
#include "headrace/io/storage.h"

namespace headrace {

class BlockCache;
class ParquetRowGroupCache;
struct MaterializedInfo;


// A shard or file that a source skipped whole at open: its index or footer is damaged
// or does not fit the file (a tar index that is not JSON, of an unknown version, whose
// size or entries do not fit the shard; a Parquet footer, row count or page offset that
// does not fit the file). It holds no records; the run counts it once as one error of
// kind shard_error (StatusCode::kShardError), named "shard N" of the source's list and
// its URI, with the first batch it delivers (exec/delivery.h).
struct BadShard {
  int64_t shard = 0;  // its position in the source's list of shards or files
  std::string uri;
  Status status;  // kShardError: why, naming the index or footer field
};

// What a source is and holds, for the run report.
struct SourceInfo {
  // "manifest PATH", "shards PATTERN (N shards, ...)", "parquet ...", "materialized ...".
  std::string description;
  std::string path;         // the spec's source path or pattern
  int64_t bad_records = 0;  // records whose status is not ok
  std::vector<BadShard> bad_shards;  // skipped whole, in the source's order
  // The source's index on this process's heap (parsed records, line offsets, shard
  // tables), held for the whole run outside memory.budget_bytes; and the bytes of a
  // file it maps read-only (the page cache: shared, reclaimable).
  int64_t heap_bytes = 0;
  int64_t mapped_bytes = 0;
  // Bytes of memory.budget_bytes the source's cache takes (the block or row-group
  // cache); 0 for none.
  int64_t cache_bytes = 0;
  // A blend (source.mix): its entries' names, in order (Source::EntryOf); empty for any
  // other source.
  std::vector<std::string> entries;
};

// How a source's media reads meet the run's I/O budget (execution.io_budget_bytes, which
// the read stage holds: exec/read_stage.h). A kind's policy is in the table of kinds
// (source_kinds.h).
enum class ReadPolicy {
  // Every read is held to the budget: one that needs more than the whole budget fails
  // its sample (a manifest's file, a shard's member or block, a materialized row).
  kHeldToIoBudget,
  // A read may pass the budget alone: it is fetched whole into the source's own cache,
  // whose limit (source.cache_bytes, part of memory.budget_bytes) bounds it instead (a
  // Parquet row group). Such reads are never split into ranges.
  kBoundedByCache,
};

// What opening a source may depend on beyond its SourceSpec (the pipeline's keys).
struct SourceOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  std::optional<int64_t> epochs;  // nullopt: unbounded
  // The samples a run has in flight at most (prefetch.depth × batch.size), for a cache
  // that must hold what they span.
  int64_t samples_in_flight = 0;
  int64_t memory_budget_bytes = 0;
  // errors.on_bad_shard: false (skip) opens a source without its unreadable shards or
  // files (SourceInfo::bad_shards); true fails the open with the first one's error.
  bool fail_on_bad_shard = false;
};

class Source {
 public:
  virtual ~Source() = default;
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  // The records epoch `epoch` reads: the same store for every epoch, except for a source
  // that holds a copy of the dataset per epoch (a materialization of random ops). Every
  // epoch's store has size() records.
  virtual const RecordStore& records(int64_t epoch) const = 0;
  // Puts the values of `sample` (epoch, index and record set) in place, from its
  // record and `media`: the bytes of record->media, one per item, in order (empty when
  // the run reads no media). A status that is not ok is the sample's error. The default
  // (FillFromRecord) serves a source whose records hold every value.
  virtual Status Fill(std::vector<Buffer> media, Sample& sample) const;
  // Whether a run of `epochs` epochs (nullopt: unbounded) that starts at epoch
  // `start_epoch` can be served (a source with a copy per epoch holds every epoch the
  // run reads); kInvalidArgument naming the key otherwise.
  virtual Status CheckRun(int64_t start_epoch, std::optional<int64_t> epochs) const;

  int64_t size() const { return records(0).size(); }
  const OrderShape& order() const { return order_; }
  // Where reads go: the storage given to Open, or the source's cache in front of it.
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // The fields as the planner sees them: the spec's, or what the source resolved (a
  // Parquet file's columns).
  const SourceSpec& spec() const { return spec_; }
  // Whether the source's values need the media reads even when no op reads a media
  // field (a shard's conversation member, a Parquet row group).
  bool values_need_reads() const { return values_need_reads_; }
  const SourceInfo& info() const { return info_; }
  // How its reads meet the I/O budget: its kind's (source_kinds.h); a blend's is the
  // loosest of its entries' (one read stage serves them all).
  ReadPolicy read_policy() const { return read_policy_; }
  // A source whose samples are finished batch rows (a materialization): their layout,
  // which replaces the pipeline's chain; null for every other source.
  virtual const MaterializedInfo* materialized() const { return nullptr; }
  // The source's caches, for the run report; null when it has none. (What a cache means
  // for the run is read_policy(), not whether there is one.)
  virtual const BlockCache* block_cache() const { return nullptr; }
  // A blend: the entry (index into info().entries) that dataset index `index` belongs
  // to, and the storage its reads go through; 0 and null (storage()) for any other.
  virtual int EntryOf(int64_t /*index*/) const { return 0; }
  virtual Storage* StorageFor(int64_t /*index*/) const { return nullptr; }
  virtual const ParquetRowGroupCache* row_group_cache() const { return nullptr; }

 protected:
  // The read policy is the kind's that `spec` names (SourceKindOf).
  Source(SourceSpec spec, std::shared_ptr<Storage> storage);

  SourceSpec spec_;
  std::shared_ptr<Storage> storage_;
  OrderShape order_;
  SourceInfo info_;
  bool values_need_reads_ = false;
  ReadPolicy read_policy_ = ReadPolicy::kHeldToIoBudget;
};

// The default Fill: media items from the record's MediaRefs (field, uri) with `media`'s
// bytes; turns and attributes viewed in the record.
void FillFromRecord(std::vector<Buffer> media, Sample& sample);

// A source over record stores it is given: one for every epoch, or one per epoch (each
// of the same size). What a parsed or line-kept manifest is, and what tests build.
class RecordSource : public Source {
 public:
  RecordSource(SourceSpec spec, std::shared_ptr<Storage> storage,
               std::vector<std::shared_ptr<const RecordStore>> epochs);
  const RecordStore& records(int64_t epoch) const override;
  Status CheckRun(int64_t start_epoch, std::optional<int64_t> epochs) const override;

  // For Open functions and tests: the parts a kind sets after construction.
  OrderShape& mutable_order() { return order_; }
  SourceInfo& mutable_info() { return info_; }
  void set_values_need_reads(bool v) { values_need_reads_ = v; }

 private:
  std::vector<std::shared_ptr<const RecordStore>> epochs_;
};

// A source over `records` (one store for every epoch) read through `storage`: for tests
// and tools that build records themselves.
std::shared_ptr<RecordSource> MakeRecordSource(std::shared_ptr<const RecordStore> records,
                                               std::shared_ptr<Storage> storage,
                                               SourceSpec spec = {});

// Opens the source `spec` names (SourceKindOf: a blend, or exactly one of the single
// kinds' keys; source_kinds.h). `storage` is the base storage (local, s3://, http(s)://).
Result<std::shared_ptr<const Source>> OpenSource(const SourceSpec& spec,
                                                 const SourceOptions& options,
                                                 std::shared_ptr<Storage> storage);

}  // namespace headrace
