// PipelineSpec from Python: parsed from YAML text or a file (the Python builder writes
// its arguments as a JSON document, which is YAML), so that every key is validated and
// named by the same code as `headrace run`. User ops and batch ops are added afterwards
// (user_op.cc, batch_op.cc); the canonical YAML names them, so fingerprints see them.
//
// The op schema (`_op_schema`) comes from the op list (ops/all_ops.h): each op's name,
// doc line and parameters (key, type, default) from its Fields, so that headrace.ops
// builds a function per op without naming any.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <type_traits>

#include "common.h"
#include "headrace/ops/all_ops.h"
#include "headrace/ops/schema.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/plan.h"

namespace headrace::python {
namespace {

template <typename T>
struct IsArray : std::false_type {};
template <typename T, size_t N>
struct IsArray<std::array<T, N>> : std::true_type {};
template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};

// A parameter's type as the schema names it, and its default as a Python value.
template <typename T>
std::string TypeName() {
  if constexpr (std::is_same_v<T, bool>) {
    return "bool";
  } else if constexpr (std::is_integral_v<T>) {
    return "int";
  } else if constexpr (std::is_floating_point_v<T>) {
    return "float";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "str";
  } else if constexpr (IsArray<T>::value) {
    return "list[" + TypeName<typename T::value_type>() + ", " +
           std::to_string(std::tuple_size_v<T>) + "]";
  } else if constexpr (IsOptional<T>::value) {  // unset: None (the op says what it means)
    return TypeName<typename T::value_type>() + " | None";
  } else if constexpr (std::is_enum_v<T>) {
    return "enum";
  } else {
    static_assert(sizeof(T) == 0, "no schema type for this parameter type");
  }
}

template <typename T>
nb::object ToPython(const T& value) {
  if constexpr (IsOptional<T>::value) {
    return value ? ToPython(*value) : nb::none();
  } else if constexpr (IsArray<T>::value) {
    nb::list out;
    for (const auto& v : value) out.append(ToPython(v));
    return out;
  } else if constexpr (std::is_enum_v<T>) {
    return nb::str(std::string(EnumName(value)).c_str());
  } else if constexpr (std::is_same_v<T, float>) {
    // The shortest text that reads back as this float (0.485, not 0.48500001430511475).
    char buf[32];
    const auto end = std::to_chars(buf, buf + sizeof buf, value).ptr;
    return nb::float_(std::strtod(std::string(buf, end).c_str(), nullptr));
  } else {
    return nb::cast(value);
  }
}

// [{"name": "image.resize", "doc": ..., "params": [(key, type, default, choices)]}], in
// the list's order. `size` (ops with kSizeKey) comes first, with no default.
nb::list OpSchema() {
  nb::list ops;
  AllOps::ForEach([&]<typename Op>() {
    const typename Op::Spec spec{};
    nb::list params;
    if constexpr (requires { Op::kSizeKey; }) {
      params.append(nb::make_tuple("size", "int", nb::none(), nb::none()));
    }
    Op::Fields(spec, [&](std::string_view key, const auto& value) {
      using T = std::remove_cvref_t<decltype(value)>;
      nb::object choices = nb::none();
      if constexpr (std::is_enum_v<T>) {
        nb::list names;
        for (const auto& [v, name] : TableOf(value)) names.append(std::string(name));
        choices = names;
      }
      params.append(nb::make_tuple(std::string(key), TypeName<T>(), ToPython(value), choices));
    });
    nb::dict op;
    op["name"] = std::string(Op::kName);
    op["doc"] = std::string(Op::kDoc);
    op["params"] = params;
    ops.append(op);
  });
  return ops;
}

// The spec without what cannot change a batch's content (threads, prefetch, budgets,
// error policy, the simulated trainer, how the manifest's records are held): the basis of a state dict's fingerprint.
// `elastic`: also what an elastic resume may change (the batch size, a blend's weights:
// the rest of the epoch is re-cut, each entry continuing where it was).
std::string ContentYaml(const PipelineSpec& spec, bool elastic) {
  PipelineSpec content = spec;
  if (elastic) {
    content.batch.size = 1;
    for (MixEntrySpec& e : content.source.mix) e.weight = 1;
  }
  content.execution = {};
  content.prefetch = {};
  content.memory = {};
  content.errors = {};
  content.trainer = {};
  content.source.records = ManifestRecordsForm::kAuto;  // how records are held, not what
  content.epochs = std::nullopt;  // the run's length: where a run stops, not what it holds
  return PipelineSpecToYaml(content);
}

}  // namespace

void RegisterSpec(nb::module_& m) {
  m.def("_op_schema", &OpSchema);
  // Parses one op's params (YAML/JSON text) as a config would: unknown keys and bad types
  // raise the config's error.
  m.def("_check_op", [](const std::string& name, const std::string& params) {
    ThrowIfError(ParseOpConfig(name, params).status());
  });
  nb::class_<PipelineSpec>(m, "_Spec")
      .def_static(
          "from_file",
          [](const std::string& path, const std::vector<std::string>& overrides) {
            return ValueOrThrow(LoadPipelineConfig(path, overrides));
          },
          nb::arg("path"), nb::arg("overrides") = std::vector<std::string>{})
      .def_static(
          "from_text",
          [](const std::string& text, const std::vector<std::string>& overrides) {
            return ValueOrThrow(ParsePipelineConfig(text, overrides));
          },
          nb::arg("text"), nb::arg("overrides") = std::vector<std::string>{})
      .def("validate", [](const PipelineSpec& s) { ThrowIfError(ValidatePipelineSpec(s)); })
      .def("to_yaml", &PipelineSpecToYaml)
      .def("content_yaml", &ContentYaml, nb::arg("elastic") = false)
      .def_prop_ro("is_mix", [](const PipelineSpec& s) { return !s.source.mix.empty(); })
      .def_prop_ro("mix_weights",
                   [](const PipelineSpec& s) {
                     std::vector<double> w;
                     for (const MixEntrySpec& e : s.source.mix) w.push_back(e.weight);
                     return w;
                   })
      .def_prop_ro("manifest", [](const PipelineSpec& s) { return s.source.manifest; })
      .def_prop_ro("shards", [](const PipelineSpec& s) { return s.source.shards; })
      .def_prop_ro("parquet", [](const PipelineSpec& s) { return s.source.parquet; })
      .def_prop_ro("seed", [](const PipelineSpec& s) { return s.seed; })
      .def_prop_ro("size_index",
                   [](const PipelineSpec& s) {
                     return s.batch.balance.index.empty() ? s.batch.pack.index : s.batch.balance.index;
                   })
      .def_prop_ro("epochs", [](const PipelineSpec& s) { return s.epochs; })
      .def_prop_ro("shuffle", [](const PipelineSpec& s) { return s.shuffle; })
      .def_prop_ro("batch_size", [](const PipelineSpec& s) { return s.batch.size; })
      .def_prop_ro("drop_last", [](const PipelineSpec& s) { return s.batch.drop_last; })
      .def_prop_ro("pack_seq_len", [](const PipelineSpec& s) { return s.batch.pack.seq_len; })
      .def_prop_ro("pack_window", [](const PipelineSpec& s) { return s.batch.pack.window; })
      .def_prop_ro("regroups", [](const PipelineSpec& s) { return s.batch.regroups(); })
      .def_prop_ro("max_tokens", [](const PipelineSpec& s) { return s.batch.max_tokens; })
      .def_prop_ro("cpu_threads", [](const PipelineSpec& s) { return s.execution.cpu_threads; })
      .def_prop_ro("memory_budget_bytes",
                   [](const PipelineSpec& s) { return s.memory.budget_bytes; })
      .def_prop_ro("max_error_rate", [](const PipelineSpec& s) { return s.errors.max_error_rate; })
      .def_prop_ro("min_samples", [](const PipelineSpec& s) { return s.errors.min_samples; })
      .def_prop_ro("prefetch_depth", [](const PipelineSpec& s) { return s.prefetch.depth; })
      .def_prop_ro("op_names",
                   [](const PipelineSpec& s) {
                     std::vector<std::string> names;
                     for (const OpSpec& op : s.ops) names.emplace_back(OpSpecName(op));
                     return names;
                   })
      .def_prop_ro("batch_op_names", [](const PipelineSpec& s) {
        std::vector<std::string> names;
        for (const BatchOpSpec& op : s.batch_ops) names.push_back(op.name);
        return names;
      });
}

}  // namespace headrace::python
