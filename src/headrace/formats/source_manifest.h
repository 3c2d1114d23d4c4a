// The JSONL manifest source (source.manifest): loose media files named by a manifest's
// lines, the records parsed at open or kept as lines (manifest_lines.h).
#pragma once

#include "headrace/formats/source.h"

namespace headrace {

struct SourceKeyContext;

Result<std::shared_ptr<const Source>> OpenManifestSource(const SourceSpec& spec,
                                                         const SourceOptions& options,
                                                         std::shared_ptr<Storage> storage);

// The manifest's key rule (source_kinds.h): source.manifest set. The manifest is the kind
// of a spec that sets no key, so its message names the other kinds' keys.
Status CheckManifestKeys(const SourceSpec& spec, const SourceKeyContext& context);

// source.records in a spec of another kind: it applies to a manifest only.
Status CheckManifestKeysUnused(const SourceSpec& spec);

}  // namespace headrace
