// WebDataset tar shards: listing a shard's members, grouping them into samples, and the
// shard index (a JSON sidecar) that lets a reader fetch one sample with ranged reads.
//
// Nothing here depends on the engine or on SampleRecord: a sample is a key and named
// fields, each a byte range of the shard. Reading and writing tar is libarchive's job;
// this file only turns its headers into (name, offset, size).
//
// WebDataset rule (https://github.com/webdataset/webdataset): a member's key is its name
// up to the first '.' of the basename (the folder kept), its field the rest after that
// dot: "a/000017.jpg", "a/000017.json", "a/000017.seg.png" are sample "a/000017" with
// fields "jpg", "json", "seg.png". Consecutive members of one key form one sample.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/core/status.h"

struct archive;  // libarchive's handle

namespace headrace {

// One regular file in a tar archive. Its bytes are archive[offset, offset + size).
struct TarMember {
  std::string name;
  int64_t offset = 0;  // of the data (after the ustar and any pax/GNU headers)
  int64_t size = 0;
};

// What ListTarMembers could read. `status` is ok when the whole archive was read;
// otherwise it names what went wrong and where (the member, its header's offset), and
// `members` holds every member read before it.
struct TarListing {
  std::vector<TarMember> members;
  Status status;
  // When `status` is not ok and members were listed: the name of the member the damage is in, when its
  // header still names it (a member whose data is cut short; a header whose checksum
  // fails but whose name field reads), else empty; and its header's offset. The sample
  // that member belongs to is the damaged one, not the sample before it.
  std::string damaged_member;
  int64_t damaged_offset = -1;
};

// Lists the regular file members of an uncompressed tar archive (ustar, pax, GNU) held
// in memory, in archive order. Directories, links and other non-file members are
// skipped. Errors: kUnsupportedFormat for bytes that are not a tar archive (or a
// compressed one, or a sparse member, whose data is not one byte range); kCorruptData
// for a truncated or damaged archive. Never reads outside `bytes`.
TarListing ListTarMembers(std::span<const uint8_t> bytes);

// A field of a sample: its name ("jpg", "seg.png") and byte range in the shard.
struct TarField {
  std::string name;
  int64_t offset = 0;
  int64_t size = 0;
};

struct TarSample {
  std::string key;
  std::vector<TarField> fields;  // in archive order
  // Not ok when this sample is unusable (the shard's other samples still are):
  // kBadRecord for a key that appears again after other keys, a field that appears twice,
  // or a member whose basename has no field ("000017", ".json"); kMissingField for a
  // required field the sample lacks. The message names the key and the member.
  Status status;
};

// The WebDataset key of a member name: up to the first '.' of its basename, the folder
// kept ("a/000017.seg.png" → "a/000017").
std::string TarSampleKey(std::string_view member_name);

// Groups members into samples by the WebDataset rule, in archive order. A key that
// reappears later after other keys yields a second sample with that key, marked bad
// (the first keeps its status). Every sample must have each of `required_fields`.
std::vector<TarSample> GroupSamples(std::span<const TarMember> members,
                                    std::span<const std::string> required_fields = {});

// Writes a tar file deterministically: ustar headers (pax only where ustar cannot hold a
// name), every member a regular file with mode 0644, mtime 0, uid/gid 0 and no user or
// group names, no padding after the end-of-archive blocks. The same Add calls give the
// same bytes. One thread; not copyable.
class TarWriter {
 public:
  // Creates or truncates `path`. kIoError when it cannot be opened.
  static Result<std::unique_ptr<TarWriter>> Open(const std::string& path);
  ~TarWriter();

  // Appends a member. kInvalidArgument for an empty name; kIoError on a write failure.
  Status Add(const std::string& name, std::span<const uint8_t> data);
  // Writes the end-of-archive blocks and closes the file; returns its size in bytes.
  // Required for a valid archive: the destructor of an unclosed writer only frees it.
  Result<int64_t> Close();

  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

 private:
  explicit TarWriter(::archive* a, std::string path) : archive_(a), path_(std::move(path)) {}
  ::archive* archive_;
  std::string path_;
};

// The sidecar index of one shard ("<shard>.idx.json"), written by the shard writer so a
// reader can count samples and fetch one with ranged reads, without reading the tar.
//   {"format": "headrace.shard_index", "version": 1, "shard": "shard-000000.tar",
//    "bytes": 262144000, "samples": [{"key": "000000",
//                                     "fields": {"jpg": [512, 51234], "json": [52224, 310]}}]}
struct ShardIndex {
  struct Sample {
    std::string key;
    std::vector<TarField> fields;
  };
  std::string shard;  // the tar's file name, relative to the index
  int64_t bytes = 0;  // the tar's size
  std::vector<Sample> samples;
};

// The index of a shard of `bytes` bytes from its grouped samples; samples that are not
// ok are left out.
ShardIndex MakeShardIndex(std::string shard, int64_t bytes, std::span<const TarSample> samples);

// Compact JSON, one line.
std::string ShardIndexToJson(const ShardIndex& index);

// Parses and validates an index: kBadRecord naming the first problem (not JSON, a wrong
// format or version, a missing or mistyped member, a field outside [0, bytes)).
// With `shard_bytes` >= 0 (the tar's real size) the index is checked against the shard
// before anything is kept, so that its size bounds what the index may hold: `bytes`
// must equal it, and every field must be where a tar puts a member's data: at a
// 512-byte block, in archive order, each after the end of the previous one and a header
// (so no more than shard_bytes / 512 fields are ever parsed).
Result<ShardIndex> ParseShardIndex(std::string_view json, int64_t shard_bytes = -1);

// The most bytes the index of a shard of `shard_bytes` bytes can need: each member's
// entry (its name, offset and size) is shorter than the 512-byte header that holds its
// name in the tar, so twice the shard plus 64 KiB for the index's own keys; an index
// larger than this is refused before it is read.
int64_t MaxShardIndexBytes(int64_t shard_bytes);

}  // namespace headrace
