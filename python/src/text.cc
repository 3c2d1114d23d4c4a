// Text from Python: the HF tokenizer.json reader of text.tokenize, for tests and
// benchmarks against the `tokenizers` package.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "headrace/ops/text/hf_chat.h"
#include "headrace/ops/text/hf_tokenizer.h"
#include "headrace/ops/text/tokenize.h"

namespace headrace::python {
namespace {

std::vector<Turn> ToTurns(const std::vector<std::pair<std::string, std::string>>& turns) {
  std::vector<Turn> out;
  for (const auto& [role, text] : turns) {
    Role r = Role::kUser;
    if (role == "system") {
      r = Role::kSystem;
    } else if (role == "assistant") {
      r = Role::kAssistant;
    } else if (role != "user") {
      throw nb::value_error(("unknown role '" + role + "' (system, user, assistant)").c_str());
    }
    out.push_back(Turn{r, text});
  }
  return out;
}

}  // namespace

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
          [](const HfTokenizer& t, nb::sequence items, bool add_special_tokens) {
            // Views into the Python objects (kept alive by `items`); one flat output.
            std::vector<std::string_view> texts;
            for (nb::handle item : items) {
              if (nb::isinstance<nb::bytes>(item)) {
                nb::bytes b = nb::borrow<nb::bytes>(item);
                texts.emplace_back(static_cast<const char*>(b.data()), b.size());
              } else {
                Py_ssize_t size = 0;
                const char* utf8 = PyUnicode_AsUTF8AndSize(item.ptr(), &size);
                if (utf8 == nullptr) throw nb::python_error();
                texts.emplace_back(utf8, static_cast<size_t>(size));
              }
            }
            std::vector<int> ids;
            std::vector<size_t> ends(texts.size());
            {
              nb::gil_scoped_release nogil;
              for (size_t i = 0; i < texts.size(); ++i) {
                t.Encode(texts[i], add_special_tokens, &ids);
                ends[i] = ids.size();
              }
            }
            nb::list out;
            size_t begin = 0;
            for (size_t end : ends) {
              PyObject* row = PyList_New(static_cast<Py_ssize_t>(end - begin));
              if (row == nullptr) throw nb::python_error();
              for (size_t k = begin; k < end; ++k) {
#ifdef Py_LIMITED_API  // the wheel's stable-ABI build (python/CMakeLists.txt)
                PyList_SetItem(row, static_cast<Py_ssize_t>(k - begin), PyLong_FromLong(ids[k]));
#else
                PyList_SET_ITEM(row, static_cast<Py_ssize_t>(k - begin), PyLong_FromLong(ids[k]));
#endif
              }
              out.append(nb::steal(row));
              begin = end;
            }
            return out;
          },
          nb::arg("texts"), nb::arg("add_special_tokens") = false,
          "encode() of each text, on this thread, without the GIL.")
      .def("token_to_id",
           [](const HfTokenizer& t, const std::string& token) { return t.TokenToId(token); })
      .def_prop_ro("vocab_size", &HfTokenizer::vocab_size);

  // text.tokenize's `tokenizer:` kernel on one conversation, for tests against
  // transformers' apply_chat_template.
  nb::class_<HfChat>(m, "ChatTokenizer",
                     "text.tokenize with tokenizer.json: template, image tokens, rows.")
      .def_static(
          "create",
          [](nb::bytes tokenizer_json, nb::bytes config_json, const std::string& chat_template,
             int max_length, const std::string& image_token, const std::string& image_start,
             const std::string& image_end, int image_tokens, const std::string& template_date) {
            TokenizeSpec spec;
            spec.template_date = template_date;
            spec.tokenizer = "tokenizer.json";
            spec.chat_template = chat_template;
            spec.max_length = max_length;
            spec.image_token = image_token;
            spec.image_start = image_start;
            spec.image_end = image_end;
            spec.image_tokens = image_tokens;
            TokenizerConfig config;
            if (config_json.size() > 0) {
              config = ValueOrThrow(ParseTokenizerConfig(
                  std::string_view(static_cast<const char*>(config_json.data()),
                                   config_json.size()),
                  "tokenizer_config.json"));
            }
            return ValueOrThrow(HfChat::Make(
                spec,
                std::string_view(static_cast<const char*>(tokenizer_json.data()),
                                 tokenizer_json.size()),
                config));
          },
          nb::arg("tokenizer_json"), nb::arg("config_json") = nb::bytes(""),
          nb::arg("chat_template") = "", nb::arg("max_length") = 128,
          nb::arg("image_token") = "", nb::arg("image_start") = "", nb::arg("image_end") = "",
          nb::arg("image_tokens") = 0, nb::arg("template_date") = "")
      .def(
          "render",
          [](const HfChat& chat, const std::vector<std::pair<std::string, std::string>>& turns,
             bool add_generation_prompt) {
            return ValueOrThrow(chat.chat_template->Render(ToTurns(turns), add_generation_prompt));
          },
          nb::arg("turns"), nb::arg("add_generation_prompt") = false,
          "The template's rendering of [(role, text), ...] (no image expansion).")
      .def(
          "tokenize",
          [](const HfChat& chat, const std::vector<std::pair<std::string, std::string>>& turns) {
            const std::vector<Turn> t = ToTurns(turns);
            const size_t n = static_cast<size_t>(chat.max_length);
            std::vector<int64_t> ids(n), mask(n), labels(n);
            ThrowIfError(TokenizeChat(chat, t, chat.image_tokens, ids.data(), mask.data(),
                                      labels.data()));
            return nb::make_tuple(ids, mask, labels);
          },
          nb::arg("turns"), "(input_ids, attention_mask, labels) of [(role, text), ...].");
}

}  // namespace headrace::python
