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

Result<std::shared_ptr<const Source>> OpenMixSource(const SourceSpec& spec,
                                                    const SourceOptions& options,
                                                    std::shared_ptr<Storage> storage);

}  // namespace headrace
