// text.tokenize with `tokenizer:`: a conversation through the model's own chat template
// and its Hugging Face tokenizer.json, to the same three rows as the SentencePiece path.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/ops/text/chat_template.h"
#include "headrace/ops/text/hf_tokenizer.h"

namespace headrace {

struct TokenizeSpec;

// A tokenizer.json and a chat template compiled for one TokenizeSpec. Immutable; shared
// by all threads.
struct HfChat {
  // Shared with other pipelines of the process that read the same tokenizer.json
  // (HfTokenizer::Shared).
  std::shared_ptr<const HfTokenizer> tokenizer;
  std::unique_ptr<JinjaChatTemplate> chat_template;
  // Each image_placeholder in a turn becomes image_start, image_token x N, image_end
  // before rendering; no expansion when image_token is empty.
  std::string image_placeholder;
  std::string image_start, image_token, image_end;
  int image_token_id = -1;  // image_token's id (-1: none)
  // Each video_placeholder becomes image_start, video_token x t*h*w/merge^2, image_end
  // (VideoCounts); with timestamps, Qwen3-VL's form (TokenizeChat below).
  std::string video_placeholder;
  std::string video_token;  // "": videos are not expanded
  int video_token_id = -1;
  int image_tokens = 0;   // N when > 0, else from the image's size
  int image_divisor = 0;  // patch_size * merge_size: N = (h / d) * (w / d)
  int64_t pad_id = 0;
  int64_t ignore_index = -100;
  int64_t max_length = 128;

  // `tokenizer_json`: the bytes of spec.tokenizer; `config`: what its
  // tokenizer_config.json holds (chat template, special tokens), empty when not read.
  // kInvalidArgument naming `text.tokenize.<key>` on an unsupported tokenizer, a
  // template that does not parse or is missing, image tokens or pad token that are
  // not in the vocabulary.
  // The BOS the template writes as `bos_token` is the config's; without a config, the
  // token the tokenizer's post-processor puts first (Llama 3's <|begin_of_text|>), as
  // that is what encode() would add. A template that writes bos_token with neither is a
  // configuration error, not a silently missing BOS.
  static Result<std::unique_ptr<HfChat>> Make(const TokenizeSpec& spec,
                                              std::string_view tokenizer_json,
                                              const TokenizerConfig& config);

  // The image token count for an image of `width` x `height` (after the ops before):
  // image_tokens when set, else (height / d) * (width / d) with d = patch_size *
  // merge_size, which is the Qwen2-VL processor's count only when d divides both sides.
  // kTokenizeError (the sample's) for other sizes: the processor resizes them
  // (smart_resize), which this op does not (yet) do.
  Result<int> ImageTokens(int width, int height) const;
};

// The kernel. Expands image placeholders (to `image_tokens` tokens each), renders
// `turns` with the chat template, tokenizes the rendering (special tokens matched, no
// post-processor: the template writes BOS/EOS, as apply_chat_template(tokenize=True)
// does) and writes chat.max_length values to each row:
//   ids     token ids, then pad_id
//   mask    1 on tokens, 0 on padding
//   labels  the token id where the token overlaps an assistant span
//           (JinjaChatTemplate::RenderWithSpans), ignore_index elsewhere
// Longer renderings are cut at max_length; only about as much of the rendering as the
// row needs is tokenized. Text that is not UTF-8 is replaced as SanitizeUtf8 does.
// kTokenizeError when `turns` is empty or the template fails (naming the turn).
Status TokenizeChat(const HfChat& chat, std::span<const Turn> turns, int image_tokens,
                    int64_t* ids, int64_t* mask, int64_t* labels);

// The same with one count per image: the i-th placeholder of the conversation (turns in
// order, each turn's text left to right) becomes image_start, image_token x
// per_image[i], image_end. kTokenizeError, the rows unspecified, when the placeholders
// and `per_image` differ in number (the message names both counts and `images`, what
// the counts come from), or when max_length cuts into the image tokens (a model would
// see fewer image tokens than it has image features).
Status TokenizeChat(const HfChat& chat, std::span<const Turn> turns,
                    std::span<const int64_t> per_image, std::string_view images, int64_t* ids,
                    int64_t* mask, int64_t* labels);

// A sample's videos, for the form below.
struct VideoCounts {
  std::span<const int64_t> thw;  // (t, h, w) per video, in the conversation's order
  // One per temporal group of all the videos, in order (video.patchify's
  // video_timestamps); empty: no timestamps (Qwen2-VL, Qwen2.5-VL).
  std::span<const float> timestamps;
  int merge_size = 2;
  std::string_view source;  // what the grids come from, for messages
};

// The same with videos too: the i-th video_placeholder becomes, without timestamps,
//   image_start, video_token x (t * h * w / merge^2), image_end
// (Qwen2VLProcessor), and with them (Qwen3VLProcessor: its chat template's
// <|vision_start|><|video_pad|><|vision_end|> with the pad replaced per group)
//   image_start, then per group g: "<%.1f seconds>" of timestamps[g], image_start,
//   video_token x (h * w / merge^2), image_end; then image_end.
// `per_image` null: every image placeholder gets chat.image_tokens (no count check), and
// stays text when that is 0.
// kTokenizeError when the video placeholders and the videos differ in number (naming both
// counts and videos.source), the timestamps are not one per group, or max_length cuts
// into the video tokens; otherwise as the form above.
Status TokenizeChat(const HfChat& chat, std::span<const Turn> turns,
                    const std::span<const int64_t>* per_image, std::string_view images,
                    const VideoCounts& videos, int64_t* ids, int64_t* mask, int64_t* labels);

}  // namespace headrace
