// SourceSpec: where a dataset's manifest is and how to read its records.
#pragma once

#include <string>
#include <vector>

#include "headrace/core/sample.h"

namespace headrace {

// A JSONL manifest in the LLaVA / chat-VQA form:
//   {"id": "...", "image": "images/000123.jpg",
//    "conversations": [{"from": "human", "value": "<image>\n..."},
//                      {"from": "gpt", "value": "..."}]}
// Media paths are relative to `root` (by default the manifest's folder).
struct SourceSpec {
  std::string manifest;  // required: path of the JSONL file
  std::string root;      // dataset root for media paths; empty = the manifest's folder
  std::string id_field = "id";
  std::string image_field = "image";
  std::string conversations_field = "conversations";
  std::string role_field = "from";
  std::string text_field = "value";
  // Absolute media paths are rejected unless allowed (and must then still be inside root).
  bool allow_absolute_paths = false;

  // WebDataset tar shards instead of a manifest (exactly one of the two is set): a local
  // path or a storage URI with brace ranges ("s3://b/train/shard-{000000..000999}.tar")
  // and, for local paths, globs. See formats/shard_source.h.
  std::string shards;
  // Which tar members feed which field (ParseShardFields in formats/shard_source.h). The
  // default gives the manifest's two fields (SourceFieldsOf); more, e.g. "text?=txt", are
  // read as media items the ops do not know yet.
  std::string shard_fields = "image?=jpg,jpeg,png,webp conversation=json";
  // Consecutive shards (in the epoch's seeded shard order) whose samples are shuffled
  // together. Memory vs randomness: the block cache holds about this many shards (see
  // cache_bytes), and a sample only mixes with samples of its window.
  int64_t shuffle_window = 2;
  // Shards are read in aligned blocks of this many bytes, each shared by every member in
  // it (io/block_cache.h): one request per block, not per member.
  int64_t block_bytes = int64_t{16} << 20;
  // The block cache's bytes, part of memory.budget_bytes; 0: automatic, enough for the
  // window: (shuffle_window + 1) × the largest shard, or four blocks when shuffle is
  // off; never more than all the shards' bytes.
  int64_t cache_bytes = 0;
};

// The fields of the records a manifest source yields, in order: MediaRef::field and the
// planner's source values index this list. Today's manifest has two.
inline constexpr int kImageField = 0;         // media: the `image_field` key
inline constexpr int kConversationField = 1;  // SampleRecord::turns
inline std::vector<SourceField> SourceFieldsOf(const SourceSpec&) {
  return {SourceField{"image", FieldKind::kImage, 0},
          SourceField{"conversation", FieldKind::kConversation, 0}};
}

}  // namespace headrace
