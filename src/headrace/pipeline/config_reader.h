// Reading a config: the YAML tree to a PipelineSpec through the schema
// (config_schema.h), and the --set overrides applied to the tree before it is read.
// Internal to pipeline/: the API is config.h.
#pragma once

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/core/strings.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/config_schema.h"

namespace headrace::config_internal {

// "nothing (null)", "a map", "a list" or the scalar quoted: what a node is, for messages.
std::string Describe(const YAML::Node& n);

// "image.decode, image.resize, ...": every op a config may name, in the op list's order.
const std::string& AllOpNames();

// Parses a YAML tree into a spec, remembering where each key came from (a line of the
// file, or an override) so that errors, validation's included, can say so.
class Reader {
 public:
  void AddOverride(std::string path, std::string text) {
    overrides_.emplace_back(std::move(path), std::move(text));
  }

  // " (set by override 'k=v')", " (line 7)" or "".
  std::string Where(const std::string& key) const;

  Status Error(const std::string& path, std::string_view what) const;

  void Note(const std::string& path, const YAML::Node& node);

  // A map (or null: no keys) whose keys are all in `allowed`, each once.
  Status CheckMap(const YAML::Node& node, const std::string& path,
                  const std::vector<std::string_view>& allowed, std::string_view owner);

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

  // The ops of each blend entry read so far (`source.mix[i].ops`), by the entry's path
  // ("source.mix[1]"): MixEntrySpec (formats/) holds no ops, PipelineSpec::mix_ops does.
  const std::map<std::string, std::vector<OpSpec>>& mix_ops() const { return mix_ops_; }

 private:
  // A string, a bool, a number or an enum's name: Convert's leaves.
  template <typename T>
  Status ConvertScalar(const YAML::Node& n, const std::string& path, T* out, Unit unit);

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
  std::map<std::string, std::vector<OpSpec>> mix_ops_;
};

// Applies one `key.path=value` override to `root` (config_overrides.cc); returns the
// key's path ("ops[1].image.resize.shorter_side"), for Reader::AddOverride.
Result<std::string> ApplyOverride(YAML::Node& root, const std::string& text);

template <typename T>
Status Reader::ParseStruct(const YAML::Node& n, const std::string& path, std::string_view owner,
                           T* out) {
  std::vector<std::string_view> keys;
  Fields(*out, [&](std::string_view key, auto&, Unit = {}) { keys.push_back(key); });
  if constexpr (kHasSizeShorthand<T>) keys.push_back("size");
  if constexpr (std::is_same_v<T, MixEntrySpec>) keys.push_back("ops");  // the entry's own
  HR_RETURN_IF_ERROR(CheckMap(n, path, keys, owner));
  if (!n.IsDefined() || n.IsNull()) return Status::Ok();
  if constexpr (std::is_same_v<T, MixEntrySpec>) {
    if (const YAML::Node ops = n["ops"]; ops.IsDefined()) {
      HR_RETURN_IF_ERROR(ParseOps(ops, ChildPath(path, "ops"), &mix_ops_[path]));
    }
  }
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
  } else {
    return ConvertScalar(n, path, out, unit);
  }
}

template <typename T>
Status Reader::ConvertScalar(const YAML::Node& n, const std::string& path, T* out,
                             Unit unit) {
  if constexpr (std::is_same_v<T, std::string>) {
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

}  // namespace headrace::config_internal
