// Size indexes from Python (exec/size_index.h, pipeline/prepared.h SizeIndexing): the
// build of headrace.build_size_index, and the parts of headrace.ray.build_size_index (each
// Ray task builds a range of samples; the driver joins the parts and writes the file).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "headrace/exec/size_index.h"
#include "headrace/pipeline/prepared.h"

namespace headrace::python {
namespace {

nb::dict Summary(const SizeIndex& index, const std::string& out) {
  nb::dict d;
  d["path"] = out;
  d["samples"] = index.size();
  d["untold"] = index.untold();
  d["fingerprint"] = index.fingerprint();
  return d;
}

}  // namespace

void RegisterSizeIndex(nb::module_& m) {
  nb::class_<SizeIndexing>(m, "_SizeIndexing")
      .def_static(
          "make",
          [](const PipelineSpec& spec) {
            std::optional<Result<SizeIndexing>> made;
            {
              nb::gil_scoped_release nogil;
              made.emplace(PrepareSizeIndexing(spec));
            }
            return ValueOrThrow(std::move(*made));
          },
          nb::arg("spec"),
          "The pipeline a size index is built from (without batch.balance) and the "
          "fingerprint the index is checked against")
      .def_ro("samples", &SizeIndexing::samples)
      .def_ro("fingerprint", &SizeIndexing::fingerprint)
      .def(
          "build",
          [](const SizeIndexing& indexing, int threads, int64_t begin, int64_t end) {
            std::optional<Result<SizeIndex>> built;
            {
              nb::gil_scoped_release nogil;
              built.emplace(indexing.Build(threads, begin, end));
            }
            const std::string bytes = ValueOrThrow(std::move(*built)).Serialize();
            return nb::bytes(bytes.data(), bytes.size());
          },
          nb::arg("threads"), nb::arg("begin") = 0, nb::arg("end") = -1,
          "The index of samples [begin, end) (end -1: to the last), as the file's bytes");
  m.def(
      "_write_size_index",
      [](const std::vector<nb::bytes>& parts, const std::string& out) {
        std::vector<std::string_view> views;
        for (const nb::bytes& b : parts) views.emplace_back(b.c_str(), b.size());
        std::optional<Result<SizeIndex>> joined;
        {
          nb::gil_scoped_release nogil;
          joined.emplace([&]() -> Result<SizeIndex> {
            std::vector<SizeIndex> indexes;
            for (size_t k = 0; k < views.size(); ++k) {
              HR_ASSIGN_OR_RETURN(SizeIndex part,
                                  SizeIndex::Parse(views[k], "size index part " + std::to_string(k)));
              indexes.push_back(std::move(part));
            }
            HR_ASSIGN_OR_RETURN(SizeIndex index, SizeIndex::Join(indexes));
            HR_RETURN_IF_ERROR(index.Write(out));
            return index;
          }());
        }
        return Summary(ValueOrThrow(std::move(*joined)), out);
      },
      nb::arg("parts"), nb::arg("out"),
      "Joins the parts (consecutive ranges of samples, in order) and writes the index to "
      "`out`: {path, samples, untold, fingerprint}");
}

}  // namespace headrace::python
