// Text from Python: the HF tokenizer.json reader of text.tokenize, for tests and
// benchmarks against the `tokenizers` package.
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "headrace/ops/text/hf_tokenizer.h"

namespace headrace::python {

void RegisterText(nb::module_& m) {
  nb::class_<HfTokenizer>(m, "HfTokenizer",
                          "A Hugging Face tokenizer.json (BPE) as text.tokenize reads it.")
      .def_static(
          "from_json",
          [](nb::bytes json, const std::string& source) {
            return ValueOrThrow(HfTokenizer::FromJson(
                std::string_view(static_cast<const char*>(json.data()), json.size()), source));
          },
          nb::arg("json"), nb::arg("source") = "tokenizer.json",
          "Parses the bytes of a tokenizer.json; ConfigError when it is not supported.")
      .def(
          "encode",
          [](const HfTokenizer& t, nb::bytes text, bool add_special_tokens) {
            std::vector<int> ids;
            const std::string_view view(static_cast<const char*>(text.data()), text.size());
            nb::gil_scoped_release nogil;
            t.Encode(view, add_special_tokens, &ids);
            return ids;
          },
          nb::arg("text"), nb::arg("add_special_tokens") = false,
          "The token ids of UTF-8 `text` (bytes; invalid sequences become U+FFFD).")
      .def(
          "encode_batch",
          [](const HfTokenizer& t, const std::vector<std::string>& texts,
             bool add_special_tokens) {
            std::vector<std::vector<int>> out(texts.size());
            {
              nb::gil_scoped_release nogil;
              for (size_t i = 0; i < texts.size(); ++i) {
                t.Encode(texts[i], add_special_tokens, &out[i]);
              }
            }
            return out;
          },
          nb::arg("texts"), nb::arg("add_special_tokens") = false,
          "encode() of each text, on this thread, without the GIL.")
      .def("token_to_id",
           [](const HfTokenizer& t, const std::string& token) { return t.TokenToId(token); })
      .def_prop_ro("vocab_size", &HfTokenizer::vocab_size);
}

}  // namespace headrace::python
