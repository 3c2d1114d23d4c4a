// The table of source kinds (source_kinds.h), and OpenSource, which reads it.
#include "headrace/formats/source_kinds.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "headrace/formats/manifest.h"
#include "headrace/formats/source_manifest.h"
#include "headrace/formats/source_materialized.h"
#include "headrace/formats/source_mix.h"
#include "headrace/formats/source_parquet.h"
#include "headrace/formats/source_shards.h"
#include "headrace/ops/schema.h"

namespace headrace {
namespace {

// One row per kind. The blend is first (its list outranks any key beside it, which its
// own rules refuse); the manifest is the first single kind, the one a spec that sets no
// key opens.
constexpr SourceKind kSourceKinds[] = {
    {.key = "mix",
     .selected = [](const SourceSpec& s) { return !s.mix.empty(); },
     .open = OpenMixSource,
     .check_keys = CheckMixKeys,
     .check_keys_unused = nullptr,
     .media_root = MixMediaRoot,
     .read_policy = ReadPolicy::kHeldToIoBudget,  // unless an entry's is looser (MixSource)
     .blend = true,
     .not_a_blend_entry = "a mix entry cannot be a mix itself",
     .preprocessed = false},
    {.key = "manifest",
     .selected = [](const SourceSpec& s) { return !s.manifest.empty(); },
     .open = OpenManifestSource,
     .check_keys = CheckManifestKeys,
     .check_keys_unused = CheckManifestKeysUnused,
     .media_root = ManifestRoot,
     .read_policy = ReadPolicy::kHeldToIoBudget,
     .blend = false,
     .not_a_blend_entry = "",
     .preprocessed = false},
    {.key = "shards",
     .selected = [](const SourceSpec& s) { return !s.shards.empty(); },
     .open = OpenShardSource,
     .check_keys = CheckShardKeys,
     .check_keys_unused = CheckShardKeysUnused,
     .media_root = nullptr,
     .read_policy = ReadPolicy::kHeldToIoBudget,
     .blend = false,
     .not_a_blend_entry = "",
     .preprocessed = false},
    {.key = "parquet",
     .selected = [](const SourceSpec& s) { return !s.parquet.empty(); },
     .open = OpenParquetSource,
     .check_keys = CheckParquetKeys,
     .check_keys_unused = nullptr,
     .media_root = nullptr,
     // A row group is fetched whole into the row-group cache, whose own limit
     // (source.cache_bytes) bounds it: it may pass the I/O budget alone.
     .read_policy = ReadPolicy::kBoundedByCache,
     .blend = false,
     .not_a_blend_entry = "",
     .preprocessed = false},
    {.key = "materialized",
     .selected = [](const SourceSpec& s) { return !s.materialized.empty(); },
     .open = OpenMaterializedSource,
     .check_keys = CheckMaterializedKeys,
     .check_keys_unused = nullptr,
     .media_root = nullptr,
     .read_policy = ReadPolicy::kHeldToIoBudget,
     .blend = false,
     .not_a_blend_entry = "a materialization carries its own batch layout: it cannot be one "
                          "entry of a mix",
     .preprocessed = true},
};

}  // namespace

std::span<const SourceKind> SourceKinds() { return kSourceKinds; }

const SourceKind& SourceKindOf(const SourceSpec& spec) {
  const SourceKind* manifest = nullptr;
  const SourceKind* last = nullptr;
  for (const SourceKind& kind : kSourceKinds) {
    if (kind.blend) {
      if (kind.selected(spec)) return kind;
      continue;
    }
    if (manifest == nullptr) manifest = &kind;
    if (kind.selected(spec)) last = &kind;
  }
  return last != nullptr ? *last : *manifest;
}

using schema::Got;
using schema::InRange;
using schema::Invalid;
using schema::NonEmpty;

// source.fields: names unique and not the engine's own, keys given, one conversation at
// most, list sizes bounded.
Status CheckSourceFields(const SourceSpec& src) {
  constexpr int kMaxItems = 4096;
  std::map<std::string, size_t> names;
  int conversations = 0;
  for (size_t i = 0; i < src.fields.size(); ++i) {
    const SourceFieldSpec& f = src.fields[i];
    const std::string p = "source.fields[" + std::to_string(i) + "]";
    HR_RETURN_IF_ERROR(NonEmpty(p + ".name", f.name, "the field's name"));
    if (f.name == "index" || f.name == "id") {
      return Invalid(p + ".name", "'" + f.name +
                                      "' is the engine's own batch field (each sample's "
                                      "dataset index and id): choose another name");
    }
    if (const auto [it, fresh] = names.emplace(f.name, i); !fresh) {
      return Invalid(p + ".name", "'" + f.name + "' is also source.fields[" +
                                      std::to_string(it->second) +
                                      "].name: field names must be unique");
    }
    if (f.kind == FieldKind::kConversation) {
      if (++conversations > 1) return Invalid(p + ".kind", "only one field may be a conversation");
      if (f.max_items != 0) return Invalid(p + ".max_items", "a conversation is not a list" + Got(f.max_items));
    }
    HR_RETURN_IF_ERROR(InRange(p + ".max_items", f.max_items, 0, kMaxItems));
    if (!src.manifest.empty()) {
      // A manifest field's keys: one JSON key, or several separated by commas.
      const std::vector<std::string> keys = ManifestKeysOf(f);
      for (size_t k = 0; k < keys.size(); ++k) {
        const auto again = std::find(keys.begin(), keys.begin() + k, keys[k]);
        if (keys[k].empty() || again != keys.begin() + k) {
          return Invalid(p + ".key", "'" + f.key + "' " +
                                         (keys[k].empty() ? "has an empty key"
                                                          : "names '" + keys[k] + "' twice") +
                                         ": a JSON key, or several separated by commas "
                                         "(images,image: whichever a record holds)");
        }
      }
    }
    if (f.pad_items && (f.max_items == 0 || !IsMediaKind(f.kind))) {
      return Invalid(p + ".pad_items",
                     "pads a media list (max_items > 0, kind image, video, audio, pointcloud "
                     "or bytes) to max_items: this field is not one");
    }
  }
  return Status::Ok();
}

Result<std::shared_ptr<const Source>> OpenSource(const SourceSpec& spec,
                                                 const SourceOptions& options,
                                                 std::shared_ptr<Storage> storage) {
  return SourceKindOf(spec).open(spec, options, std::move(storage));
}

}  // namespace headrace
