// The JSONL manifest source (source.manifest): loose media files named by a manifest's
// lines, the records parsed at open or kept as lines (manifest_lines.h).
#pragma once

#include "headrace/formats/source.h"

namespace headrace {

Result<std::shared_ptr<const Source>> OpenManifestSource(const SourceSpec& spec,
                                                         const SourceOptions& options,
                                                         std::shared_ptr<Storage> storage);

}  // namespace headrace
