// `headrace shard`: packs a JSONL manifest's samples into WebDataset tar shards.
//
// Layout of `out_dir` after a successful run:
//   shard-000000.tar ...       in manifest order; each good record is two members:
//                              <key>.<media ext> (e.g. .jpg, the media's bytes) and
//                              <key>.json (the record's manifest line as written), key =
//                              the record's index (Manifest::records) as 9 digits,
//                              "000000017". A text-only record has only <key>.json.
//                              With `media` (several media keys: an image, a video and
//                              an audio clip per sample), one member per item:
//                              <key>.<ext> for a single item, <key>.<n>.<ext> for item n
//                              of a list (the names a shard source's `fields` read).
//   shard-000000.tar.idx.json  the shard's index (formats/tar_shard.h: ShardIndex)
//   shards.json                {"format": "headrace.shards", "version": 1,
//                               "samples": N, "skipped": S, "shards": [{"shard":
//                               "shard-000000.tar", "index": "shard-000000.tar.idx.json",
//                               "bytes": B, "first_sample": 0, "samples": n}, ...]}
//                              first_sample numbers samples globally across shards.
//
// A shard is closed before the sample that would take it past target_bytes (a shard holds
// at least one sample, so one larger than the target gets a shard of its own). Bad
// manifest records are skipped and counted; a media file that cannot be read fails the
// run. The output is a pure function of the manifest and the media bytes: tar members have
// mtime 0, uid/gid 0, mode 0644. Every shard is read back and indexed from its own bytes.
// Files of an earlier run with more shards are not removed; shards.json lists this run's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/status.h"

namespace headrace {

struct ShardOptions {
  std::string manifest;  // JSONL, as `make-sample` writes it; media relative to its folder
  std::string out_dir;   // created if missing
  int64_t target_bytes = 256LL << 20;
  // The manifest keys whose paths become members, each "KEY" (a path) or "KEY:N" (a list
  // of up to N paths). Empty: the LLaVA record's one image ("image"). Two items of a
  // record that would get the same member name (two .jpg keys) fail the run, naming both.
  std::vector<std::string> media;
};

struct ShardStats {
  int64_t samples = 0;  // written
  int64_t shards = 0;
  int64_t bytes = 0;                 // total tar bytes
  std::vector<std::string> skipped;  // one message per bad manifest record
};

// kInvalidArgument for bad options; the manifest's or a media file's read error; kIoError
// when an output cannot be written; kInternal when a written shard does not read back as
// the samples written.
Result<ShardStats> WriteShards(const ShardOptions& options);

// Tar bytes of one member of `size` bytes: its ustar header and its data padded to
// 512-byte blocks.
int64_t TarMemberBytes(int64_t size);
// Writes `text` to `path`, truncating it; kIoError naming the path when it cannot.
Status WriteFileText(const std::string& path, std::string_view text);
// "shard-000003.tar": the name of shard n.
std::string ShardName(int64_t n);
// "000000017": a sample's key, its index as 9 digits.
std::string SampleKey(int64_t index);
// Reads the closed shard `dir`/`name` back, checks it holds `samples` samples, each with
// a .json member, and writes its index beside it (`name`.idx.json, formats/tar_shard.h).
// kInternal when it does not read back as written; kIoError when the index cannot be
// written.
Status IndexShard(const std::string& dir, const std::string& name, int64_t samples);

}  // namespace headrace
