// The blend source (source.mix): several sources of any kind (a manifest, tar shards,
// Parquet) read as one dataset, each position of an epoch drawn from an entry by weight.
//
//   source:
//     mix:
//       - {name: vqa, manifest: data/vqa/manifest.jsonl, weight: 0.6}
//       - {name: ocr, shards: "data/ocr/shard-{0000..0009}.tar", weight: 0.3}
//       - {name: text, parquet: data/text/*.parquet, weight: 0.1}
//     until: first_exhausted     # | all_exhausted | samples (with samples: N) | epochized
//
// The blend's dataset is its entries' records one after another: entry s's sample i is
// index first_s + i. Which entry each position of an epoch reads, and which of its
// samples, is exec/blend_order.h's rule (a pure function of seed and epoch; each entry
// keeps its own seeded order, shards and shuffle window included). Every sample carries
// its entry's name as the string field `source` (kMixSourceField), which reaches the
// batch like any string field.
//
// What the entries share: one batch layout. Their resolved fields (names, kinds, list
// sizes) must be the same, so one chain of ops serves them all; an entry whose fields
// differ is a configuration error naming it. An entry's own reads go through its own
// storage (a shard entry's block cache, a Parquet entry's row-group cache): StorageFor.
#pragma once

#include "headrace/formats/source.h"

namespace headrace {

struct SourceKeyContext;

Result<std::shared_ptr<const Source>> OpenMixSource(const SourceSpec& spec,
                                                    const SourceOptions& options,
                                                    std::shared_ptr<Storage> storage);

// The blend's key rules (source_kinds.h): no single kind's key or fields beside the list,
// source.samples with until: samples only, each entry named (uniquely), weighted, of a
// kind that may be an entry, without a field named `source`, and its own keys valid
// (context.check_entry; its messages then name "source.mix[i].<key>"). source.until is
// config validation's (its names are the config schema's).
Status CheckMixKeys(const SourceSpec& spec, const SourceKeyContext& context);

// The folder local media must be beneath: the deepest folder above each entry's media
// root (source_kinds.h), "" when some entry's root is not local or no entry has one.
Result<std::string> MixMediaRoot(const SourceSpec& spec);

}  // namespace headrace
