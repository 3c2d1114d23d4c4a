// The materialized source (source.materialized): what `headrace materialize` wrote, its
// samples finished batch rows (one copy for every epoch, or one per epoch when the
// pipeline drew randomness), read back without the CPU stages.
#pragma once

#include "headrace/formats/materialized.h"
#include "headrace/formats/source.h"

namespace headrace {

struct SourceKeyContext;

// Refuses, naming the key, a configuration that does not match what was materialized
// (another seed; unbounded epochs for a per-epoch materialization).
Result<std::shared_ptr<const Source>> OpenMaterializedSource(const SourceSpec& spec,
                                                             const SourceOptions& options,
                                                             std::shared_ptr<Storage> storage);

// The materialization's key rule (source_kinds.h): source.fields empty, as it declares
// its own. (That the pipeline's ops are empty is config validation's, from the table's
// `preprocessed`.)
Status CheckMaterializedKeys(const SourceSpec& spec, const SourceKeyContext& context);

}  // namespace headrace
