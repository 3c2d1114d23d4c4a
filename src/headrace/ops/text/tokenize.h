// text.tokenize: renders a sample's conversation with a chat template, tokenizes it with
// SentencePiece (`model:`) or a Hugging Face tokenizer.json and the model's own chat
// template (`tokenizer:`, hf_chat.h) and writes input_ids, attention_mask and labels
// straight into the batch.
//
// Three layers, each usable on its own:
//   SentencePieceModel   the loaded model; the only place SentencePiece's API is seen
//   ChatTemplate         a TokenizeSpec compiled against one model (fixed pieces tokenized)
//   TokenizeConversation the pure kernel: turns -> three int64 rows
// TokenizeOp adapts the kernel to a SampleContext.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <utility>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/text/hf_chat.h"
#include "headrace/ops/vision/preset.h"

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace headrace {

// Renders a conversation with a chat template and tokenizes it. Exactly one of:
//   model      a SentencePiece .model with the built-in template below: each turn is
//              `<prefix><text><turn_end>`; the loss mask covers only the assistant
//              turns' text and turn_end.
//   tokenizer  a Hugging Face tokenizer.json (BPE) with the model's own Jinja chat
//              template; the loss mask covers the assistant turns as the template
//              renders them (hf_chat.h). The *_prefix, turn_end, add_bos and add_eos
//              keys do not apply: the template writes every marker.
struct TokenizeSpec {  // text.tokenize
  std::string model;   // SentencePiece .model file
  // --- with `tokenizer:` ---
  std::string tokenizer{};         // HF tokenizer.json (local, s3://, http(s)://)
  std::string tokenizer_config{};  // "": tokenizer_config.json beside `tokenizer`
  std::string chat_template{};     // Jinja text; "": tokenizer_config's chat_template,
                                   // else the preset's (ops/vision/preset.h)
  std::string template_date{};     // "YYYY-MM-DD": the day strftime_now renders (required
                                   // by a template that calls it)
  // A model's vision tokens and geometry (ops/vision/preset.h): image_token,
  // image_start, image_end, patch_size and merge_size left unset ("", 0) take the
  // preset's (<|image_pad|>, <|vision_start|>, <|vision_end|>, its patch and merge
  // sizes); an explicit key overrides it, as on image.smart_resize and vision.patchify.
  VisionModel preset = VisionModel::kNone;
  std::string image_placeholder = "<image>";  // in a turn's text: one image
  std::string image_token{};  // repeated N times per image ("<|image_pad|>"); "": no expansion
  std::string image_start{};  // before them ("<|vision_start|>")
  std::string image_end{};    // after them ("<|vision_end|>")
  int image_tokens = 0;     // N; 0: from grid_field, or from the size of `image_field`
  std::string image_field = "image";  // the image value whose size gives N
  // The batch field of the sample's image grids (vision.patchify's image_grid_thw),
  // written by an op before this one: the i-th placeholder of the conversation becomes
  // t*h*w / merge_size^2 tokens of the i-th grid, and placeholders and grids must agree
  // in number. "": every placeholder gets the same N (image_tokens or image_field).
  std::string grid_field{};
  // Videos, as images: each video_placeholder becomes its own video's count of
  // video_token (preset: <|video_pad|>) between image_start and image_end, from the grids
  // of `video_grid_field` (video.patchify's video_grid_thw), in order; placeholders and
  // videos must agree in number. With `video_timestamps_field` (video.patchify's
  // video_timestamps; required with preset qwen3_vl) each temporal group is written as
  // Qwen3-VL's processor writes it: "<t.t seconds>" image_start pads image_end.
  // No video_grid_field: <video> stays text.
  std::string video_placeholder = "<video>";
  std::string video_token{};
  std::string video_grid_field{};
  std::string video_timestamps_field{};
  int patch_size = 0;  // 0: preset or 14. image_field: N = (height / (patch*merge)) * ...
  int merge_size = 0;  // 0: preset, or with grid_field the grid's writer's, or 2
  // --- both ---
  int max_length = 128;
  // true: every row padded to max_length (input_ids, attention_mask, labels: i64
  // [max_length] each). false: each sample's tokens only, ragged (input_ids, labels and
  // position_ids, 0.. per sample: i64 [?] each, with their `<field>_lengths`); max_length
  // still cuts a longer conversation.
  bool pad = true;
  int pad_id = -1;          // -1: the model's pad id, or 0 if it has none
  int ignore_index = -100;  // label value outside the loss mask
  bool add_bos = true;
  bool add_eos = true;
  std::string system_prefix = "<|system|>\n";
  std::string user_prefix = "<|user|>\n";
  std::string assistant_prefix = "<|assistant|>\n";
  std::string turn_end = "\n";
  std::string field = "conversation";  // the conversation value read
  // Prepended to the three batch fields' names, so that two tokenize ops can write
  // side by side ("answer_" -> answer_input_ids, ...).
  std::string output_prefix{};
};

// text.tokenize.max_length's upper bound.
inline constexpr int kMaxTokens = 1 << 20;

// The image keys of a TokenizeSpec over its preset (TokenizeSpec says how); a size
// neither gives stays 0.
struct ImageTokenKeys {
  std::string token, start, end;
  int patch_size = 0;
  int merge_size = 0;
  std::string preset;  // the preset's name when it gave the sizes, for messages
  std::string video_token{};  // "" unless video_grid_field is set
};
ImageTokenKeys ResolveImageTokens(const TokenizeSpec& spec);

// A loaded SentencePiece model. Immutable after Load; every method is safe to call from
// many threads at once.
class SentencePieceModel {
 public:
  // Parses the bytes of a .model file (a serialized ModelProto), read from wherever the
  // model lives. kInvalidArgument naming `source` (the model's URI) when they are not a
  // SentencePiece model.
  static Result<std::unique_ptr<SentencePieceModel>> FromSerialized(std::string_view bytes,
                                                                    const std::string& source);
  ~SentencePieceModel();

  // Replaces the contents of `ids` with the tokens of `text` (keeping its capacity).
  // kTokenizeError when the model rejects the text. SentencePiece's working memory is
  // ~140 bytes per byte of text: callers bound `text` (EncodeLeadingTokens).
  Status Encode(std::string_view text, std::vector<int>* ids) const;
  // Bytes of text handed to Encode so far, summed over all threads: what tokenizing
  // cost, for tests and reports.
  int64_t bytes_encoded() const { return bytes_encoded_.load(std::memory_order_relaxed); }

  int vocab_size() const;
  int bos_id() const;                           // -1 when the model has none
  int eos_id() const;                           // -1 when the model has none
  int pad_id() const;                           // -1 when the model has none
  int PieceToId(std::string_view piece) const;  // the unknown id for a piece not in the vocab
  const std::string& IdToPiece(int id) const;

 private:
  explicit SentencePieceModel(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp);
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  mutable std::atomic<int64_t> bytes_encoded_{0};
};

// The first tokens of `text`, at least `count` of them when the whole text has that
// many, without encoding the whole text: its cost is bounded by `count`, not by the
// length of `text` (a 100 MB turn in a row of 48 tokens encodes a few hundred bytes).
//
// It encodes a prefix of about kLeadingBytesPerToken bytes per token wanted, doubling
// it until the prefix yields `count` + kLeadingSlackTokens tokens or is the whole text.
// The prefix is cut before a run of spaces when one lies in its second half, else at
// a UTF-8 character boundary.
//
// Exactness: the first `count` tokens equal the first `count` of model.Encode(text)
// whenever the cut falls before a space and the model splits pieces at whitespace
// (SentencePiece's default, split_by_whitespace=true, with the space as a piece prefix),
// since then no piece spans the cut. A cut inside a run without spaces (e.g. CJK text)
// may change the last few tokens before it; the slack keeps those out of the `count`.
// Text the model's normalizer removes (runs of whitespace) yields no tokens, so it is
// scanned to its end: the cost is then its length, at the normalizer's small memory.
inline constexpr int64_t kLeadingBytesPerToken = 8;
inline constexpr int64_t kLeadingSlackTokens = 8;
Status EncodeLeadingTokens(const SentencePieceModel& model, std::string_view text, int64_t count,
                           std::vector<int>* ids);

// A TokenizeSpec compiled against one model: the template's fixed strings tokenized once
// (they are the same for every sample) and its ids resolved. Immutable; shared by all
// threads.
struct ChatTemplate {
  std::array<std::vector<int>, 3> prefix;  // indexed by Role: system, user, assistant
  std::vector<int> turn_end;
  int bos_id = -1;  // -1: no BOS is added
  int eos_id = -1;  // -1: no EOS is added
  int64_t pad_id = 0;
  int64_t ignore_index = -100;
  int64_t max_length = 128;

  // kInvalidArgument, naming the `text.tokenize.*` key, when max_length is not positive,
  // padding is off, BOS/EOS is asked of a model without one, pad_id is outside the
  // vocabulary, or a non-empty template string tokenizes to nothing (a model that
  // normalizes whitespace away would silently drop a "\n" turn_end, and with it the
  // only stop signal the assistant is trained on).
  static Result<ChatTemplate> Make(const SentencePieceModel& model, const TokenizeSpec& spec);
};

// The kernel. Renders `turns` as
//   [BOS] (prefix(role) text turn_end)* [EOS]
// tokenizing each template piece and each turn's text on its own, so that no token
// spans two pieces, and writes tmpl.max_length values to each of:
//   ids     token ids, then pad_id
//   mask    1 on tokens, 0 on padding
//   labels  the token id on an assistant turn's text and turn_end, and on the final EOS
//           when the last turn is the assistant's; ignore_index elsewhere (prefixes,
//           other roles, BOS, padding). Not shifted: the model shifts.
// Longer conversations are cut at max_length (right truncation; the EOS is then lost).
// Each text is encoded only as far as the row has room (EncodeLeadingTokens), so the
// cost of a sample is bounded by max_length, however long its turns.
// kTokenizeError when `turns` is empty or the model rejects the part of a text it
// encodes; the rows are then unspecified. Thread-safe; allocates nothing in steady state
// beyond what SentencePiece allocates inside Encode.
Status TokenizeConversation(const SentencePieceModel& model, const ChatTemplate& tmpl,
                            std::span<const Turn> turns, int64_t* ids, int64_t* mask,
                            int64_t* labels);

// The operator. Reads the conversation value `field` and writes its three rows into
// ctx.rows[input_ids_row], ctx.rows[attention_mask_row] and ctx.rows[labels_row], each
// of which must hold spec.max_length int64 values (declared as i64[max_length]).
class TokenizeOp : public Op {
 public:
  static constexpr std::string_view kName = "text.tokenize";
  static constexpr std::string_view kDoc =
      "The conversation through a chat template and a SentencePiece model or an HF "
      "tokenizer.json with the model's chat template: input_ids, attention_mask and "
      "assistant-only labels.";
  using Spec = TokenizeSpec;
  static void Fields(auto& s, auto&& f) {
    f("model", s.model);
    f("max_length", s.max_length);
    f("pad", s.pad);
    f("pad_id", s.pad_id);
    f("ignore_index", s.ignore_index);
    f("add_bos", s.add_bos);
    f("add_eos", s.add_eos);
    f("system_prefix", s.system_prefix);
    f("user_prefix", s.user_prefix);
    f("assistant_prefix", s.assistant_prefix);
    f("turn_end", s.turn_end);
    f("field", s.field);
    f("output_prefix", s.output_prefix);
    // With `tokenizer` (after the others: positional model, max_length stay first).
    f("tokenizer", s.tokenizer);
    f("tokenizer_config", s.tokenizer_config);
    f("chat_template", s.chat_template);
    f("template_date", s.template_date);
    f("image_placeholder", s.image_placeholder);
    f("image_token", s.image_token);
    f("image_start", s.image_start);
    f("image_end", s.image_end);
    f("image_tokens", s.image_tokens);
    f("image_field", s.image_field);
    f("patch_size", s.patch_size);
    f("merge_size", s.merge_size);
    f("preset", s.preset);
    f("grid_field", s.grid_field);
    f("video_placeholder", s.video_placeholder);
    f("video_token", s.video_token);
    f("video_grid_field", s.video_grid_field);
    f("video_timestamps_field", s.video_timestamps_field);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads the conversation `field` (and, with `tokenizer` and an image token, the batch
  // field `grid_field` of an earlier op, or with image_tokens 0 the image
  // `image_field`); writes output_prefix + input_ids, attention_mask and labels,
  // i64[max_length] each, or with pad false input_ids, labels and position_ids, ragged.
  // A grid field that no earlier op writes, or whose writer used another patch or
  // merge size than this op's (explicit or preset), is a config error naming both keys.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  // Reads the model file, or the tokenizer.json and its tokenizer_config.json, through
  // ctx (local, s3://, http(s)://).
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  // The sequence `field` (its input_ids) as packing pads it: the model's pad id, the
  // labels' ignore_index, the image token's id.
  TokenSequence Sequence(std::string field) const;
  // Its model is "example.model": the conformance battery supplies that file.
  static Spec ExampleSpec() { return Spec{.model = "example.model", .max_length = 24}; }

  // Parses the model from `model_bytes` (the contents of spec.model, which the caller
  // read through its Storage: local, s3:// or http(s)://) and compiles the template.
  // kInvalidArgument naming `text.tokenize.<key>` on a bad spec or bytes that are not a
  // model (naming spec.model), and on negative or repeated row indices. With spec.pad
  // false the rows are ragged fields and `attention_mask_row` is position_ids'.
  static Result<std::unique_ptr<TokenizeOp>> FromModel(const TokenizeSpec& spec,
                                                       std::string_view model_bytes,
                                                       int input_ids_row, int attention_mask_row,
                                                       int labels_row, int conversation_slot);

  // Where a sample's image grids are (text.tokenize.grid_field), as the op reads them.
  struct GridInput {
    enum class Layout {
      kNone,      // no grid field: every placeholder gets the same count
      kOne,       // a fixed i64 [3] field: one grid per sample, at ctx.rows[row]
      kPadded,    // a padded list's i64 [max_items, 3] at ctx.rows[row]; an item whose
                  // t is 0 is absent (ForEachItemOp zero-fills them)
      kAppended,  // a list's items or a ragged [?, 3]: the rows the sample appended,
                  // ctx.ragged->bytes(row)
    };
    Layout layout = Layout::kNone;
    int row = -1;
    int max_items = 0;  // kPadded
    int merge_size = 2;  // tokens per grid: t * h * w / merge_size^2
    std::string field;   // for messages
  };

  // Where a sample's videos are (video_grid_field, video_timestamps_field).
  struct VideoInput {
    GridInput grids;          // layout kNone: no video expansion
    int timestamps_row = -1;  // the ragged f32 timestamps; -1: none (Qwen2-VL)
  };

  // The op with a tokenizer.json: `tokenizer_json` holds spec.tokenizer's bytes,
  // `config` its tokenizer_config.json's contents. `image_slot` is the image whose size
  // gives the image token count (-1: spec.image_tokens or `grids`). Errors as FromModel's.
  static Result<std::unique_ptr<TokenizeOp>> FromTokenizer(
      const TokenizeSpec& spec, std::string_view tokenizer_json, const TokenizerConfig& config,
      int input_ids_row, int attention_mask_row, int labels_row, int conversation_slot,
      int image_slot, GridInput grids, VideoInput videos);
  static Result<std::unique_ptr<TokenizeOp>> FromTokenizer(
      const TokenizeSpec& spec, std::string_view tokenizer_json, const TokenizerConfig& config,
      int input_ids_row, int attention_mask_row, int labels_row, int conversation_slot,
      int image_slot, GridInput grids) {
    return FromTokenizer(spec, tokenizer_json, config, input_ids_row, attention_mask_row,
                         labels_row, conversation_slot, image_slot, std::move(grids),
                         VideoInput{});
  }

  std::string_view name() const override { return kName; }
  // kTokenizeError when the conversation has no turns, the model rejects its text or
  // the chat template fails (naming the turn); with a grid field, when its image
  // placeholders and the sample's grids differ in number (naming both counts) or
  // max_length cuts into the image tokens; kMissingField when the sample has no such
  // value.
  Status Run(SampleContext& ctx) const override;
  // The size pass: unpadded, the tokens of the sample (its conversation tokenized as Run
  // will, with the image grids vision.patchify told before it), appended to the three
  // fields. Run then appends what this pass tokenized instead of tokenizing again. False
  // (the pass stops) with video grids, grids in a fixed or padded field, or a sample
  // Run would fail. Padded, it appends nothing (true).
  bool Predict(SizePass& pass) const override;
  // Padded, its rows (none appended); unpadded, its rows and tokens (SizePass::sequence),
  // except with video grids or grids not appended by an earlier op.
  Telling Tells() const override {
    if (pad_) return Telling::kRows;
    const bool tells = videos_.grids.layout == GridInput::Layout::kNone &&
                       (hf_ == nullptr || grids_.layout == GridInput::Layout::kNone ||
                        grids_.layout == GridInput::Layout::kAppended);
    return tells ? Telling::kRowsAndTokens : Telling::kNothing;
  }

  // The SentencePiece model; only for an op made with `model`.
  const SentencePieceModel& model() const { return *model_; }
  const ChatTemplate& chat_template() const { return template_; }
  // The tokenizer.json and template; null for an op made with `model`.
  const HfChat* hf_chat() const { return hf_.get(); }

 private:
  TokenizeOp(std::unique_ptr<SentencePieceModel> model, ChatTemplate tmpl, int input_ids_row,
             int attention_mask_row, int labels_row, int conversation_slot);
  // The grid path of Run: this sample's grids from grids_, then TokenizeChat per image.
  Status TokenizeWithGrids(const SampleContext& ctx, std::span<const Turn> turns,
                           int64_t* const* rows) const;
  // Whether the size pass on this thread tokenized this sample (Predict) with the grids
  // it made; Run then appends that. Clears it either way.
  bool TakeTold(const SampleContext& ctx, const Turn* turns) const;
  // TokenizeChat with these image grids (t, h, w per image) and videos.
  Status TokenizeImages(std::span<const int64_t> thw, const VideoCounts& videos,
                        std::span<const Turn> turns, int64_t* const* rows) const;

  std::unique_ptr<SentencePieceModel> model_;  // exactly one of model_ and hf_ is set
  ChatTemplate template_;
  std::unique_ptr<HfChat> hf_;
  int image_slot_ = -1;
  GridInput grids_;
  VideoInput videos_;
  bool pad_ = true;  // false: the three fields are ragged; the second is position_ids
  int input_ids_row_;
  int attention_mask_row_;
  int labels_row_;
  int conversation_slot_;
};

}  // namespace headrace
