// The shard source: WebDataset tar shards (`source.shards`) turned into SampleRecords.
//
//   "s3://b/train/shard-{000..099}.tar"  ──ExpandShardPattern──▶ shard URIs, in order
//        │ per shard: <shard>.idx.json (ParseShardIndex), read concurrently;
//        │ without one: the tar itself, scanned (ListTarMembers + GroupSamples)
//        ▼
//   records: shards in pattern order, samples in shard order; record i has dataset
//   index i, id = the sample's key, location = "<shard URI>#<key>", one MediaRef per
//   field with the member's byte range in the shard (read through io/block_cache.h)
//
// Fields come from member extensions: `source.fields` when given (ShardFieldsOf: a
// field's key is its comma-separated extension list, default its name), else the
// shorthand `source.shard_fields` (ParseShardFields), whose list always starts with
// `image` (0) and `conversation` (1), the positions the manifest source gives them.
// Giving both is a configuration error. Every member a field takes is a media item of
// the record: the conversation's .json member is fetched with the sample and parsed on
// the CPU thread (PrepareShardSample, run by the source's Fill) with the manifest's
// conversation keys (conversations_field, role_field, text_field); members of text,
// string, int and float fields (a WebDataset `.cls` label, a `.txt` caption) are read
// there too, as their UTF-8 text, into the sample's attributes.
//
// Lists: a field with max_items N takes the members whose extension is `<n>.<ext>` for
// a decimal n and an `<ext>` of the field's (WebDataset keys end at the first dot, so
// 000017.0.jpg and 000017.1.jpg are items 0 and 1 of key 000017), as its items in n
// order (gaps allowed); none is an empty list.
//
// Errors. Load-time (the run does not start): a pattern with a bad brace range, a glob
// under s3:// or http(s):// (no listing there: use a brace range), a pattern that matches
// nothing, a shard whose tar does not exist (kNotFound naming it), every shard
// unreadable. A shard skipped whole (ShardSet::bad_shards, no records; source.h
// BadShard): an index that does not parse, of another format or version, larger than its
// shard can need (MaxShardIndexBytes: refused before it is read), or that does not fit
// the tar (ParseShardIndex with the tar's size: its `bytes`, its fields' blocks and
// order); a tar that cannot be read, or that is not a tar at all. Per sample (the record keeps its index and fails when an epoch reaches
// it, named "<shard>#<key>"): a key that reappears after other keys, a field twice, a
// member with no key or field, a missing required field (".jpg with no .json"), two
// members of one single-item field, two members for one item of a list, more items than
// max_items ("field 'views' has 5 items, more than its max_items 4"), a text or scalar
// member that does not parse (at prepare time); in a scanned shard whose tail is damaged
// or truncated the samples before the damage are kept, and the sample the damaged member
// belongs to is marked bad: the last one listed when the member is its (its members may
// be incomplete), else a record of its own named by the member's key (or "(damaged at
// offset N)"); the complete samples before it stay good. At run time a member that runs past a shard truncated after its index was
// written is kCorruptData.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/formats/shard_records.h"
#include "headrace/formats/source.h"
#include "headrace/formats/source_spec.h"
#include "headrace/formats/tar_shard.h"
#include "headrace/io/storage.h"

namespace headrace {

// Which members feed which field. `source.shard_fields` is a space-separated list of
// `NAME[?]=EXT[,EXT...]`: NAME is a field (its kind: image, video, audio, pointcloud,
// bytes, text or conversation by that name, else bytes), '?' makes it optional, EXTs
// are member extensions as GroupSamples names them ("jpg", "seg.png"; case-sensitive).
// Default (SourceSpec::shard_fields): "image?=jpg,jpeg,png,webp conversation=json", the
// manifest's two LLaVA fields. Each entry is one `source.fields` entry (name, kind,
// key, max_items, required) with key = the extension list, required = no '?' and no
// list; ShardFieldsOf reads `source.fields` itself when given.
struct ShardFieldMap {
  std::vector<SourceField> fields;                 // the source's fields, in order
  std::vector<std::vector<std::string>> extensions;  // per field
  std::vector<bool> required;                      // per field
  int conversation = -1;                           // the conversation field, or -1
  // The single-item field a member extension feeds, or -1.
  int FieldOf(std::string_view extension) const;
  // The field and item a member extension feeds: a single-item field's exact extension
  // (item -1), else `<n>.<ext>` of a list field (item n); field -1 for none.
  struct Item {
    int field = -1;
    int64_t item = -1;
  };
  Item ItemOf(std::string_view extension) const;
};
Result<ShardFieldMap> ParseShardFields(std::string_view text);

// The fields of a shard source: from spec.fields when given (kInvalidArgument, naming
// both keys, when spec.shard_fields is not its default too; an empty extension, or one
// that feeds two single fields or two list fields), else ParseShardFields.
Result<ShardFieldMap> ShardFieldsOf(const SourceSpec& spec);

// Brace ranges ("{000..099}": zero-padded to the first bound's width) and lists
// ("{a,b}") expand everywhere, left to right, in order; then '*', '?' and '[...]' globs
// match local files (sorted). Groups do not nest. kInvalidArgument for a malformed range,
// a nested group, a glob in a URI, or more than 10 million names (counted as the product
// of the groups' sizes before any name is made).
Result<std::vector<std::string>> ExpandShardPattern(std::string_view pattern);

struct ShardSet {
  std::vector<std::string> shards;    // URIs, in dataset order
  std::vector<int64_t> shard_samples;  // records per shard (bad ones included)
  std::vector<int64_t> shard_bytes;    // each tar's size
  std::vector<SampleRecord> records;
  std::vector<SourceField> fields;
  ShardFieldMap map;           // what PrepareShardSample reads the members with
  int64_t bad_samples = 0;     // records whose status is not ok
  // Shards skipped whole (0 records each; source.h): an index that does not parse, is
  // larger than its shard can need, or does not fit the shard (ParseShardIndex with the
  // tar's size); a tar that cannot be read or is not a tar at all.
  std::vector<BadShard> bad_shards;
  int64_t indexed_shards = 0;  // read from a sidecar index
  int64_t scanned_shards = 0;  // read whole and listed
};

// Runs `start(i, done)` for every i in [0, n), at most `window` at a time, and returns
// what each read delivered; `start` issues one asynchronous read that calls `done`. For
// the reads a source makes when it opens (indexes, sizes, footers).
std::vector<Result<Buffer>> ReadConcurrently(
    size_t n, size_t window, const std::function<void(size_t, ReadCallback)>& start);

// Loads spec.shards (see the header comment). Index reads run concurrently. With
// `compact`, each shard's records go there as soon as they are made (formats/
// shard_records.h: ~70 bytes a sample instead of ~400) and `records` stays empty.
Result<ShardSet> LoadShardSet(Storage& storage, const SourceSpec& spec,
                                    ShardRecords* compact = nullptr);

// The records of one shard from its members' grouping, for LoadShardSet and tests.
void AppendShardRecords(const std::string& shard_uri, std::span<const TarSample> samples,
                        const ShardFieldMap& map, ShardSet& out);

// Parses a conversation member (a JSON object with spec.conversations_field, as in a
// manifest line) into turns.
Result<std::vector<Turn>> ParseConversationJson(std::span<const uint8_t> json,
                                                const SourceSpec& spec);

// The shard source's Fill after FillFromRecord (source_shards.cc): parses the
// conversation field's bytes into sample.turns, and the members of text, string, int and
// float fields into sample.attributes (one per item in list order; both owned by
// sample.parsed);
// kBadRecord naming the field for a member that does not parse. A sample without a
// conversation member gets no turns.
Status PrepareShardSample(Sample& sample, const SourceSpec& spec, const ShardFieldMap& map);

// The bytes the source's records hold, for the run report (as ManifestMemoryBytes).
size_t ShardSetMemoryBytes(const ShardSet& source);

// What `records` hold on the heap beyond the vector itself (ids, locations, media refs
// and their URIs, error messages), estimated from the containers' capacities; shared by
// the sources whose records name byte ranges of larger files (shards, Parquet).
size_t RecordsHeapBytes(const std::vector<SampleRecord>& records);
size_t RecordHeapBytes(const SampleRecord& record);  // one of them

}  // namespace headrace
