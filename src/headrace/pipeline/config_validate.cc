// ValidatePipelineSpec: the rules for a spec however it was built (YAML, C++, Python).
// Each op validates its own parameters (its Validate, through CheckOpChain); messages
// name the key first ("batch.size: ..."), which ParsePipelineConfig extends with where
// the key was set.
#include "headrace/pipeline/config.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "headrace/formats/source_kinds.h"
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
using schema::Quote;

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
    if (pack.window != 0 || !pack.index.empty()) {
      return Invalid(pack.window != 0 ? "batch.pack.window" : "batch.pack.index",
                     "applies with batch.pack.seq_len > 0 (packing) or batch.max_tokens > 0");
    }
    return Status::Ok();
  }
  const std::string& balanced = spec.batch.balance.index;
  if (!pack.index.empty() && !balanced.empty() && pack.index != balanced) {
    return Invalid("batch.pack.index",
                   "names another file than batch.balance.index: one size index serves "
                   "both (give one of them, or the same path)");
  }
  return NonEmpty("batch.pack.field", pack.field,
                  "the unpadded token field to pack (text.tokenize {pad: false}'s input_ids)");
}

Result<StepCostOptions> StepCostOptionsOf(const BalanceSpec& balance) {
  const ModelDims given{.llm_params = balance.llm_params,
                        .llm_layers = balance.llm_layers,
                        .llm_hidden = balance.llm_hidden,
                        .vision_params = balance.vision_params,
                        .vision_layers = balance.vision_layers,
                        .vision_hidden = balance.vision_hidden,
                        .vision_window = balance.vision_window,
                        .vision_full_layers = balance.vision_full_layers};
  Result<StepCostOptions> options = StepCostOptionsFor(balance.cost, given);
  if (!options.ok()) return Invalid("batch.balance.cost", options.status().message());
  if (Result<StepCost> cost = StepCost::Make(*options); !cost.ok()) {
    return Invalid("batch.balance", cost.status().message());
  }
  return options;
}

Result<uint32_t> EveryRankOf(const BalanceSpec& balance) {
  uint32_t bits = 0;
  std::string_view rest = balance.every_rank;
  while (!rest.empty()) {
    const size_t comma = std::min(rest.find(','), rest.size());
    std::string_view name = rest.substr(0, comma);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    rest = rest.substr(std::min(comma + 1, rest.size()));
    const auto* kind = std::find_if(std::begin(kBalanceKinds), std::end(kBalanceKinds),
                                    [&](FieldKind k) { return EnumName(k) == name; });
    if (kind == std::end(kBalanceKinds)) {
      return Invalid("batch.balance.every_rank",
                     Quote(name) + " is not a kind of media (allowed: image, video, audio, "
                                   "pointcloud, comma-separated)");
    }
    bits |= ModalityBit(*kind);
  }
  return bits;
}

// What a kind's key rules see of the rest of the spec (formats/source_kinds.h).
static SourceKeyContext KeyContextOf(const PipelineSpec& spec) {
  SourceKeyContext context;
  context.io_budget_bytes = spec.execution.io_budget_bytes;
  context.memory_budget_bytes = spec.memory.budget_bytes;
  return context;
}

// One source's keys: the top-level source's, or (with `spec.source` set to it) a mix
// entry's. The kind's own rules are its check_keys (formats/source_kinds.h).
static Status ValidateOneSource(const PipelineSpec& spec) {
  const SourceSpec& src = spec.source;
  // The single kinds' keys are exclusive; the message names the last one set.
  std::vector<std::string> keys;
  const SourceKind* last_set = nullptr;
  int set = 0;
  for (const SourceKind& kind : SourceKinds()) {
    if (kind.blend) continue;
    keys.push_back("source." + std::string(kind.key));
    if (kind.selected(src)) {
      ++set;
      last_set = &kind;
    }
  }
  if (set > 1) {
    std::string all;
    for (size_t i = 0; i < keys.size(); ++i) {
      all += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + keys[i];
    }
    return Invalid("source." + std::string(last_set->key), all + " are exclusive: set one of them");
  }
  const SourceKind& kind = SourceKindOf(src);
  if (kind.preprocessed && !spec.ops.empty()) {
    return Invalid("ops", "source." + std::string(kind.key) +
                              " holds samples preprocessed already: ops must be empty (got " +
                              std::to_string(spec.ops.size()) + ", the first " +
                              OpKey(0, spec.ops[0]) + ")");
  }
  HR_RETURN_IF_ERROR(kind.check_keys(src, KeyContextOf(spec)));
  // The other kinds' own keys, which the flat SourceSpec holds too, left unset.
  for (const SourceKind& other : SourceKinds()) {
    if (&other != &kind && other.check_keys_unused != nullptr) {
      HR_RETURN_IF_ERROR(other.check_keys_unused(src));
    }
  }
  HR_RETURN_IF_ERROR(NonEmpty("source.id_field", src.id_field, "a JSON key"));
  HR_RETURN_IF_ERROR(NonEmpty("source.image_field", src.image_field, "a JSON key"));
  HR_RETURN_IF_ERROR(NonEmpty("source.conversations_field", src.conversations_field, "a JSON key"));
  HR_RETURN_IF_ERROR(NonEmpty("source.role_field", src.role_field, "a JSON key"));
  HR_RETURN_IF_ERROR(NonEmpty("source.text_field", src.text_field, "a JSON key"));
  return CheckSourceFields(src);
}

Status ValidatePipelineSpec(const PipelineSpec& spec) {
  const SourceSpec& src = spec.source;
  const SourceKind& kind = SourceKindOf(src);
  if (!kind.blend) {
    if (src.until != BlendUntil::kFirstExhausted || src.samples != 0) {
      return Invalid(src.samples != 0 ? "source.samples" : "source.until",
                     "applies to a blend (source.mix)");
    }
    HR_RETURN_IF_ERROR(ValidateOneSource(spec));
  } else {
    HR_RETURN_IF_ERROR(KnownEnum("source.until", src.until));
    // Each entry is validated as the pipeline's one source: one copy of the spec without
    // the list (a copy per entry, list and all, made 5,000 entries take 52 s).
    PipelineSpec one = spec;
    one.source = SourceSpec{};
    one.mix_ops.clear();
    SourceKeyContext context = KeyContextOf(spec);
    context.check_entry = [&one](const SourceSpec& entry) {
      one.source = entry;
      return ValidateOneSource(one);
    };
    HR_RETURN_IF_ERROR(kind.check_keys(src, context));
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
  if (spec.batch.balance.enabled()) {
    HR_RETURN_IF_ERROR(StepCostOptionsOf(spec.batch.balance).status());
    HR_RETURN_IF_ERROR(EveryRankOf(spec.batch.balance).status());
  } else if (!spec.batch.balance.every_rank.empty() || !spec.batch.balance.index.empty()) {
    return Invalid("batch.balance", "every_rank and index apply with a cost (batch.balance.cost)");
  }
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
