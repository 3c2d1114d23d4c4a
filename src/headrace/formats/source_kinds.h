// The source kinds, in one table: each kind's key under `source:`, how it opens, its
// keys' rules, where its local media must be, and how its reads meet the I/O budget.
// OpenSource (source.h), config validation (pipeline/config_validate.cc) and the storage
// root (pipeline/prepared.cc) read this table and name no kind themselves. A new kind is
// one entry in source_kinds.cc plus its source_<kind>.{h,cc} (formats/README.md works
// an example).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/formats/source.h"
#include "headrace/formats/source_spec.h"

namespace headrace {

// What a kind's key rules see beyond the source's own keys (config validation fills it).
struct SourceKeyContext {
  int64_t io_budget_bytes = 0;      // execution.io_budget_bytes as written (0: automatic)
  int64_t memory_budget_bytes = 0;  // memory.budget_bytes
  // A blend's entry checked as the pipeline's one source, with the whole of config
  // validation's rules for a source (messages naming "source.<key>"); the blend's rules
  // call it for each entry in turn.
  std::function<Status(const SourceSpec&)> check_entry;
};

struct SourceKind {
  // Its key under `source:` ("manifest", "shards", ...): the key config messages name
  // ("source.<key>") and the value that selects the kind.
  std::string_view key;
  // Whether `spec` names this kind (its key is set).
  bool (*selected)(const SourceSpec& spec);
  Result<std::shared_ptr<const Source>> (*open)(const SourceSpec& spec,
                                                const SourceOptions& options,
                                                std::shared_ptr<Storage> storage);
  // The rules of its keys, run by config validation once the kind is known to be the one
  // set; messages name the key first ("source.shuffle_window: ...").
  Status (*check_keys)(const SourceSpec& spec, const SourceKeyContext& context);
  // The rule for its own keys in a spec of another kind (SourceSpec holds every kind's
  // keys): kInvalidArgument naming one that is set, as it applies to this kind only;
  // null when it has no such key.
  Status (*check_keys_unused)(const SourceSpec& spec);
  // The folder its local media must be beneath (storage.follow_symlinks off): an
  // absolute path, or "" for none. Null: the kind reads no loose media by path (shards,
  // row groups and materializations name byte ranges of the files they list).
  Result<std::string> (*media_root)(const SourceSpec& spec);
  // How its reads meet execution.io_budget_bytes (Source::read_policy; a blend's is its
  // entries', MixSource).
  ReadPolicy read_policy;
  // A source made of sources (source.mix): exclusive with the other kinds by its own
  // rule (their keys go inside its entries), opened before any of them is looked at.
  bool blend;
  // Why it cannot be an entry of a blend ("" when it can): config validation's message
  // for source.mix[i].<key>.
  std::string_view not_a_blend_entry;
  // Its samples are finished batch rows (a materialization): the pipeline's ops must be
  // empty and its batch layout is its own (Source::materialized).
  bool preprocessed;
};

// Every kind, in the order config messages list them: the blend first, then the single
// kinds, the manifest (the kind of a spec that sets no key) first among them.
std::span<const SourceKind> SourceKinds();

// The kind `spec` opens as: the blend when its list is set; else the single kind whose
// key is set (when several are, which validation refuses naming the last of them in
// SourceKinds() order, that last one); else the manifest, whose rules then name the
// missing key.
const SourceKind& SourceKindOf(const SourceSpec& spec);

// The rules of source.fields, whatever the kind: names given, unique and not the
// engine's own (index, id), one conversation at most, list sizes bounded, pad_items only
// on a media list, a manifest field's keys well formed. Messages name
// "source.fields[i].<key>".
Status CheckSourceFields(const SourceSpec& spec);

}  // namespace headrace
