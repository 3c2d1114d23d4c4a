// Writing a spec as canonical YAML (PipelineSpecToYaml): every key of the schema
// (config_schema.h), in its order, so that the text reads back to the same spec.
#include "headrace/pipeline/config.h"

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>
#include <vector>

#include "headrace/pipeline/config_schema.h"

namespace headrace {
namespace config_internal {
namespace {

// Emits a spec's keys through its Fields. `mix_ops` are PipelineSpec::mix_ops: each
// blend entry's own ops, written as the entry's `ops` key (MixEntrySpec holds none).
class Writer {
 public:
  Writer(YAML::Emitter& out, const std::vector<std::vector<OpSpec>>& mix_ops)
      : out_(out), mix_ops_(mix_ops) {}

  template <typename T>
  void EmitStruct(const T& s, bool flow) {
    if (flow) out_ << YAML::Flow;
    out_ << YAML::BeginMap;
    Fields(s, [&](std::string_view key, const auto& field, Unit unit = Unit::kCount) {
      out_ << YAML::Key << std::string(key) << YAML::Value;
      Emit(field, unit, flow);
    });
    if constexpr (std::is_same_v<T, MixEntrySpec>) {
      // Entries are written in order, once each.
      const size_t entry = entries_++;
      if (entry < mix_ops_.size() && !mix_ops_[entry].empty()) {
        out_ << YAML::Key << "ops" << YAML::Value;
        Emit(mix_ops_[entry], Unit::kCount, flow);
      }
    }
    out_ << YAML::EndMap;
  }

 private:
  template <typename T>
  void Emit(const T& value, Unit unit, bool flow) {
    YAML::Emitter& out = out_;
    if constexpr (HasFields<T>) {
      EmitStruct(value, flow);
    } else if constexpr (IsOptional<T>::value) {
      if (value) {
        Emit(*value, unit, flow);
      } else {
        out << YAML::Null;
      }
    } else if constexpr (std::is_same_v<T, std::vector<OpSpec>>) {
      out << YAML::BeginSeq;
      for (const OpSpec& op : value) {
        // The op type's config name: a code op's is the placeholder "user".
        VisitOpType(op, [&]<typename OpType>(const auto& spec) {
          out << YAML::BeginMap << YAML::Key << std::string(OpType::kName) << YAML::Value;
          EmitStruct(spec, /*flow=*/true);
        });
        out << YAML::EndMap;
      }
      out << YAML::EndSeq;
    } else if constexpr (IsStructList<T>::value) {
      out << YAML::BeginSeq;
      for (const auto& item : value) EmitStruct(item, /*flow=*/true);
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
      for (const auto& v : value) Emit(v, unit, true);
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

  YAML::Emitter& out_;
  const std::vector<std::vector<OpSpec>>& mix_ops_;
  size_t entries_ = 0;
};

}  // namespace
}  // namespace config_internal

std::string PipelineSpecToYaml(const PipelineSpec& spec) {
  YAML::Emitter out;
  config_internal::Writer(out, spec.mix_ops).EmitStruct(spec, /*flow=*/false);
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
