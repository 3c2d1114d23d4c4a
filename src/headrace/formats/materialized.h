// Materialized pipelines: the preprocessed samples `headrace materialize` writes
// (tools/materialize.h) and `source.materialized` reads back, skipping the CPU stages.
//
// Layout under the destination URI (a local folder or s3://bucket/prefix):
//   materialized.json              the description below (MaterializedInfo)
//   config.yaml                    the resolved config that produced it (PipelineSpecToYaml)
//   SET/shard-000000.tar ...       WebDataset tar shards; SET is "." (one copy for every
//                                  epoch) or "epoch-K" (epoch K only). Per sample, key =
//                                  its dataset index (9 digits), in index order:
//                                    <key>.<field>.npy  one per batch field: the sample's
//                                                       row as NumPy .npy (v1.0, C order)
//                                    <key>.json         {"id": "...", "strings": {NAME: [..]}}
//   SET/shard-000000.tar.idx.json  the shard index (tar_shard.h), from the written bytes
//   SET/shard-000000.tar.ids.json  the samples' ids, in shard order (a JSON array)
//
// A sample is a row of every batch field: fields have a fixed per-sample shape (a list
// field is padded to max_items and counted in `<name>_count`), so the rows re-batch into
// exactly the batches of the original run. bf16 has no NumPy dtype: its .npy is '<u2' (the
// same 16 bits); materialized.json names the true dtype.
//
// Reading back: records are placed at their dataset index, so the engine's epoch order
// (the original's shards and shuffle window, kept in materialized.json) gives the same
// batches as the original pipeline for the same seed, shuffle, batch size and epoch. A
// sample the original skipped is a record that fails with the original's status.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/batch.h"
#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/io/storage.h"

namespace headrace {

// The headrace release that writes materialized.json (pyproject.toml's version).
inline constexpr std::string_view kHeadraceVersion = "0.1.0";
// The layout above; a reader refuses any other.
inline constexpr int64_t kMaterializedFormatVersion = 1;
inline constexpr std::string_view kMaterializedFile = "materialized.json";

struct MaterializedInfo {
  struct StringField {
    std::string name;
    bool list = false;  // every row a list (Batch::Strings::list)
  };
  struct Shard {
    std::string name;  // "shard-000000.tar", in its set's folder
    int64_t bytes = 0;
    int64_t samples = 0;
  };
  struct Skipped {  // a sample the original run skipped
    int64_t index = 0;
    Status status;
  };
  // One copy of the dataset: for every epoch, or for one.
  struct Set {
    std::optional<int64_t> epoch;  // nullopt: every epoch
    std::string dir;               // "." or "epoch-K"
    int64_t samples = 0;           // written
    std::vector<Shard> shards;
    std::vector<Skipped> skipped;
  };

  int64_t version = kMaterializedFormatVersion;
  std::string headrace_version = std::string(kHeadraceVersion);
  std::string config = "config.yaml";  // beside materialized.json
  uint64_t seed = 0;
  // The ops that draw randomness ("ops[3].image.flip"); not empty: one set per epoch.
  std::vector<std::string> random_ops;
  int64_t dataset_samples = 0;  // records, bad ones included: the indices 0..N-1
  std::vector<FieldSpec> fields;  // the batch fields, in batch order, without "index"
  std::vector<StringField> strings;  // Batch::strings after "id"
  // The unpadded token sequences among the fields (text.tokenize {pad: false}'s
  // input_ids), with what packing pads them and their labels with and which ids carry
  // vision features: the tokenizer is not there to ask when the rows are read back.
  struct Sequence {
    std::string field;
    int64_t pad_id = 0;
    int64_t ignore_index = -100;
    std::vector<int64_t> vision_token_ids;
  };
  std::vector<Sequence> sequences;
  // The original source's epoch order (EpochOrderOptions): records per shard or row
  // group (empty: none), and the shuffle window.
  std::vector<int64_t> shard_samples;
  int64_t shuffle_window = 1;
  std::vector<Set> sets;

  bool per_epoch() const { return !random_ops.empty(); }
};

std::string MaterializedInfoToJson(const MaterializedInfo& info);
// kBadRecord naming `uri` and the first problem; kInvalidArgument for another format
// version ("written as format 2; this headrace (0.1.0) reads format 1").
Result<MaterializedInfo> ParseMaterializedInfo(std::string_view json, const std::string& uri);

// The .npy header (magic, version 1.0, dict, padding to 64 bytes) of one row of `field`;
// with `rows` >= 0, of `rows` values of it ((rows, ...sample_shape): a sample's part of a
// concatenated field).
std::string NpyHeader(const FieldSpec& field, int64_t rows = -1);
// The row's bytes from a .npy member: kCorruptData unless `npy` is exactly NpyHeader(field)
// followed by field.sample_bytes() bytes.
Result<std::span<const uint8_t>> NpyRow(std::span<const uint8_t> npy, const FieldSpec& field);
// A sample's part of a concatenated field from its .npy member: its values and how many
// (the leading dimension), under the same checks (kCorruptData).
struct NpyRows {
  std::span<const uint8_t> bytes;
  int64_t rows = 0;
};
Result<NpyRows> NpyRowsOf(std::span<const uint8_t> npy, const FieldSpec& field);

// `base` joined with a relative path: "s3://b/p" + "epoch-0/x" -> "s3://b/p/epoch-0/x";
// "." parts are dropped.
std::string JoinUri(std::string_view base, std::string_view path);

// The source read back: materialized.json and every set's shard sidecars.
struct MaterializedIndex {
  std::string uri;
  MaterializedInfo info;
  // Per set (info.sets' order), dataset_samples records at their dataset index: the
  // media are the fields' .npy members in field order, then the .json member.
  std::vector<std::vector<SampleRecord>> records;
};

// kNotFound naming `uri` when it holds no materialized.json; the sidecars' read and parse
// errors name the file. kInvalidArgument naming the field (a configuration error: exit 2)
// when materialized.json declares what its files do not hold: a set folder or shard name
// that leaves the materialization ("..", an absolute path, a URI), counts that do not add
// up (per set: its shards' samples, written + skipped = dataset_samples; the order's
// shard_samples = dataset_samples) or that a shard's index does not hold. Nothing is
// allocated per declared sample before those checks.
Result<MaterializedIndex> LoadMaterializedIndex(Storage& storage, const std::string& uri);

// The materialized source's Fill after FillFromRecord: parses the .json member (the last media item) into the
// sample's string attributes (field = the string's position in info.strings).
Status PrepareMaterializedSample(Sample& sample);

}  // namespace headrace
