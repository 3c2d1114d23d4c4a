// A Hugging Face `tokenizer.json` of model type BPE (byte-level BPE as Qwen2, Llama 3,
// GPT-2 and Mistral-Nemo ship it), read and applied in C++.
//
// Written here because no C or C++ library packaged by Debian or PyPI reads this format
// (the reference implementation is the Rust `tokenizers` crate). What it supports, and
// rejects with a configuration error naming the part and what is supported:
//   normalizer      null, NFC, NFD, NFKC, NFKD, or a Sequence of those, with the
//                   reference's Unicode data (unicode_reference.h)
//   pre_tokenizer   null, Split (regex or string; Isolated, Removed, MergedWithPrevious,
//                   MergedWithNext; invert), ByteLevel (add_prefix_space false, with or
//                   without its GPT-2 regex), or a Sequence of those. Regexes run on PCRE2
//                   (UTF + UCP, JIT: the Qwen2/Llama-3 patterns use a lookahead) over the
//                   text as the reference's Unicode 16 classifies it (SubstituteForRegex).
//   model           BPE: merges as "a b" strings or [a, b] pairs, byte_fallback, unk_token,
//                   fuse_unk, ignore_merges. Other types (WordPiece, Unigram, WordLevel)
//                   are rejected.
//   added_tokens    matched before anything else, leftmost-longest (lstrip/rstrip honoured)
//   post_processor  null, ByteLevel, TemplateProcessing, RobertaProcessing,
//                   BertProcessing, or a Sequence of those (single sequences only)
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/core/strings.h"

namespace headrace {

// SanitizeUtf8 (core/strings.h) makes text valid UTF-8 as the tokenizers receive it.

class HfTokenizer {
 public:
  // Parses tokenizer.json's bytes. kInvalidArgument naming `source` and the JSON path of
  // what is malformed or unsupported ("model.type 'WordPiece' is not supported: ...").
  static Result<std::unique_ptr<HfTokenizer>> FromJson(std::string_view json,
                                                       const std::string& source);
  // FromJson, parsed once per process for the same bytes: the tokenizer of an equal
  // tokenizer.json among the last kKeptShared ones parsed is returned again (Encode is
  // const and thread-safe). Qwen2's tokenizer.json
  // (151k tokens and merges) takes about 0.1 s of one core to parse, on the way to a
  // pipeline's first batch; a process that builds pipelines again (a loader per
  // evaluation, a Ray worker's next rank, a bench's passes) pays it once. Kept: the
  // tokenizer and a copy of its JSON (Qwen2's: 7 MB), the oldest dropped first.
  static constexpr int kKeptShared = 2;
  static Result<std::shared_ptr<const HfTokenizer>> Shared(std::string_view json,
                                                           const std::string& source);
  ~HfTokenizer();
  HfTokenizer(const HfTokenizer&) = delete;
  HfTokenizer& operator=(const HfTokenizer&) = delete;

  // Appends the tokens of `text` to *ids as tokenizers' `encode(text,
  // add_special_tokens=...)` gives them. When `starts` is given, appends each token's
  // first byte in `text` (exact when the normalizer leaves the text unchanged, else the
  // start of the chunk normalization changed; the post-processor's tokens get 0 before the
  // text and text.size() after it, so starts never decrease).
  // Invalid UTF-8 is first replaced as SanitizeUtf8 does, starts then index the
  // sanitized text. Never fails. Const and thread-safe: each thread keeps a cache of
  // recent words.
  void Encode(std::string_view text, bool add_special_tokens, std::vector<int>* ids,
              std::vector<uint32_t>* starts = nullptr) const;

  int vocab_size() const;
  // The token the post-processor puts before a single sequence when it puts exactly one
  // there (Llama 3's "<|begin_of_text|>"); "" otherwise.
  std::string PostProcessorFirstToken() const;
  // The id of a vocabulary or added token; -1 when there is none.
  int TokenToId(std::string_view token) const;
  // Bytes handed to Encode so far, over all threads.
  int64_t bytes_encoded() const { return bytes_encoded_.load(std::memory_order_relaxed); }

  struct Impl;

 private:
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  mutable std::atomic<int64_t> bytes_encoded_{0};
};

}  // namespace headrace
