#include "headrace/formats/source_manifest.h"

#include "headrace/formats/manifest_lines.h"

namespace headrace {

Result<std::shared_ptr<const Source>> OpenManifestSource(const SourceSpec& spec,
                                                         const SourceOptions& /*options*/,
                                                         std::shared_ptr<Storage> storage) {
  HR_ASSIGN_OR_RETURN(ManifestRecords manifest, LoadManifestRecords(*storage, spec));
  const bool lines = manifest.manifest->records.empty();
  auto source = std::make_shared<RecordSource>(
      spec, std::move(storage), std::vector<std::shared_ptr<const RecordStore>>{manifest.records});
  SourceInfo& info = source->mutable_info();
  info.description = "manifest " + spec.manifest + (lines ? " (kept as lines)" : "");
  info.path = spec.manifest;
  info.bad_records = manifest.manifest->bad_lines;
  info.heap_bytes = manifest.heap_bytes;
  info.mapped_bytes = manifest.mapped_bytes;
  return std::shared_ptr<const Source>(std::move(source));
}

}  // namespace headrace
