// Writing a spec as canonical YAML (PipelineSpecToYaml): every key of the schema
// (config_schema.h), in its order, so that the text reads back to the same spec.
#include "headrace/pipeline/config.h"

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>

#include "headrace/pipeline/config_schema.h"

namespace headrace {
namespace config_internal {
namespace {

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

}  // namespace
}  // namespace config_internal

std::string PipelineSpecToYaml(const PipelineSpec& spec) {
  YAML::Emitter out;
  config_internal::EmitStruct(out, spec, /*flow=*/false);
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
