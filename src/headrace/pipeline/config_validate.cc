// ValidatePipelineSpec: the rules for a spec however it was built (YAML, C++, Python).
// Each op validates its own parameters (its Validate, through CheckOpChain); messages
// name the key first ("batch.size: ..."), which ParsePipelineConfig extends with where
// the key was set.
#include "headrace/pipeline/config.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include "headrace/formats/shard_set.h"
#include "headrace/io/uri.h"
#include "headrace/ops/schema.h"
#include "headrace/pipeline/config_schema.h"
#include "headrace/pipeline/op_types.h"
#include "headrace/pipeline/plan.h"

namespace headrace {
namespace {

using config_internal::FormatDouble;
using schema::AtLeast;
using schema::Got;
using schema::InRange;
using schema::Invalid;
using schema::KnownEnum;
using schema::NonEmpty;
using schema::Probability;

// Upper bounds. Beyond them a value is a typo or an attack, not a configuration: each
// would make the run fail later, and less clearly (a thread that cannot start, sizes
// whose products overflow, a resize every sample fails).
constexpr int kMaxThreads = 1024;       // execution.cpu_threads, execution.io_threads
constexpr int kMaxIoInflight = 16384;   // 16 per thread at kMaxThreads (spec.h)
constexpr int kMaxPrefetchDepth = 1024;
constexpr int64_t kMaxEpochs = 1'000'000;
constexpr int64_t kMaxBatchSize = int64_t{1} << 20;
constexpr double kMaxStepMs = 3'600'000;  // trainer.step_ms: an hour

Status ValidateStorage(const StorageSpec& s) {
  if (!s.endpoint.empty()) {
    if (Result<Endpoint> ep = ParseEndpoint(s.endpoint); !ep.ok()) {
      return Invalid("storage.endpoint", ep.status().message());
    }
  }
  HR_RETURN_IF_ERROR(KnownEnum("storage.addressing_style", s.addressing_style));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("storage.connect_timeout_ms", s.connect_timeout_ms, 1));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("storage.first_byte_timeout_ms", s.first_byte_timeout_ms, 0));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("storage.low_speed_limit", s.low_speed_limit, 0));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("storage.low_speed_time_s", s.low_speed_time_s, 0));
  HR_RETURN_IF_ERROR(AtLeast("storage.max_retries", s.max_retries, 0));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("storage.retry_base_ms", s.retry_base_ms, 0));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("storage.retry_max_ms", s.retry_max_ms, s.retry_base_ms));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("storage.retry_budget", s.retry_budget, 0));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("storage.part_bytes", s.part_bytes, 64 << 10));
  HR_RETURN_IF_ERROR(AtLeast("storage.max_connections", s.max_connections, 0));
  return AtLeast<int64_t>("storage.max_object_bytes", s.max_object_bytes, 0);
}

Status ValidateSourceFields(const SourceSpec& src);

// The shard keys, and the block cache's share of memory.budget_bytes.
Status ValidateShardSource(const PipelineSpec& spec) {
  const SourceSpec& src = spec.source;
  HR_RETURN_IF_ERROR(ValidateSourceFields(src));  // before its keys are read as extensions
  if (Result<ShardFieldMap> fields = ShardFieldsOf(src); !fields.ok()) {
    return fields.status();
  }
  HR_RETURN_IF_ERROR(InRange<int64_t>("source.shuffle_window", src.shuffle_window, 1, 1'000'000));
  HR_RETURN_IF_ERROR(
      InRange<int64_t>("source.block_bytes", src.block_bytes, 4096, int64_t{1} << 30));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("source.cache_bytes", src.cache_bytes, 0));
  // A global order's blocks are its samples (source_shards.cc checks they fit), not
  // source.block_bytes.
  if (src.cache_bytes > 0 && src.cache_bytes < src.block_bytes &&
      src.shuffle_scope == ShuffleScope::kWindow) {
    return Invalid("source.cache_bytes", "must hold at least one block (source.block_bytes " +
                                             std::to_string(src.block_bytes) + ")" +
                                             Got(src.cache_bytes));
  }
  const int64_t io = spec.execution.io_budget_bytes;
  if (src.cache_bytes > 0 && src.cache_bytes + io >= spec.memory.budget_bytes) {
    return Invalid("source.cache_bytes",
                   "the block cache (source.cache_bytes " + std::to_string(src.cache_bytes) +
                       ") plus execution.io_budget_bytes (" + std::to_string(io) +
                       ") leaves nothing of memory.budget_bytes (" +
                       std::to_string(spec.memory.budget_bytes) +
                       ") for batches: raise memory.budget_bytes or lower source.cache_bytes "
                       "(and source.shuffle_window)");
  }
  return Status::Ok();
}

// source.fields: names unique and not the engine's own, keys given, one conversation at
// most, list sizes bounded.
Status ValidateSourceFields(const SourceSpec& src) {
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

}  // namespace

constexpr int64_t kMaxPackSeqLen = int64_t{1} << 24;
constexpr int64_t kMaxPackWindow = int64_t{1} << 20;

Status ValidatePack(const PipelineSpec& spec) {
  const PackSpec& pack = spec.batch.pack;
  HR_RETURN_IF_ERROR(InRange<int64_t>("batch.pack.seq_len", pack.seq_len, 0, kMaxPackSeqLen));
  HR_RETURN_IF_ERROR(InRange<int64_t>("batch.pack.window", pack.window, 0, kMaxPackWindow));
  HR_RETURN_IF_ERROR(KnownEnum("batch.pack.overflow", pack.overflow));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("batch.pack.pad_id", pack.pad_id, -1));
  HR_RETURN_IF_ERROR(
      InRange<int64_t>("batch.max_tokens", spec.batch.max_tokens, 0, kMaxPackSeqLen));
  if (pack.enabled() && spec.batch.max_tokens > 0) {
    return Invalid("batch.max_tokens", "and batch.pack.seq_len are two ways to group tokens: "
                                       "set one (max_tokens: unpadded batches of a token "
                                       "budget; pack: rows of seq_len tokens)");
  }
  if (!spec.batch.regroups()) {
    if (pack.window != 0) {
      return Invalid("batch.pack.window",
                     "applies with batch.pack.seq_len > 0 (packing) or batch.max_tokens > 0");
    }
    return Status::Ok();
  }
  return NonEmpty("batch.pack.field", pack.field,
                  "the unpadded token field to pack (text.tokenize {pad: false}'s input_ids)");
}

// One source's keys: the top-level source's, or (with `spec.source` set to it) a mix
// entry's.
static Status ValidateOneSource(const PipelineSpec& spec) {
  const SourceSpec& src = spec.source;
  if (!src.manifest.empty() + !src.shards.empty() + !src.parquet.empty() +
          !src.materialized.empty() > 1) {
    return Invalid(!src.materialized.empty() ? "source.materialized"
                   : src.parquet.empty()     ? "source.shards"
                                             : "source.parquet",
                   "source.manifest, source.shards, source.parquet and source.materialized are "
                   "exclusive: set one of them");
  }
  if (!src.materialized.empty()) {
    if (!spec.ops.empty()) {
      return Invalid("ops", "source.materialized holds samples preprocessed already: ops must "
                            "be empty (got " + std::to_string(spec.ops.size()) + ", the first " +
                            OpKey(0, spec.ops[0]) + ")");
    }
    if (!src.fields.empty()) {
      return Invalid("source.fields", "source.materialized declares its own fields (its "
                                      "materialized.json): leave source.fields empty");
    }
  } else if (!src.parquet.empty()) {
    HR_RETURN_IF_ERROR(
        InRange<int64_t>("source.shuffle_window", src.shuffle_window, 1, 1'000'000));
    HR_RETURN_IF_ERROR(AtLeast<int64_t>("source.cache_bytes", src.cache_bytes, 0));
  } else if (src.shards.empty()) {
    HR_RETURN_IF_ERROR(NonEmpty("source.manifest", src.manifest,
                                "the JSONL manifest path (or set source.shards, "
                                "source.parquet or source.materialized)"));
  } else {
    HR_RETURN_IF_ERROR(ValidateShardSource(spec));
  }
  if (src.shuffle_scope != ShuffleScope::kWindow && src.shards.empty()) {
    return Invalid("source.shuffle_scope",
                   "applies to tar shards (source.shards) only; a manifest's shuffle is "
                   "global already, Parquet's groups are its row groups");
  }
  if (src.records != ManifestRecordsForm::kAuto && src.manifest.empty()) {
    return Invalid("source.records", "applies to a JSONL manifest (source.manifest) only; "
                                     "shards, Parquet and materializations keep their own index");
  }
  HR_RETURN_IF_ERROR(NonEmpty("source.id_field", src.id_field, "a JSON key"));
  HR_RETURN_IF_ERROR(NonEmpty("source.image_field", src.image_field, "a JSON key"));
  HR_RETURN_IF_ERROR(NonEmpty("source.conversations_field", src.conversations_field, "a JSON key"));
  HR_RETURN_IF_ERROR(NonEmpty("source.role_field", src.role_field, "a JSON key"));
  HR_RETURN_IF_ERROR(NonEmpty("source.text_field", src.text_field, "a JSON key"));
  return ValidateSourceFields(src);
}

// source.mix: each entry named, weighted and a source of its own (its errors say
// "source.mix[i].<key>"), one batch layout for all of them.
static Status ValidateMix(const PipelineSpec& spec) {
  const SourceSpec& src = spec.source;
  if (!src.manifest.empty() || !src.shards.empty() || !src.parquet.empty() ||
      !src.materialized.empty() || !src.fields.empty()) {
    return Invalid("source.mix", "is a source of its own: give manifest, shards, parquet and "
                                 "fields inside each entry, not beside the list");
  }
  HR_RETURN_IF_ERROR(KnownEnum("source.until", src.until));
  if (src.until == BlendUntil::kSamples) {
    HR_RETURN_IF_ERROR(AtLeast<int64_t>("source.samples", src.samples, 1));
  } else if (src.samples != 0) {
    return Invalid("source.samples", "applies with source.until: samples" + Got(src.samples));
  }
  std::map<std::string, size_t> names;
  // Each entry is validated as the pipeline's one source: one copy of the spec without
  // the list (a copy per entry, list and all, made 5,000 entries take 52 s).
  PipelineSpec one = spec;
  one.source = SourceSpec{};
  one.mix_ops.clear();
  for (size_t i = 0; i < src.mix.size(); ++i) {
    const MixEntrySpec& e = src.mix[i];
    const std::string p = "source.mix[" + std::to_string(i) + "]";
    HR_RETURN_IF_ERROR(NonEmpty(p + ".name", e.name, "the entry's name (its samples' `source`)"));
    if (const auto [it, fresh] = names.emplace(e.name, i); !fresh) {
      return Invalid(p + ".name", "'" + e.name + "' is also source.mix[" +
                                      std::to_string(it->second) +
                                      "].name: entry names must be unique");
    }
    if (!(e.weight > 0 && e.weight < 1e300)) {
      return Invalid(p + ".weight", "must be a number > 0" + Got(e.weight));
    }
    if (!(e.repeat > 0 && e.repeat < 1e9)) {
      return Invalid(p + ".repeat", "must be a number > 0" + Got(e.repeat));
    }
    if (src.until != BlendUntil::kEpochized && e.repeat != 1) {
      return Invalid(p + ".repeat", "applies with source.until: epochized (weights are then "
                                    "the reads each entry gets)" + Got(e.repeat));
    }
    if (e.max_error_rate) {
      HR_RETURN_IF_ERROR(Probability(p + ".max_error_rate", *e.max_error_rate));
    }
    if (!e.source.mix.empty()) return Invalid(p + ".mix", "a mix entry cannot be a mix itself");
    if (!e.source.materialized.empty()) {
      return Invalid(p + ".materialized", "a materialization carries its own batch layout: "
                                          "it cannot be one entry of a mix");
    }
    for (const SourceFieldSpec& f : e.source.fields) {
      if (f.name == "source") {
        return Invalid(p + ".fields", "'source' is the mix's own field (each sample's entry "
                                      "name): rename the field");
      }
    }
    one.source = e.source;
    if (Status st = ValidateOneSource(one); !st.ok()) {
      std::string message = st.message();
      if (message.rfind("source.", 0) == 0) message = p + message.substr(6);
      return Status(st.code(), message);
    }
  }
  return Status::Ok();
}

Status ValidatePipelineSpec(const PipelineSpec& spec) {
  const SourceSpec& src = spec.source;
  if (src.mix.empty()) {
    if (src.until != BlendUntil::kFirstExhausted || src.samples != 0) {
      return Invalid(src.samples != 0 ? "source.samples" : "source.until",
                     "applies to a blend (source.mix)");
    }
    HR_RETURN_IF_ERROR(ValidateOneSource(spec));
  } else {
    HR_RETURN_IF_ERROR(ValidateMix(spec));
  }
  // A blend entry's own ops (source.mix[i].ops) need that entry.
  for (size_t i = src.mix.size(); i < spec.mix_ops.size(); ++i) {
    if (spec.mix_ops[i].empty()) continue;
    return Invalid("source.mix[" + std::to_string(i) + "].ops",
                   src.mix.empty() ? "ops of a blend entry, but the source is not a blend "
                                     "(source.mix): put them in ops"
                                   : "ops of a blend entry that does not exist (source.mix has " +
                                         std::to_string(src.mix.size()) + " entries)");
  }
  if (spec.epochs) HR_RETURN_IF_ERROR(InRange<int64_t>("epochs", *spec.epochs, 1, kMaxEpochs));
  HR_RETURN_IF_ERROR(InRange<int64_t>("batch.size", spec.batch.size, 1, kMaxBatchSize));
  HR_RETURN_IF_ERROR(ValidatePack(spec));
  // Each op's own rules (its Validate) and the chain's declarations: what every op reads
  // exists with the kind it needs, batch field names are unique.
  HR_RETURN_IF_ERROR(CheckOpChain(spec));
  const ExecutionSpec& exec = spec.execution;
  HR_RETURN_IF_ERROR(InRange("execution.cpu_threads", exec.cpu_threads, 0, kMaxThreads));
  HR_RETURN_IF_ERROR(InRange("execution.io_threads", exec.io_threads, 0, kMaxThreads));
  HR_RETURN_IF_ERROR(InRange("execution.io_inflight", exec.io_inflight, 0, kMaxIoInflight));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("execution.io_budget_bytes", exec.io_budget_bytes, 0));
  HR_RETURN_IF_ERROR(InRange("prefetch.depth", spec.prefetch.depth, 1, kMaxPrefetchDepth));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("memory.budget_bytes", spec.memory.budget_bytes, 1));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("memory.scratch_bytes_per_thread",
                                      spec.memory.scratch_bytes_per_thread, 0));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("memory.decode_bytes_per_thread",
                                      spec.memory.decode_bytes_per_thread, 0));
  if (exec.io_budget_bytes > spec.memory.budget_bytes) {
    return Invalid("execution.io_budget_bytes", "must not exceed memory.budget_bytes (" +
                                                    std::to_string(spec.memory.budget_bytes) + ")" +
                                                    Got(exec.io_budget_bytes));
  }
  const ErrorSpec& errors = spec.errors;
  HR_RETURN_IF_ERROR(KnownEnum("errors.policy", errors.policy));
  HR_RETURN_IF_ERROR(KnownEnum("errors.on_bad_shard", errors.on_bad_shard));
  HR_RETURN_IF_ERROR(Probability("errors.max_error_rate", errors.max_error_rate));
  HR_RETURN_IF_ERROR(AtLeast<int64_t>("errors.min_samples", errors.min_samples, 0));
  HR_RETURN_IF_ERROR(AtLeast("errors.max_logged", errors.max_logged, 0));
  HR_RETURN_IF_ERROR(ValidateStorage(spec.storage));
  if (!(spec.trainer.step_ms >= 0 && spec.trainer.step_ms <= kMaxStepMs)) {
    return Invalid("trainer.step_ms",
                   "must be in [0, " + FormatDouble(kMaxStepMs) + "]" + Got(spec.trainer.step_ms));
  }
  return Status::Ok();
}

}  // namespace headrace
