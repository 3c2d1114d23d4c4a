// PipelineSpec from Python: parsed from YAML text or a file (the Python builder writes
// its arguments as a JSON document, which is YAML), so that every key is validated and
// named by the same code as `headrace run`. User ops and batch ops are added afterwards
// (user_op.cc, batch_op.cc); the canonical YAML names them, so fingerprints see them.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "common.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/plan.h"

namespace headrace::python {
namespace {

// The spec without what cannot change a batch's content (threads, prefetch, budgets,
// error policy, the simulated trainer): the basis of a state dict's fingerprint.
std::string ContentYaml(const PipelineSpec& spec) {
  PipelineSpec content = spec;
  content.execution = {};
  content.prefetch = {};
  content.memory = {};
  content.errors = {};
  content.trainer = {};
  content.epochs = std::nullopt;  // the run's length: where a run stops, not what it holds
  return PipelineSpecToYaml(content);
}

}  // namespace

void RegisterSpec(nb::module_& m) {
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
      .def("content_yaml", &ContentYaml)
      .def_prop_ro("manifest", [](const PipelineSpec& s) { return s.source.manifest; })
      .def_prop_ro("shards", [](const PipelineSpec& s) { return s.source.shards; })
      .def_prop_ro("parquet", [](const PipelineSpec& s) { return s.source.parquet; })
      .def_prop_ro("seed", [](const PipelineSpec& s) { return s.seed; })
      .def_prop_ro("epochs", [](const PipelineSpec& s) { return s.epochs; })
      .def_prop_ro("shuffle", [](const PipelineSpec& s) { return s.shuffle; })
      .def_prop_ro("batch_size", [](const PipelineSpec& s) { return s.batch.size; })
      .def_prop_ro("drop_last", [](const PipelineSpec& s) { return s.batch.drop_last; })
      .def_prop_ro("cpu_threads", [](const PipelineSpec& s) { return s.execution.cpu_threads; })
      .def_prop_ro("memory_budget_bytes",
                   [](const PipelineSpec& s) { return s.memory.budget_bytes; })
      .def_prop_ro("op_names",
                   [](const PipelineSpec& s) {
                     std::vector<std::string> names;
                     for (const OpSpec& op : s.ops) names.push_back(OpSpecName(op));
                     return names;
                   })
      .def_prop_ro("batch_op_names", [](const PipelineSpec& s) {
        std::vector<std::string> names;
        for (const BatchOpSpec& op : s.batch_ops) names.push_back(op.name);
        return names;
      });
}

}  // namespace headrace::python
