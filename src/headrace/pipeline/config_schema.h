// The pipeline config's schema and the helpers its reading, overrides, writing and
// validation share (config_read.cc, config_overrides.cc, config_write.cc,
// config_validate.cc). Internal to pipeline/: the API is config.h.
//
// Each spec struct lists its keys once, in Fields(); the parser (allowed keys and
// values), the emitter and the key order of PipelineSpecToYaml all come from that list.
// Adding a key is one line here. Operators are not named in this file: each op type of
// ops/all_ops.h carries its name, its Fields and its Validate (ops/op_plan.h), and the
// parser, the emitter and ValidatePipelineSpec iterate that list; the order of the ops
// (what each reads and writes) is checked by the planner's declaration pass
// (CheckOpChain), the same code that plans them. Adding an op touches nothing here.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "headrace/ops/schema.h"
#include "headrace/pipeline/op_types.h"
#include "headrace/pipeline/spec.h"

namespace headrace {

// The config names of the spec's own enums (ops/schema.h: EnumName, AllowedNames,
// KnownEnum find them by argument-dependent lookup).
EnumTable<ErrorPolicy> TableOf(ErrorPolicy);
EnumTable<BadShardPolicy> TableOf(BadShardPolicy);
EnumTable<AddressingStyle> TableOf(AddressingStyle);
EnumTable<FieldKind> TableOf(FieldKind);
EnumTable<ManifestRecordsForm> TableOf(ManifestRecordsForm);
EnumTable<PackOverflow> TableOf(PackOverflow);
EnumTable<BlendUntil> TableOf(BlendUntil);
EnumTable<ShuffleScope> TableOf(ShuffleScope);

namespace config_internal {

template <typename T, typename U>
concept SpecOf = std::is_same_v<std::remove_const_t<T>, U>;

// How an integer field is written in YAML.
enum class Unit {
  kCount,  // a plain integer
  kBytes,  // an integer, or a string with a unit ("1GiB")
};

void Fields(SpecOf<SourceFieldSpec> auto& s, auto&& f) {
  f("name", s.name);
  f("kind", s.kind);
  f("key", s.key);
  f("max_items", s.max_items);
  f("required", s.required);
  f("pad_items", s.pad_items);
}
// A source's own keys: the top-level source's and each mix entry's.
void SourceKeys(SpecOf<SourceSpec> auto& s, auto&& f) {
  f("manifest", s.manifest);
  f("root", s.root);
  f("id_field", s.id_field);
  f("fields", s.fields);
  f("image_field", s.image_field);
  f("conversations_field", s.conversations_field);
  f("role_field", s.role_field);
  f("text_field", s.text_field);
  f("records", s.records);
  f("allow_absolute_paths", s.allow_absolute_paths);
  f("shards", s.shards);
  f("parquet", s.parquet);
  f("materialized", s.materialized);
  f("shard_fields", s.shard_fields);
  f("shuffle_window", s.shuffle_window);
  f("shuffle_scope", s.shuffle_scope);
  f("block_bytes", s.block_bytes, Unit::kBytes);
  f("cache_bytes", s.cache_bytes, Unit::kBytes);
}
void Fields(SpecOf<MixEntrySpec> auto& s, auto&& f) {
  f("name", s.name);
  f("weight", s.weight);
  f("repeat", s.repeat);
  f("max_error_rate", s.max_error_rate);
  SourceKeys(s.source, f);
}
void Fields(SpecOf<SourceSpec> auto& s, auto&& f) {
  f("mix", s.mix);
  f("until", s.until);
  f("samples", s.samples);
  SourceKeys(s, f);
}
// Every op's parameters: its own Fields (ops/op_plan.h), found through the op list.
template <typename T>
concept IsOpSpec = requires { typename OpTypeOf<std::remove_const_t<T>>::Spec; };
template <typename T>
  requires IsOpSpec<T>
void Fields(T& s, auto&& f) {
  OpTypeOf<std::remove_const_t<T>>::Fields(s, f);
}
void Fields(SpecOf<PackSpec> auto& s, auto&& f) {
  f("seq_len", s.seq_len);
  f("window", s.window);
  f("overflow", s.overflow);
  f("field", s.field);
  f("pad_id", s.pad_id);
  f("index", s.index);
}
void Fields(SpecOf<BalanceSpec> auto& s, auto&& f) {
  f("cost", s.cost);
  f("index", s.index);
  f("every_rank", s.every_rank);
  f("llm_params", s.llm_params);
  f("llm_layers", s.llm_layers);
  f("llm_hidden", s.llm_hidden);
  f("vision_params", s.vision_params);
  f("vision_layers", s.vision_layers);
  f("vision_hidden", s.vision_hidden);
  f("vision_window", s.vision_window);
  f("vision_full_layers", s.vision_full_layers);
}
void Fields(SpecOf<BatchSpec> auto& s, auto&& f) {
  f("size", s.size);
  f("drop_last", s.drop_last);
  f("pack", s.pack);
  f("max_tokens", s.max_tokens);
  f("balance", s.balance);
}
void Fields(SpecOf<ExecutionSpec> auto& s, auto&& f) {
  f("cpu_threads", s.cpu_threads);
  f("io_threads", s.io_threads);
  f("io_inflight", s.io_inflight);
  f("io_budget_bytes", s.io_budget_bytes, Unit::kBytes);
}
void Fields(SpecOf<PrefetchSpec> auto& s, auto&& f) { f("depth", s.depth); }
void Fields(SpecOf<MemorySpec> auto& s, auto&& f) {
  f("budget_bytes", s.budget_bytes, Unit::kBytes);
  f("scratch_bytes_per_thread", s.scratch_bytes_per_thread, Unit::kBytes);
  f("decode_bytes_per_thread", s.decode_bytes_per_thread, Unit::kBytes);
}
void Fields(SpecOf<ErrorSpec> auto& s, auto&& f) {
  f("policy", s.policy);
  f("on_bad_shard", s.on_bad_shard);
  f("max_error_rate", s.max_error_rate);
  f("min_samples", s.min_samples);
  f("max_logged", s.max_logged);
}
void Fields(SpecOf<TrainerSpec> auto& s, auto&& f) { f("step_ms", s.step_ms); }
void Fields(SpecOf<StorageSpec> auto& s, auto&& f) {
  f("endpoint", s.endpoint);
  f("region", s.region);
  f("profile", s.profile);
  f("ca_bundle", s.ca_bundle);
  f("anonymous", s.anonymous);
  f("addressing_style", s.addressing_style);
  f("connect_timeout_ms", s.connect_timeout_ms);
  f("first_byte_timeout_ms", s.first_byte_timeout_ms);
  f("low_speed_limit", s.low_speed_limit);
  f("low_speed_time_s", s.low_speed_time_s);
  f("max_retries", s.max_retries);
  f("retry_base_ms", s.retry_base_ms);
  f("retry_max_ms", s.retry_max_ms);
  f("retry_budget", s.retry_budget);
  f("part_bytes", s.part_bytes, Unit::kBytes);
  f("max_connections", s.max_connections);
  f("max_object_bytes", s.max_object_bytes, Unit::kBytes);
  f("follow_symlinks", s.follow_symlinks);
}
void Fields(SpecOf<PipelineSpec> auto& s, auto&& f) {
  f("source", s.source);
  f("seed", s.seed);
  f("epochs", s.epochs);
  f("shuffle", s.shuffle);
  f("batch", s.batch);
  f("ops", s.ops);
  f("execution", s.execution);
  f("prefetch", s.prefetch);
  f("memory", s.memory);
  f("errors", s.errors);
  f("trainer", s.trainer);
  f("storage", s.storage);
}

template <typename T>
concept HasFields = requires(T& t) {
  Fields(t, [](std::string_view, auto&, Unit = {}) {});
};

// Ops whose Spec has width and height may also take `size: N` for width = height = N
// (the crops: kSizeKey).
template <typename T>
constexpr bool kHasSizeShorthand = [] {
  if constexpr (IsOpSpec<T>) {
    return requires { OpTypeOf<T>::kSizeKey; };
  } else {
    return false;
  }
}();

template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};
// A list of structs with Fields() (source.fields), read and written as a YAML sequence.
template <typename T>
struct IsStructList : std::false_type {};
template <typename T>
struct IsStructList<std::vector<T>> : std::bool_constant<!std::is_same_v<T, OpSpec>> {};

template <typename T>
struct IsStdArray : std::false_type {};
template <typename T, size_t N>
struct IsStdArray<std::array<T, N>> : std::true_type {};

// --- small text helpers ----------------------------------------------------------------

using schema::Quote;         // 'text'
using schema::FormatDouble;  // the shortest text that reads back as v
std::string FormatFloat(float v);
// A list index as a key ("0".."999999999").
bool IsIndex(std::string_view s);
// "batch" + "size" -> "batch.size"; a numeric key is an index: "ops" + "1" -> "ops[1]".
std::string ChildPath(std::string_view path, std::string_view key);

}  // namespace config_internal
}  // namespace headrace
