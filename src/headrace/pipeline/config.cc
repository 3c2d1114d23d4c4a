#include "headrace/pipeline/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>

#include "headrace/core/strings.h"
#include "headrace/formats/shard_source.h"
#include "headrace/io/uri.h"
#include "headrace/ops/schema.h"
#include "headrace/pipeline/op_types.h"
#include "headrace/pipeline/plan.h"

namespace headrace {
namespace {

// --- the schema ------------------------------------------------------------------------
//
// Each spec struct lists its keys once, in Fields(); the parser (allowed keys and
// values), the emitter and the key order of PipelineSpecToYaml all come from that list.
// Adding a key is one line here. Operators are not named in this file: each op type of
// ops/all_ops.h carries its name, its Fields and its Validate (ops/op_plan.h), and the
// parser, the emitter and ValidatePipelineSpec iterate that list; the order of the ops
// (what each reads and writes) is checked by the planner's declaration pass
// (CheckOpChain), the same code that plans them. Adding an op touches nothing here.

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
}
void Fields(SpecOf<SourceSpec> auto& s, auto&& f) {
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
  f("block_bytes", s.block_bytes, Unit::kBytes);
  f("cache_bytes", s.cache_bytes, Unit::kBytes);
}
// Every op's parameters: its own Fields (ops/op_plan.h), found through the op list.
template <typename T>
concept IsOpSpec = requires { typename OpTypeOf<std::remove_const_t<T>>::Spec; };
template <typename T>
  requires IsOpSpec<T>
void Fields(T& s, auto&& f) {
  OpTypeOf<std::remove_const_t<T>>::Fields(s, f);
}
void Fields(SpecOf<BatchSpec> auto& s, auto&& f) {
  f("size", s.size);
  f("drop_last", s.drop_last);
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
}
void Fields(SpecOf<ErrorSpec> auto& s, auto&& f) {
  f("policy", s.policy);
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

constexpr std::pair<ErrorPolicy, std::string_view> kPolicies[] = {{ErrorPolicy::kSkip, "skip"}};
}  // namespace
EnumTable<ErrorPolicy> TableOf(ErrorPolicy) { return kPolicies; }
namespace {
constexpr std::pair<AddressingStyle, std::string_view> kAddressingStyles[] = {
    {AddressingStyle::kAuto, "auto"},
    {AddressingStyle::kPath, "path"},
    {AddressingStyle::kVirtual, "virtual"}};
}  // namespace
EnumTable<AddressingStyle> TableOf(AddressingStyle) { return kAddressingStyles; }
constexpr std::pair<FieldKind, std::string_view> kFieldKinds[] = {
    {FieldKind::kImage, "image"},   {FieldKind::kVideo, "video"},
    {FieldKind::kAudio, "audio"},   {FieldKind::kPointCloud, "pointcloud"},
    {FieldKind::kBytes, "bytes"},   {FieldKind::kText, "text"},
    {FieldKind::kConversation, "conversation"},
    {FieldKind::kInt, "int"},       {FieldKind::kFloat, "float"},
    {FieldKind::kString, "string"}};
EnumTable<FieldKind> TableOf(FieldKind) { return kFieldKinds; }
constexpr std::pair<ManifestRecordsForm, std::string_view> kRecordsForms[] = {
    {ManifestRecordsForm::kAuto, "auto"},
    {ManifestRecordsForm::kParsed, "parsed"},
    {ManifestRecordsForm::kLines, "lines"}};
EnumTable<ManifestRecordsForm> TableOf(ManifestRecordsForm) { return kRecordsForms; }
namespace {

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

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string FormatDouble(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
std::string FormatFloat(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

bool IsIndex(std::string_view s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// "batch" + "size" -> "batch.size"; a numeric key is an index: "ops" + "1" -> "ops[1]".
std::string ChildPath(std::string_view path, std::string_view key) {
  if (IsIndex(key)) return std::string(path) + "[" + std::string(key) + "]";
  if (path.empty()) return std::string(key);
  return std::string(path) + "." + std::string(key);
}

// Whether `a` is `b`, or one is the other plus ".x" / "[n]".
bool PathsOverlap(std::string_view a, std::string_view b) {
  if (a.size() > b.size()) std::swap(a, b);
  if (b.substr(0, a.size()) != a) return false;
  return b.size() == a.size() || b[a.size()] == '.' || b[a.size()] == '[';
}

std::string Describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing (null)";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  return Quote(n.Scalar());
}

// --- reading ---------------------------------------------------------------------------

// Parses a YAML tree into a spec, remembering where each key came from (a line of the
// file, or an override) so that errors, validation's included, can say so.
class Reader {
 public:
  void AddOverride(std::string path, std::string text) {
    overrides_.emplace_back(std::move(path), std::move(text));
  }

  // " (set by override 'k=v')", " (line 7)" or "".
  std::string Where(const std::string& key) const {
    const auto alias = aliases_.find(key);
    const std::string& path = alias == aliases_.end() ? key : alias->second;
    for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
      if (PathsOverlap(it->first, path)) return " (set by override " + Quote(it->second) + ")";
    }
    std::string p = path;
    while (!p.empty()) {
      if (auto it = lines_.find(p); it != lines_.end()) {
        return " (line " + std::to_string(it->second) + ")";
      }
      const size_t cut = p.find_last_of(".[");
      p.resize(cut == std::string::npos ? 0 : cut);
    }
    return "";
  }

  Status Error(const std::string& path, std::string_view what) const {
    return Status::InvalidArgument((path.empty() ? std::string("config") : path) + ": " +
                                   std::string(what) + Where(path));
  }

  void Note(const std::string& path, const YAML::Node& node) {
    if (!node.IsDefined()) return;
    const YAML::Mark mark = node.Mark();
    if (!mark.is_null()) lines_.emplace(path, mark.line + 1);
  }

  // A map (or null: no keys) whose keys are all in `allowed`, each once.
  Status CheckMap(const YAML::Node& node, const std::string& path,
                  const std::vector<std::string_view>& allowed, std::string_view owner) {
    Note(path, node);
    if (!node.IsDefined() || node.IsNull()) return Status::Ok();
    std::string allowed_text;
    for (std::string_view k : allowed) {
      if (!allowed_text.empty()) allowed_text += ", ";
      allowed_text += k;
    }
    if (!node.IsMap()) {
      return Error(path, "expected a map with keys " + allowed_text + "; got " + Describe(node));
    }
    std::vector<std::string> seen;
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) {
        return Error(path, "map keys must be names, got " + Describe(kv.first));
      }
      const std::string& key = kv.first.Scalar();
      const std::string key_path = ChildPath(path, key);
      Note(key_path, kv.first);
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string where = owner.empty() ? std::string() : " for " + std::string(owner);
        return Error(key_path, "unknown key (allowed" + where + ": " + allowed_text + ")");
      }
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
        return Error(key_path, "duplicate key");
      }
      seen.push_back(key);
    }
    return Status::Ok();
  }

  template <typename T>
  Status Convert(const YAML::Node& n, const std::string& path, T* out, Unit unit = Unit::kCount);

  template <typename T>
  Status ParseStruct(const YAML::Node& n, const std::string& path, std::string_view owner, T* out);

  Status ParseOps(const YAML::Node& n, const std::string& path, std::vector<OpSpec>* out);

  // One op `name` with `params`; its keys are named `path.name.key` (`name.key` when
  // `path` is empty).
  template <size_t I = 0>
  Status ParseOp(std::string_view name, const YAML::Node& params, const std::string& path,
                 OpSpec* out);

 private:

  Result<std::string> ScalarText(const YAML::Node& n, const std::string& path,
                                 std::string_view expected) {
    if (!n.IsScalar()) {
      return Error(path, "expected " + std::string(expected) + ", got " + Describe(n));
    }
    return n.Scalar();
  }

  std::vector<std::pair<std::string, std::string>> overrides_;  // (key path, text)
  std::map<std::string, int> lines_;                            // key path -> line
  // Key path -> the key that set it: a crop's width and height -> its size.
  std::map<std::string, std::string> aliases_;
};

template <typename T>
Status Reader::ParseStruct(const YAML::Node& n, const std::string& path, std::string_view owner,
                           T* out) {
  std::vector<std::string_view> keys;
  Fields(*out, [&](std::string_view key, auto&, Unit = {}) { keys.push_back(key); });
  if constexpr (kHasSizeShorthand<T>) keys.push_back("size");
  HR_RETURN_IF_ERROR(CheckMap(n, path, keys, owner));
  if (!n.IsDefined() || n.IsNull()) return Status::Ok();
  Status status;
  Fields(*out, [&](std::string_view key, auto& field, Unit unit = Unit::kCount) {
    const YAML::Node child = n[std::string(key)];
    if (!status.ok() || !child.IsDefined()) return;
    status = Convert(child, ChildPath(path, key), &field, unit);
  });
  HR_RETURN_IF_ERROR(status);
  if constexpr (kHasSizeShorthand<T>) {
    const YAML::Node size = n["size"];
    if (size.IsDefined()) {
      const std::string size_path = ChildPath(path, "size");
      if (n["width"].IsDefined() || n["height"].IsDefined()) {
        return Error(size_path, "give size, or width and height, not both");
      }
      HR_RETURN_IF_ERROR(Convert(size, size_path, &out->width));
      out->height = out->width;
      aliases_[ChildPath(path, "width")] = size_path;
      aliases_[ChildPath(path, "height")] = size_path;
    }
  }
  return Status::Ok();
}

template <typename T>
Status Reader::Convert(const YAML::Node& n, const std::string& path, T* out, Unit unit) {
  Note(path, n);
  if constexpr (HasFields<T>) {
    return ParseStruct(n, path, path, out);
  } else if constexpr (IsOptional<T>::value) {
    if (n.IsNull()) {  // `key: null` (or `~`): no value
      out->reset();
      return Status::Ok();
    }
    typename T::value_type value{};
    HR_RETURN_IF_ERROR(Convert(n, path, &value, unit));
    *out = value;
    return Status::Ok();
  } else if constexpr (std::is_same_v<T, std::vector<OpSpec>>) {
    return ParseOps(n, path, out);
  } else if constexpr (IsStructList<T>::value) {
    if (n.IsNull()) {
      out->clear();
      return Status::Ok();
    }
    if (!n.IsSequence()) return Error(path, "expected a list, got " + Describe(n));
    out->assign(n.size(), typename T::value_type{});
    for (size_t i = 0; i < n.size(); ++i) {
      HR_RETURN_IF_ERROR(Convert(n[i], ChildPath(path, std::to_string(i)), &(*out)[i]));
    }
    return Status::Ok();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (n.IsNull()) {
      out->clear();
      return Status::Ok();
    }
    HR_ASSIGN_OR_RETURN(*out, ScalarText(n, path, "a string"));
    return Status::Ok();
  } else if constexpr (std::is_same_v<T, bool>) {
    HR_ASSIGN_OR_RETURN(std::string text, ScalarText(n, path, "true or false"));
    for (std::string_view yes : {"true", "yes", "on"}) {
      if (EqualsIgnoreCase(text, yes)) {
        *out = true;
        return Status::Ok();
      }
    }
    for (std::string_view no : {"false", "no", "off"}) {
      if (EqualsIgnoreCase(text, no)) {
        *out = false;
        return Status::Ok();
      }
    }
    return Error(path, "expected true or false, got " + Quote(text));
  } else if constexpr (std::is_integral_v<T>) {
    HR_ASSIGN_OR_RETURN(std::string text, ScalarText(n, path, "an integer"));
    if (unit == Unit::kBytes) {
      Result<int64_t> bytes = ParseByteSize(text);
      if (!bytes.ok()) return Error(path, bytes.status().message());
      *out = static_cast<T>(*bytes);
      return Status::Ok();
    }
    std::string_view digits = TrimWhitespace(text);
    if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
    T value{};
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec == std::errc::result_out_of_range) {
      return Error(path, Quote(text) + " is out of range (" +
                             std::to_string(std::numeric_limits<T>::min()) + " to " +
                             std::to_string(std::numeric_limits<T>::max()) + ")");
    }
    if (ec != std::errc() || ptr != digits.data() + digits.size() || digits.empty()) {
      const char* what = std::is_signed_v<T> ? "an integer" : "a non-negative integer";
      return Error(path, "expected " + std::string(what) + ", got " + Quote(text));
    }
    *out = value;
    return Status::Ok();
  } else if constexpr (std::is_floating_point_v<T>) {
    HR_ASSIGN_OR_RETURN(std::string text, ScalarText(n, path, "a number"));
    std::string_view digits = TrimWhitespace(text);
    if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
    T value{};
    // Parsed as T itself (not via double) so that a float reads back bit-exactly.
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec != std::errc() || ptr != digits.data() + digits.size() || digits.empty() ||
        !std::isfinite(value)) {
      return Error(path, "expected a finite number, got " + Quote(text));
    }
    *out = value;
    return Status::Ok();
  } else if constexpr (IsStdArray<T>::value) {
    constexpr size_t kN = std::tuple_size_v<T>;
    if (!n.IsSequence() || n.size() != kN) {
      return Error(path,
                   "expected a list of " + std::to_string(kN) + " numbers, got " +
                       (n.IsSequence() ? "a list of " + std::to_string(n.size()) : Describe(n)));
    }
    for (size_t i = 0; i < kN; ++i) {
      HR_RETURN_IF_ERROR(Convert(n[i], ChildPath(path, std::to_string(i)), &(*out)[i]));
    }
    return Status::Ok();
  } else if constexpr (std::is_enum_v<T>) {
    const auto table = TableOf(T{});
    HR_ASSIGN_OR_RETURN(std::string text, ScalarText(n, path, "one of " + AllowedNames(table)));
    for (const auto& [value, name] : table) {
      if (text == name) {
        *out = value;
        return Status::Ok();
      }
    }
    return Error(path, "unknown value " + Quote(text) + " (allowed: " + AllowedNames(table) + ")");
  } else {
    static_assert(sizeof(T) == 0, "no YAML conversion for this field type");
  }
}

// "image.decode, image.resize, ...": every op, in the variant's order.
template <size_t... I>
std::string OpNamesOf(std::index_sequence<I...>) {
  std::string out;
  ((out += (I == 0 ? "" : ", "), out += OpTypeOf<std::variant_alternative_t<I, OpSpec>>::kName),
   ...);
  return out;
}
const std::string& AllOpNames() {
  // Without UserOpSpec, the last alternative: it cannot be written in a config.
  static_assert(std::is_same_v<std::variant_alternative_t<std::variant_size_v<OpSpec> - 1, OpSpec>,
                               UserOpSpec>);
  static const std::string names =
      OpNamesOf(std::make_index_sequence<std::variant_size_v<OpSpec> - 1>{});
  return names;
}

Status Reader::ParseOps(const YAML::Node& n, const std::string& path, std::vector<OpSpec>* out) {
  out->clear();
  if (n.IsNull()) return Status::Ok();
  if (!n.IsSequence()) {
    return Error(path, "expected a list of ops (- op.name: {params}), got " + Describe(n));
  }
  for (size_t i = 0; i < n.size(); ++i) {
    const YAML::Node element = n[i];
    const std::string element_path = ChildPath(path, std::to_string(i));
    Note(element_path, element);
    std::string name;
    YAML::Node params;
    if (element.IsScalar()) {
      name = element.Scalar();
    } else if (element.IsMap() && element.size() == 1) {
      const auto kv = *element.begin();
      if (!kv.first.IsScalar()) return Error(element_path, "expected an op name as key");
      name = kv.first.Scalar();
      params.reset(kv.second);
    } else {
      return Error(element_path,
                   "expected one op: `- op.name` or `- op.name: {params}` (a map with one "
                   "key), got " +
                       (element.IsMap() ? "a map with " + std::to_string(element.size()) + " keys"
                                        : Describe(element)));
    }
    OpSpec op;
    HR_RETURN_IF_ERROR(ParseOp(name, params, element_path, &op));
    out->push_back(std::move(op));
  }
  return Status::Ok();
}

template <size_t I>
Status Reader::ParseOp(std::string_view name, const YAML::Node& params, const std::string& path,
                       OpSpec* out) {
  if constexpr (I < std::variant_size_v<OpSpec>) {
    using T = std::variant_alternative_t<I, OpSpec>;
    if (name != OpTypeOf<T>::kName) return ParseOp<I + 1>(name, params, path, out);
    if constexpr (std::is_same_v<T, UserOpSpec>) {
      return Error(path, "a user op (" + Quote(name) +
                             ") is code: add it from Python "
                             "(headrace.ops.map) or C++, not from a config (allowed: " +
                             AllOpNames() + ")");
    }
    T spec;
    const std::string op_path = path.empty() ? std::string(name) : path + "." + std::string(name);
    HR_RETURN_IF_ERROR(ParseStruct(params, op_path, name, &spec));
    *out = std::move(spec);
    return Status::Ok();
  } else {
    return Error(path, "unknown op " + Quote(name) + " (allowed: " + AllOpNames() + ")");
  }
}

// --- overrides -------------------------------------------------------------------------

// "ops[1].image.resize.shorter_side" -> ops, 1, image, resize, shorter_side.
Result<std::vector<std::string>> SplitKey(std::string_view key) {
  std::vector<std::string> tokens;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    std::string_view piece = key.substr(start, dot == std::string_view::npos ? dot : dot - start);
    // Peel "[n]" suffixes.
    const size_t bracket = piece.find('[');
    std::string_view name = piece.substr(0, bracket);
    if (!name.empty()) tokens.emplace_back(name);
    std::string_view rest = bracket == std::string_view::npos ? "" : piece.substr(bracket);
    while (!rest.empty()) {
      const size_t close = rest.find(']');
      if (rest.front() != '[' || close == std::string_view::npos ||
          !IsIndex(rest.substr(1, close - 1))) {
        return Status::InvalidArgument("bad index in " + Quote(piece));
      }
      tokens.emplace_back(rest.substr(1, close - 1));
      rest.remove_prefix(close + 1);
    }
    if (name.empty() && bracket != 0) return Status::InvalidArgument("empty key segment");
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return tokens;
}

std::string JoinPath(std::span<const std::string> tokens) {
  std::string out;
  for (const std::string& t : tokens) out = ChildPath(out, t);
  return out;
}

bool StartsWith(std::span<const std::string> tokens, const std::vector<std::string>& prefix) {
  if (tokens.size() < prefix.size()) return false;
  return std::equal(prefix.begin(), prefix.end(), tokens.begin());
}

// Sets `value` at `tokens` below `node` (whose path is `path`), creating maps (or a list,
// before an index) on the way. Errors are returned as bare reasons; the caller names the
// override.
Status SetIn(YAML::Node node, std::span<const std::string> tokens, const YAML::Node& value,
             const std::string& path) {
  const std::string& token = tokens[0];
  const bool last = tokens.size() == 1;
  const std::string here = ChildPath(path, token);
  if (!node.IsDefined() || node.IsNull() || node.IsMap()) {
    if (IsIndex(token) && node.IsDefined() && node.IsMap()) {
      return Status::InvalidArgument((path.empty() ? "the top level" : Quote(path)) +
                                     " is a map, not a list: no index " + token);
    }
    if (last) {
      node[token] = value;
      return Status::Ok();
    }
    YAML::Node child = node[token];
    if ((!child.IsDefined() || child.IsNull()) && IsIndex(tokens[1])) {
      child = YAML::Node(YAML::NodeType::Sequence);
    }
    return SetIn(child, tokens.subspan(1), value, here);
  }
  if (node.IsSequence()) {
    if (!IsIndex(token)) {
      return Status::InvalidArgument(Quote(path) + " is a list: expected an index, got " +
                                     Quote(token));
    }
    const size_t index = std::stoul(token);
    const size_t size = node.size();
    if (index > size || (index == size && !last)) {
      return Status::InvalidArgument(Quote(path) + " has " + std::to_string(size) +
                                     " items: no index " + token +
                                     (index == size ? " (set it whole to append)" : ""));
    }
    if (last) {
      if (index == size) {
        node.push_back(value);
      } else {
        YAML::Node element = node[index];
        element = value;
      }
      return Status::Ok();
    }
    YAML::Node element = node[index];
    // An op element, `name` or `{name: params}`, is addressed as N.name.param where the
    // name itself has dots.
    std::string name;
    if (element.IsScalar()) {
      name = element.Scalar();
    } else if (element.IsMap() && element.size() == 1 && element.begin()->first.IsScalar()) {
      name = element.begin()->first.Scalar();
    }
    if (!name.empty()) {
      HR_ASSIGN_OR_RETURN(std::vector<std::string> name_tokens, SplitKey(name));
      const auto rest = tokens.subspan(1);
      if (!StartsWith(rest, name_tokens)) {
        return Status::InvalidArgument(here + " is " + Quote(name) + ", not " +
                                       Quote(JoinPath(rest)));
      }
      if (element.IsScalar()) {
        YAML::Node as_map(YAML::NodeType::Map);
        as_map[name] = YAML::Node(YAML::NodeType::Null);
        element = as_map;
      }
      const auto params = rest.subspan(name_tokens.size());
      if (params.empty()) {
        element[name] = value;
        return Status::Ok();
      }
      return SetIn(element[name], params, value, here + "." + name);
    }
    return SetIn(element, tokens.subspan(1), value, here);
  }
  return Status::InvalidArgument(Quote(path) + " is a single value, not a map: cannot set " +
                                 Quote(token) + " in it");
}

// More parts than any key of the schema has (the deepest, ops.N.image.normalize.mean.0,
// has 6). SetIn recurses once per part: an unbounded key would overflow the stack.
constexpr size_t kMaxKeyParts = 32;

Status ApplyOverride(YAML::Node& root, const std::string& text, Reader& reader) {
  const auto fail = [&](std::string_view why) {
    return Status::InvalidArgument("override " + Quote(text) + ": " + std::string(why));
  };
  const size_t eq = text.find('=');
  if (eq == std::string::npos) return fail("expected key.path=value");
  const std::string_view key = TrimWhitespace(std::string_view(text).substr(0, eq));
  const std::string_view value_text = TrimWhitespace(std::string_view(text).substr(eq + 1));
  if (key.empty()) return fail("empty key");
  Result<std::vector<std::string>> tokens = SplitKey(key);
  if (!tokens.ok()) return fail(tokens.status().message());
  if (tokens->size() > kMaxKeyParts) {
    return Status::InvalidArgument("override " + Quote(key.substr(0, 64)) + "...: the key has " +
                                   std::to_string(tokens->size()) + " parts, at most " +
                                   std::to_string(kMaxKeyParts) + " are allowed");
  }

  YAML::Node value;
  if (value_text.empty()) {
    value = YAML::Node(std::string());
  } else {
    try {
      value = YAML::Load(std::string(value_text));
    } catch (const YAML::Exception& e) {
      return fail("value is not valid YAML: " + e.msg);
    }
  }
  if (!root.IsDefined() || root.IsNull()) root.reset(YAML::Node(YAML::NodeType::Map));
  if (!root.IsMap()) return fail("the config is not a map");
  if (Status set = SetIn(root, *tokens, value, ""); !set.ok()) return fail(set.message());
  reader.AddOverride(JoinPath(*tokens), text);
  return Status::Ok();
}

// --- writing ---------------------------------------------------------------------------

template <typename T>
void Emit(YAML::Emitter& out, const T& value, Unit unit, bool flow);

template <typename T>
void EmitStruct(YAML::Emitter& out, const T& s, bool flow) {
  if (flow) out << YAML::Flow;
  out << YAML::BeginMap;
  Fields(s, [&](std::string_view key, const auto& field, Unit unit = Unit::kCount) {
    out << YAML::Key << std::string(key) << YAML::Value;
    Emit(out, field, unit, flow);
  });
  out << YAML::EndMap;
}

template <typename T>
void Emit(YAML::Emitter& out, const T& value, Unit unit, bool flow) {
  if constexpr (HasFields<T>) {
    EmitStruct(out, value, flow);
  } else if constexpr (IsOptional<T>::value) {
    if (value) {
      Emit(out, *value, unit, flow);
    } else {
      out << YAML::Null;
    }
  } else if constexpr (std::is_same_v<T, std::vector<OpSpec>>) {
    out << YAML::BeginSeq;
    for (const OpSpec& op : value) {
      // The op type's config name: a code op's is the placeholder "user".
      VisitOpType(op, [&]<typename OpType>(const auto& spec) {
        out << YAML::BeginMap << YAML::Key << std::string(OpType::kName) << YAML::Value;
        EmitStruct(out, spec, /*flow=*/true);
      });
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  } else if constexpr (IsStructList<T>::value) {
    out << YAML::BeginSeq;
    for (const auto& item : value) EmitStruct(out, item, /*flow=*/true);
    out << YAML::EndSeq;
  } else if constexpr (std::is_same_v<T, std::string>) {
    out << YAML::DoubleQuoted << value;
  } else if constexpr (std::is_same_v<T, bool>) {
    out << (value ? "true" : "false");
  } else if constexpr (std::is_integral_v<T>) {
    out << std::to_string(value);
  } else if constexpr (std::is_same_v<T, float>) {
    out << FormatFloat(value);
  } else if constexpr (std::is_floating_point_v<T>) {
    out << FormatDouble(value);
  } else if constexpr (IsStdArray<T>::value) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& v : value) Emit(out, v, unit, true);
    out << YAML::EndSeq;
  } else if constexpr (std::is_enum_v<T>) {
    const std::string_view name = EnumName(value);
    // An out-of-range value (from C++) is written so that parsing it names the problem.
    out << (name.empty() ? "invalid_" + std::to_string(static_cast<int>(value))
                         : std::string(name));
  } else {
    static_assert(sizeof(T) == 0, "no YAML conversion for this field type");
  }
}

// --- validation ------------------------------------------------------------------------

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
  return AtLeast<int64_t>("storage.max_object_bytes", s.max_object_bytes, 1);
}

}  // namespace

// --- public ----------------------------------------------------------------------------

Result<int64_t> ParseByteSize(std::string_view text) {
  const auto fail = [&] {
    return Status::InvalidArgument(
        "expected a byte size: an integer or a number with a unit (B, KB, MB, GB, TB, KiB, "
        "MiB, GiB, TiB), got " +
        Quote(text));
  };
  std::string_view s = TrimWhitespace(text);
  if (!s.empty() && s.front() == '-') {
    return Status::InvalidArgument("a byte size cannot be negative, got " + Quote(text));
  }
  size_t number_end = 0;
  while (number_end < s.size() &&
         ((s[number_end] >= '0' && s[number_end] <= '9') || s[number_end] == '.')) {
    ++number_end;
  }
  const std::string_view number = s.substr(0, number_end);
  const std::string_view unit = TrimWhitespace(s.substr(number_end));
  if (number.empty() || number.front() == '.' || number.back() == '.') return fail();
  static constexpr std::pair<std::string_view, int64_t> kUnits[] = {
      {"", 1},
      {"B", 1},
      {"KB", 1'000},
      {"MB", 1'000'000},
      {"GB", 1'000'000'000},
      {"TB", 1'000'000'000'000},
      {"KiB", int64_t{1} << 10},
      {"MiB", int64_t{1} << 20},
      {"GiB", int64_t{1} << 30},
      {"TiB", int64_t{1} << 40},
  };
  int64_t multiplier = 0;
  for (const auto& [name, m] : kUnits) {
    if (EqualsIgnoreCase(unit, name)) multiplier = m;
  }
  if (multiplier == 0) return fail();
  const auto too_big = [&] {
    return Status::InvalidArgument("byte size " + Quote(text) + " is too large (max " +
                                   std::to_string(std::numeric_limits<int64_t>::max()) + ")");
  };
  if (number.find('.') == std::string_view::npos) {
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (ec == std::errc::result_out_of_range) return too_big();
    if (ec != std::errc() || ptr != number.data() + number.size()) return fail();
    int64_t bytes = 0;
    if (__builtin_mul_overflow(value, multiplier, &bytes)) return too_big();
    return bytes;
  }
  double value = 0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || ptr != number.data() + number.size()) return fail();
  const long double bytes = static_cast<long double>(value) * multiplier;
  if (bytes >= 9.2e18L) return too_big();
  return static_cast<int64_t>(std::llround(bytes));
}

namespace {

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
  if (src.cache_bytes > 0 && src.cache_bytes < src.block_bytes) {
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
  }
  return Status::Ok();
}

}  // namespace

Status ValidatePipelineSpec(const PipelineSpec& spec) {
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
  if (src.records != ManifestRecordsForm::kAuto && src.manifest.empty()) {
    return Invalid("source.records", "applies to a JSONL manifest (source.manifest) only; "
                                     "shards, Parquet and materializations keep their own index");
  }
  HR_RETURN_IF_ERROR(NonEmpty("source.id_field", src.id_field, "a JSON key"));
  HR_RETURN_IF_ERROR(NonEmpty("source.image_field", src.image_field, "a JSON key"));
  HR_RETURN_IF_ERROR(NonEmpty("source.conversations_field", src.conversations_field, "a JSON key"));
  HR_RETURN_IF_ERROR(NonEmpty("source.role_field", src.role_field, "a JSON key"));
  HR_RETURN_IF_ERROR(NonEmpty("source.text_field", src.text_field, "a JSON key"));
  HR_RETURN_IF_ERROR(ValidateSourceFields(src));
  if (spec.epochs) HR_RETURN_IF_ERROR(InRange<int64_t>("epochs", *spec.epochs, 1, kMaxEpochs));
  HR_RETURN_IF_ERROR(InRange<int64_t>("batch.size", spec.batch.size, 1, kMaxBatchSize));
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
  if (exec.io_budget_bytes > spec.memory.budget_bytes) {
    return Invalid("execution.io_budget_bytes", "must not exceed memory.budget_bytes (" +
                                                    std::to_string(spec.memory.budget_bytes) + ")" +
                                                    Got(exec.io_budget_bytes));
  }
  const ErrorSpec& errors = spec.errors;
  HR_RETURN_IF_ERROR(KnownEnum("errors.policy", errors.policy));
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

Result<PipelineSpec> ParsePipelineConfig(std::string_view yaml_text,
                                         const std::vector<std::string>& overrides) {
  // yaml-cpp reports through exceptions; they stop here.
  try {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(yaml_text));
    } catch (const YAML::ParserException& e) {
      return Status::InvalidArgument("YAML syntax error at line " +
                                     std::to_string(e.mark.line + 1) + ", column " +
                                     std::to_string(e.mark.column + 1) + ": " + e.msg);
    }
    Reader reader;
    for (const std::string& o : overrides) HR_RETURN_IF_ERROR(ApplyOverride(root, o, reader));
    if (const YAML::Node& r = root; r.IsMap() && r["batch_ops"].IsDefined()) {
      return Status::InvalidArgument(
          "batch_ops: batch ops are code: add them from Python (headrace.ops.map_batch) or "
          "C++ (PipelineSpec::batch_ops), not from a config");
    }
    PipelineSpec spec;
    HR_RETURN_IF_ERROR(reader.ParseStruct(root, "", "", &spec));
    if (Status valid = ValidatePipelineSpec(spec); !valid.ok()) {
      // Validation names the key first ("batch.size: ..."); add where it was set.
      const std::string& m = valid.message();
      return Status::InvalidArgument(m + reader.Where(m.substr(0, m.find(": "))));
    }
    return spec;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("config: ") + e.what());
  }
}

Result<PipelineSpec> LoadPipelineConfig(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return Status::NotFound("no such config file: " + path);
    return Status::IoError("cannot open config " + path + ": " + std::strerror(err));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status::IoError("cannot stat config " + path + ": " + std::strerror(errno));
  }
  // A directory, FIFO or device (/dev/zero: endless) is a wrong path, like a missing file.
  if (!S_ISREG(st.st_mode)) {
    const char* what = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                                              : "not a regular file";
    return Status::InvalidArgument("config " + path + " is " + what +
                                   "; expected a regular YAML file");
  }
  const auto too_large = [&] {
    return Status::InvalidArgument("config " + path + " is larger than " +
                                   std::to_string(kMaxConfigBytes >> 20) +
                                   " MiB; expected a YAML pipeline config");
  };
  if (st.st_size > kMaxConfigBytes) return too_large();
  // Read at most one byte past the limit: the file may grow while we read it.
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("cannot read config " + path + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (static_cast<int64_t>(text.size()) > kMaxConfigBytes) return too_large();
  }
  Result<PipelineSpec> spec = ParsePipelineConfig(text, overrides);
  if (!spec.ok()) return spec.status().WithContext(path);
  return spec;
}

Result<OpSpec> ParseOpConfig(std::string_view name, std::string_view params_yaml) {
  try {
    YAML::Node params;
    try {
      params = YAML::Load(std::string(params_yaml));
    } catch (const YAML::ParserException& e) {
      return Status::InvalidArgument(std::string(name) + ": YAML syntax error: " + e.msg);
    }
    Reader reader;
    OpSpec op;
    HR_RETURN_IF_ERROR(reader.ParseOp(name, params, "", &op));
    return op;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string(name) + ": " + e.what());
  }
}

std::string PipelineSpecToYaml(const PipelineSpec& spec) {
  YAML::Emitter out;
  EmitStruct(out, spec, /*flow=*/false);
  std::string text = out.c_str();
  text += '\n';
  if (!spec.batch_ops.empty()) {
    // Code, like user ops: written by name as placeholders (so that the text, and the
    // fingerprints made from it, show them), which the parser refuses.
    YAML::Emitter ops;
    ops << YAML::BeginMap << YAML::Key << "batch_ops" << YAML::Value << YAML::BeginSeq;
    for (const BatchOpSpec& op : spec.batch_ops) {
      ops << YAML::BeginMap << YAML::Key << "user" << YAML::Value << YAML::Flow << YAML::BeginMap
          << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << op.name << YAML::EndMap
          << YAML::EndMap;
    }
    ops << YAML::EndSeq << YAML::EndMap;
    text += ops.c_str();
    text += '\n';
  }
  return text;
}

}  // namespace headrace
