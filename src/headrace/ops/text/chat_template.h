// A model's own chat template (the Jinja text in its tokenizer_config.json), rendered per
// conversation by minja (third_party/minja: the Jinja subset llama.cpp uses for the same
// job), with the spans of the rendered text that the SFT loss covers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/core/sample.h"
#include "headrace/core/status.h"

namespace headrace {

// What text.tokenize takes from a tokenizer_config.json.
struct TokenizerConfig {
  std::string chat_template;  // "" when the file has none
  std::string bos_token;      // "" when null or absent
  std::string eos_token;
  std::string pad_token;
};

// Parses tokenizer_config.json's bytes: `chat_template` (a string, or a list of {name,
// template} of which "default" is taken) and the bos/eos/pad tokens (strings or
// {content: ...} objects). kInvalidArgument naming `source` when it is not a JSON object.
Result<TokenizerConfig> ParseTokenizerConfig(std::string_view json, const std::string& source);

// A parsed chat template. Immutable and thread-safe: each thread renders with its own
// parse of the source (minja's values share storage between copies, so a template that
// appends to a literal list would otherwise race).
class JinjaChatTemplate {
 public:
  // kInvalidArgument, naming `key`, when `source` does not parse.
  static Result<std::unique_ptr<JinjaChatTemplate>> Parse(std::string source,
                                                          std::string bos_token,
                                                          std::string eos_token,
                                                          const std::string& key);
  ~JinjaChatTemplate();

  // Renders `turns` (each message's content is its text) as transformers'
  // apply_chat_template(messages, add_generation_prompt=...) does with the same
  // template. kTokenizeError naming the first turn whose rendering fails ("the chat
  // template fails at turn 2 (assistant): Conversation roles must alternate ...").
  Result<std::string> Render(std::span<const Turn> turns, bool add_generation_prompt) const;

  // Renders the whole conversation into *text and appends to *spans the byte ranges of
  // each assistant turn as the template marks it: from the end of the rendering of the
  // turns before it with the generation prompt ("...<|im_start|>assistant\n") to the end
  // of the rendering that includes it ("...Blue.<|im_end|>\n"). A template whose
  // renderings are not prefixes of each other (one that rewrites earlier turns) gets
  // the span of the turn's text where it first appears after the previous span.
  Status RenderWithSpans(std::span<const Turn> turns, std::string* text,
                         std::vector<std::pair<size_t, size_t>>* spans) const;

 private:
  JinjaChatTemplate(std::string source, std::string bos, std::string eos, uint64_t instance);
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  uint64_t instance_;  // keys the per-thread parse
};

}  // namespace headrace
