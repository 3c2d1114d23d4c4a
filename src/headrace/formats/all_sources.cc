// The source kinds, in one list: OpenSource picks the one the spec names. A new kind is
// its source_<kind>.{h,cc} and two lines here (its include and its entry).
#include "headrace/formats/source.h"
#include "headrace/formats/source_manifest.h"
#include "headrace/formats/source_materialized.h"
#include "headrace/formats/source_mix.h"
#include "headrace/formats/source_parquet.h"
#include "headrace/formats/source_shards.h"

namespace headrace {
namespace {

using OpenFn = Result<std::shared_ptr<const Source>> (*)(const SourceSpec&, const SourceOptions&,
                                                         std::shared_ptr<Storage>);
struct SourceKind {
  std::string SourceSpec::*path;  // the key that selects the kind when set
  OpenFn open;
};

// Config validation (pipeline/config_validate.cc) makes exactly one of these keys set; the
// manifest is the kind of a spec that sets none of the others.
constexpr SourceKind kSourceKinds[] = {
    {&SourceSpec::materialized, OpenMaterializedSource},
    {&SourceSpec::parquet, OpenParquetSource},
    {&SourceSpec::shards, OpenShardSource},
    {&SourceSpec::manifest, OpenManifestSource},
};

}  // namespace

Result<std::shared_ptr<const Source>> OpenSource(const SourceSpec& spec,
                                                 const SourceOptions& options,
                                                 std::shared_ptr<Storage> storage) {
  // A blend is a source made of sources: each entry opened through this function.
  if (!spec.mix.empty()) return OpenMixSource(spec, options, std::move(storage));
  for (const SourceKind& kind : kSourceKinds) {
    if (!(spec.*kind.path).empty()) return kind.open(spec, options, std::move(storage));
  }
  // None set: the last kind's loader names what is missing.
  return std::end(kSourceKinds)[-1].open(spec, options, std::move(storage));
}

}  // namespace headrace
