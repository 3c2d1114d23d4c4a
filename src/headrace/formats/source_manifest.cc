#include "headrace/formats/source_manifest.h"

#include "headrace/formats/manifest_lines.h"
#include "headrace/formats/source_kinds.h"
#include "headrace/ops/schema.h"

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

Status CheckManifestKeys(const SourceSpec& spec, const SourceKeyContext& /*context*/) {
  std::vector<std::string> others;
  for (const SourceKind& kind : SourceKinds()) {
    if (!kind.blend && kind.open != OpenManifestSource) {
      others.push_back("source." + std::string(kind.key));
    }
  }
  std::string names;
  for (size_t i = 0; i < others.size(); ++i) {
    names += (i == 0 ? "" : i + 1 == others.size() ? " or " : ", ") + others[i];
  }
  return schema::NonEmpty("source.manifest", spec.manifest,
                          "the JSONL manifest path (or set " + names + ")");
}

Status CheckManifestKeysUnused(const SourceSpec& spec) {
  if (spec.records == ManifestRecordsForm::kAuto) return Status::Ok();
  return schema::Invalid("source.records",
                         "applies to a JSONL manifest (source.manifest) only; shards, Parquet "
                         "and materializations keep their own index");
}

}  // namespace headrace
