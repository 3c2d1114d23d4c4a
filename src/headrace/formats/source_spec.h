// SourceSpec: where a dataset's manifest is and how to read its records.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/sample.h"
#include "headrace/formats/order_shape.h"

namespace headrace {

// One entry of `source.fields`: a named field of the records, its kind, and the manifest
// key that feeds it (for Parquet the column; for tar shards the comma-separated member
// extensions, a list's items being the members `KEY.<n>.<ext>`).
//   fields:
//     - {name: image, kind: image}                       # "image": "a.jpg"
//     - {name: views, kind: image, key: images, max_items: 4}  # "images": ["a.jpg", ...]
//     - {name: label, kind: int}                         # "label": 3
//     - {name: caption, kind: text}                      # "caption": "a cat"
//     - {name: conversation, kind: conversation, key: conversations}
// Media kinds (image, video, audio, pointcloud, bytes) hold paths, resolved against the
// root and read before the chain runs; conversation holds chat turns; text and string
// hold strings; int and float numbers. A field may be absent from a record (or null)
// unless `required`; a list field (max_items > 0) holds a JSON array of up to max_items.
// Scalars (int, float) pass through to the batch as tensors ([B], or [B, max_items] plus
// `<name>_count`); text and string fields as a list of strings per batch.
struct SourceFieldSpec {
  std::string name;          // required: the value's name in the chain and the batch
  FieldKind kind = FieldKind::kImage;
  // The manifest's JSON key; empty: `name`. Several, comma-separated ("images,image"):
  // whichever of them a record holds (a record holding two is its bad_record), as a
  // shard field's extensions are; LLaVA data writes "image" for one and "images" for a
  // list. For Parquet the column's name.
  std::string key;
  int max_items = 0;         // 0: one value; N > 0: a list of up to N
  bool required = false;     // a record without it is a per-sample error (kMissingField)
  // A media list's fixed-shape batch fields padded to max_items per sample ([N, ...],
  // zeros past the sample's items) instead of its items concatenated over the batch
  // (FieldLayout::kItems; `<list>_count` says whose they are). Ragged item fields are
  // concatenated either way.
  bool pad_items = false;
};

// A JSONL manifest in the LLaVA / chat-VQA form:
//   {"id": "...", "image": "images/000123.jpg",
//    "conversations": [{"from": "human", "value": "<image>\n..."},
//                      {"from": "gpt", "value": "..."}]}
// Media paths are relative to `root` (by default the manifest's folder).
// How a JSONL manifest's records are kept (formats/manifest_lines.h).
enum class ManifestRecordsForm {
  kAuto,    // "auto": as lines when the manifest is kLinesAutoBytes (64 MiB) or more
  kParsed,  // "parsed": every line parsed at load (~2x the JSONL, in each process)
  kLines,   // "lines": the file mapped (or read) plus 4 bytes a record; parsed per sample
};

// Which samples a shuffled epoch of tar shards mixes (source.shuffle_scope).
enum class ShuffleScope {
  // "window": a seeded order of the shards, the samples of each source.shuffle_window
  // consecutive shards shuffled together, read in large blocks (one request per block).
  kWindow,
  // "global": one permutation of every sample, as a manifest's; each sample's members
  // read by one ranged request of their own (io/block_cache.h, SetObjectBlocks).
  kGlobal,
};

struct MixEntrySpec;

struct SourceSpec {
  // A weighted blend of sources instead of one (formats/source_mix.h): each entry is a
  // source of any kind with a name and a weight; `until` says when an epoch ends
  // (exec/blend_order.h). The other keys of this spec are then unused: each entry
  // carries its own.
  std::vector<MixEntrySpec> mix;
  BlendUntil until = BlendUntil::kFirstExhausted;
  int64_t samples = 0;  // until: samples: positions an epoch

  std::string manifest;  // required: path of the JSONL file
  std::string root;      // dataset root for media paths; empty = the manifest's folder
  std::string id_field = "id";
  // The record's fields. Empty: the LLaVA form below, i.e. an optional image (key
  // `image_field`) and a required conversation (key `conversations_field`). When given,
  // image_field and conversations_field are not used (give the keys here instead);
  // role_field and text_field still name the keys inside a conversation's turns.
  std::vector<SourceFieldSpec> fields;
  std::string image_field = "image";
  std::string conversations_field = "conversations";
  std::string role_field = "from";
  std::string text_field = "value";
  // How the manifest's records are held: parsed at load, or kept as lines and parsed
  // when a sample reaches them (memory that does not grow with the parsed dataset).
  ManifestRecordsForm records = ManifestRecordsForm::kAuto;
  // Absolute media paths are rejected unless allowed (and must then still be inside root).
  bool allow_absolute_paths = false;

  // WebDataset tar shards instead of a manifest (exactly one of the two is set): a local
  // path or a storage URI with brace ranges ("s3://b/train/shard-{000000..000999}.tar")
  // and, for local paths, globs. See formats/shard_set.h.
  std::string shards;
  // Parquet files instead of a manifest (formats/parquet_file_set.h): a local path or a
  // storage URI with brace ranges and, for local paths, globs, as `shards`. Row groups are
  // the groups of the shuffle (shuffle_window); `fields` maps columns (a field's key is
  // its column) or, when empty, the defaults of parquet_file_set.h; cache_bytes sizes the
  // decoded row-group cache.
  std::string parquet;
  // A materialization instead of a manifest (formats/materialized.h): the folder or URI
  // `headrace materialize --to` wrote. Its samples are preprocessed already, so the
  // pipeline's ops must be empty; seed, shuffle, batch and epochs still apply.
  std::string materialized;
  // Which tar members feed which field (ParseShardFields in formats/shard_set.h): the
  // shorthand of `fields` for shards, exclusive with it (giving both is a configuration
  // error). The default gives the manifest's two fields (SourceFieldsOf); more, e.g.
  // "text?=txt", are read with the sample but not collated into the batch (declare them
  // in `fields` for that).
  std::string shard_fields = "image?=jpg,jpeg,png,webp conversation=json";
  // Consecutive shards (in the epoch's seeded shard order) whose samples are shuffled
  // together. Memory vs randomness: the block cache holds about this many shards (see
  // cache_bytes), and a sample only mixes with samples of its window.
  int64_t shuffle_window = 2;
  // source.shards only: what a shuffled epoch mixes (ShuffleScope). Global costs about
  // one request per sample instead of one per block, and a cache of a few samples'
  // bytes instead of the window's shards.
  ShuffleScope shuffle_scope = ShuffleScope::kWindow;
  // Shards are read in aligned blocks of this many bytes, each shared by every member in
  // it (io/block_cache.h): one request per block, not per member.
  int64_t block_bytes = int64_t{16} << 20;
  // The block cache's bytes, part of memory.budget_bytes; 0: automatic, enough for the
  // window: (shuffle_window + 1) × the largest shard, or four blocks when shuffle is
  // off; never more than all the shards' bytes.
  int64_t cache_bytes = 0;
};

// One entry of source.mix: a source (any kind but another mix or a materialization),
// named, weighted.
//   source:
//     mix:
//       - {name: vqa, manifest: data/vqa/manifest.jsonl, weight: 0.6}
//       - {name: ocr, shards: "s3://b/ocr-{0000..0099}.tar", weight: 0.3}
//       - {name: text, parquet: data/text/*.parquet, weight: 0.1}
//     until: first_exhausted
struct MixEntrySpec {
  std::string name;  // required, unique: the batch's `source` strings, the report's rows
  double weight = 1;  // > 0: the entry's share of an epoch's positions (normalized)
  double repeat = 1;  // until: epochized: reads of each of its samples an epoch
  // errors.max_error_rate for this entry's samples alone (nullopt: only the run's).
  std::optional<double> max_error_rate;
  SourceSpec source;  // the entry's own source keys (manifest, shards, fields, ...)
};

// The fields of the records a manifest source yields, in order: MediaRef::field,
// Attribute::field and the planner's source values index this list. Without
// `spec.fields`: an image (kImageField) and a conversation (kConversationField).
inline constexpr int kImageField = 0;
inline constexpr int kConversationField = 1;
std::vector<SourceField> SourceFieldsOf(const SourceSpec& spec);

// A blend's field naming each sample's entry (MixEntrySpec::name): a string, in the batch.
inline constexpr std::string_view kMixSourceField = "source";

// A manifest field's JSON keys: `key` split at commas (SourceFieldSpec::key), in order.
std::vector<std::string> ManifestKeysOf(const SourceFieldSpec& field);

// The spec's fields with every default filled in (the two LLaVA fields when
// spec.fields is empty; key = name where empty).
std::vector<SourceFieldSpec> ResolvedFields(const SourceSpec& spec);

}  // namespace headrace
