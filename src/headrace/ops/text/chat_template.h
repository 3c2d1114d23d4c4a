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
  bool read = false;          // whether a file was read (false: all fields empty)
  std::string chat_template;  // "" when the file has none
  std::string bos_token;      // "" when null or absent
  std::string eos_token;
  std::string pad_token;
};

// Parses tokenizer_config.json's bytes: `chat_template` (a string, or a list of {name,
// template} of which "default" is taken) and the bos/eos/pad tokens (strings or
// {content: ...} objects). Integers of any size parse (Llama 3's model_max_length is
// 10^30). kInvalidArgument naming `source` when it is not a JSON object.
Result<TokenizerConfig> ParseTokenizerConfig(std::string_view json, const std::string& source);

// Bounds on parsing and rendering a chat template. Templates come from model
// repositories, so they are untrusted: without these, one template could crash the
// process (stack overflow) or take unbounded memory or time (README.md, "Limits").
struct ChatTemplateLimits {
  // Nested expressions and blocks when parsing (100k nested parentheses overflowed the
  // stack; transformers' Jinja stops near 100).
  size_t max_parse_depth = 256;
  // Nested evaluations and renderings (macro recursion: ~3 a level), and nesting of a
  // value. 500 fit in 1 MiB of stack (2 MiB under ASan); engine threads have 8.
  size_t max_depth = 500;
  // Evaluations and renderings in one render: a loop's iterations each cost a few.
  size_t max_steps = 1'000'000;
  // A rendering longer than this is cut here (at a UTF-8 character): text past it could
  // not reach a row (ForMaxLength).
  size_t max_output_bytes = size_t{1} << 20;
  // One value the template makes may hold max_output_bytes plus the conversation's
  // bytes; all values it makes in one render, value_budget_factor times that.
  size_t value_budget_factor = 8;

  // The limits for rows of `max_length` tokens: the output cut at 1 KiB per token (at
  // least 1 MiB, at most 64 MiB), past what the tokenizer reads for a row (8 bytes per
  // token, doubling while a prefix yields too few tokens).
  static ChatTemplateLimits ForMaxLength(int64_t max_length);
};

// A parsed chat template. Immutable and thread-safe: each thread renders with its own
// parse of the source (minja's values share storage between copies, so a template that
// appends to a literal list would otherwise race).
class JinjaChatTemplate {
 public:
  // kInvalidArgument, naming `key`, when `source` does not parse, nests deeper than
  // `limits` allow, or fails on a probe conversation (one user and one assistant turn,
  // which every chat template accepts): a template that cannot render that fails every
  // sample, so it is a configuration error found before the run.
  // `date` ("YYYY-MM-DD") is the day `strftime_now(format)` renders (transformers renders
  // the current time; a run must render the same rows on every day it is resumed, so the
  // day is configured). Empty: a template that names strftime_now is refused
  // (kInvalidArgument asking for the date).
  static Result<std::unique_ptr<JinjaChatTemplate>> Parse(std::string source,
                                                          std::string bos_token,
                                                          std::string eos_token,
                                                          const std::string& key,
                                                          ChatTemplateLimits limits = {},
                                                          std::string date = {});
  ~JinjaChatTemplate();

  // Renders `turns` (each message's content is its text) as transformers'
  // apply_chat_template(messages, add_generation_prompt=...) does with the same
  // template, under the limits: cut at max_output_bytes; kTokenizeError when the template
  // raises, divides by zero, overflows an integer or passes another limit (naming it).
  Result<std::string> Render(std::span<const Turn> turns, bool add_generation_prompt) const;

  // Renders the whole conversation into *text and appends to *spans the byte ranges the
  // loss is on, in order:
  //   - a template with `{% generation %}` blocks: where they rendered, as transformers'
  //     apply_chat_template(..., return_assistant_tokens_mask=True) marks them;
  //   - otherwise each assistant turn's, found from renderings with the turn's content
  //     replaced by a probe (U+E000): a span starts where the rendering first depends
  //     on the content ("...<|im_start|>assistant\n" and an empty "<think>\n\n</think>\n\n"
  //     the template writes whatever the content are outside) and ends with the text the
  //     template closes the turn with ("<|im_end|>\n"), also in a template that renders
  //     earlier turns differently once later ones follow (Qwen3).
  // kTokenizeError naming the first turn whose rendering fails ("the chat template fails
  // at turn 2 (assistant): Conversation roles must alternate ..."); a limit passed is
  // reported as it is, without rendering the prefixes again.
  Status RenderWithSpans(std::span<const Turn> turns, std::string* text,
                         std::vector<std::pair<size_t, size_t>>* spans) const;

 private:
  JinjaChatTemplate(std::string source, std::string bos, std::string eos,
                    ChatTemplateLimits limits, uint64_t instance);
  // Render, telling in *over_limit whether a failure was a limit's; appends where
  // `{% generation %}` blocks rendered to *generation when given.
  Result<std::string> RenderChecked(std::span<const Turn> turns, bool add_generation_prompt,
                                    bool* over_limit,
                                    std::vector<std::pair<size_t, size_t>>* generation =
                                        nullptr) const;
  // The span of assistant turn `i` in `text` (the whole rendering); false when the
  // template does not render the turn's content.
  bool TurnSpan(std::span<const Turn> turns, size_t i, const std::string& text,
                std::pair<size_t, size_t>* span) const;
  std::string source_;
  bool has_generation_ = false;  // the template has {% generation %} blocks
  std::string date_;             // strftime_now's day, "YYYY-MM-DD"; "" none
  ChatTemplateLimits limits_;
  std::string bos_token_;
  std::string eos_token_;
  uint64_t instance_;  // keys the per-thread parse
};

}  // namespace headrace
