#include "headrace/ops/text/tokenize.h"

#include "headrace/ops/schema.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace headrace {
namespace {

// A row of three int64 arrays filled left to right until max_length.
class RowWriter {
 public:
  RowWriter(const ChatTemplate& tmpl, int64_t* ids, int64_t* mask, int64_t* labels)
      : tmpl_(tmpl), ids_(ids), mask_(mask), labels_(labels) {}

  bool full() const { return size_ == tmpl_.max_length; }
  int64_t room() const { return tmpl_.max_length - size_; }

  void Append(std::span<const int> tokens, bool trained) {
    const int64_t n =
        std::min<int64_t>(static_cast<int64_t>(tokens.size()), tmpl_.max_length - size_);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = tokens[i];
      ids_[size_ + i] = id;
      mask_[size_ + i] = 1;
      labels_[size_ + i] = trained ? id : tmpl_.ignore_index;
    }
    size_ += n;
  }

  void PadToEnd() {
    for (int64_t i = size_; i < tmpl_.max_length; ++i) {
      ids_[i] = tmpl_.pad_id;
      mask_[i] = 0;
      labels_[i] = tmpl_.ignore_index;
    }
  }

 private:
  const ChatTemplate& tmpl_;
  int64_t* ids_;
  int64_t* mask_;
  int64_t* labels_;
  int64_t size_ = 0;
};

// Tokenizes a fixed template string once, for ChatTemplate::Make.
Result<std::vector<int>> EncodeTemplatePiece(const SentencePieceModel& model,
                                             const std::string& text, std::string_view key) {
  std::vector<int> ids;
  Status status = model.Encode(text, &ids);
  if (!status.ok()) {
    return Status::InvalidArgument("text.tokenize." + std::string(key) + ": " + status.message());
  }
  if (!text.empty() && ids.empty()) {
    return Status::InvalidArgument(
        "text.tokenize." + std::string(key) +
        " tokenizes to nothing with this model (it normalizes the string away; train the "
        "model with remove_extra_whitespaces=false or choose another string)");
  }
  return ids;
}

// Where to cut `text` at or before `limit` (< text.size()): before the run of spaces
// nearest `limit` when one starts in its second half (no piece spans it), else at the
// start of the UTF-8 character that `limit` falls in.
size_t CutPoint(std::string_view text, size_t limit) {
  for (size_t p = limit; p > limit / 2; --p) {
    if (text[p] != ' ') continue;
    while (p > 0 && text[p - 1] == ' ') --p;
    if (p > 0) return p;
    break;
  }
  size_t p = limit;
  while (p > 0 && (static_cast<uint8_t>(text[p]) & 0xC0) == 0x80) --p;
  return p;
}

}  // namespace

// --- SentencePieceModel ---------------------------------------------------------------

SentencePieceModel::SentencePieceModel(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp)
    : sp_(std::move(sp)) {}

SentencePieceModel::~SentencePieceModel() = default;

Result<std::unique_ptr<SentencePieceModel>> SentencePieceModel::FromSerialized(
    std::string_view bytes, const std::string& source) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const sentencepiece::util::Status status = sp->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    return Status::InvalidArgument("cannot load SentencePiece model '" + source +
                                   "': " + status.ToString());
  }
  return std::unique_ptr<SentencePieceModel>(new SentencePieceModel(std::move(sp)));
}

Status SentencePieceModel::Encode(std::string_view text, std::vector<int>* ids) const {
  bytes_encoded_.fetch_add(static_cast<int64_t>(text.size()), std::memory_order_relaxed);
  const sentencepiece::util::Status status = sp_->Encode(text, ids);
  if (!status.ok()) return Status::TokenizeError("SentencePiece: " + status.ToString());
  return Status::Ok();
}

int SentencePieceModel::vocab_size() const { return sp_->GetPieceSize(); }
int SentencePieceModel::bos_id() const { return sp_->bos_id(); }
int SentencePieceModel::eos_id() const { return sp_->eos_id(); }
int SentencePieceModel::pad_id() const { return sp_->pad_id(); }
int SentencePieceModel::PieceToId(std::string_view piece) const { return sp_->PieceToId(piece); }
const std::string& SentencePieceModel::IdToPiece(int id) const { return sp_->IdToPiece(id); }

Status EncodeLeadingTokens(const SentencePieceModel& model, std::string_view text, int64_t count,
                           std::vector<int>* ids) {
  const int64_t want = count + kLeadingSlackTokens;
  for (size_t limit = static_cast<size_t>(want * kLeadingBytesPerToken);; limit *= 2) {
    if (limit >= text.size()) return model.Encode(text, ids);
    HR_RETURN_IF_ERROR(model.Encode(text.substr(0, CutPoint(text, limit)), ids));
    if (static_cast<int64_t>(ids->size()) >= want) return Status::Ok();
  }
}

// --- ChatTemplate ---------------------------------------------------------------------

Result<ChatTemplate> ChatTemplate::Make(const SentencePieceModel& model, const TokenizeSpec& spec) {
  if (spec.max_length <= 0) {
    return Status::InvalidArgument("text.tokenize.max_length must be positive, got " +
                                   std::to_string(spec.max_length));
  }
  ChatTemplate tmpl;
  tmpl.max_length = spec.max_length;
  tmpl.ignore_index = spec.ignore_index;

  if (spec.add_bos) {
    if (model.bos_id() < 0) {
      return Status::InvalidArgument("text.tokenize.add_bos: the model has no BOS token");
    }
    tmpl.bos_id = model.bos_id();
  }
  if (spec.add_eos) {
    if (model.eos_id() < 0) {
      return Status::InvalidArgument("text.tokenize.add_eos: the model has no EOS token");
    }
    tmpl.eos_id = model.eos_id();
  }

  if (spec.pad_id < -1 || spec.pad_id >= model.vocab_size()) {
    return Status::InvalidArgument("text.tokenize.pad_id " + std::to_string(spec.pad_id) +
                                   " is outside the model's vocabulary of " +
                                   std::to_string(model.vocab_size()));
  }
  tmpl.pad_id = spec.pad_id >= 0 ? spec.pad_id : std::max(model.pad_id(), 0);

  HR_ASSIGN_OR_RETURN(tmpl.prefix[static_cast<int>(Role::kSystem)],
                      EncodeTemplatePiece(model, spec.system_prefix, "system_prefix"));
  HR_ASSIGN_OR_RETURN(tmpl.prefix[static_cast<int>(Role::kUser)],
                      EncodeTemplatePiece(model, spec.user_prefix, "user_prefix"));
  HR_ASSIGN_OR_RETURN(tmpl.prefix[static_cast<int>(Role::kAssistant)],
                      EncodeTemplatePiece(model, spec.assistant_prefix, "assistant_prefix"));
  HR_ASSIGN_OR_RETURN(tmpl.turn_end, EncodeTemplatePiece(model, spec.turn_end, "turn_end"));
  return tmpl;
}

// --- kernel ---------------------------------------------------------------------------

Status TokenizeConversation(const SentencePieceModel& model, const ChatTemplate& tmpl,
                            std::span<const Turn> turns, int64_t* ids, int64_t* mask,
                            int64_t* labels) {
  if (turns.empty()) return Status::TokenizeError("the conversation has no turns");

  // One buffer per thread for the text's tokens: its capacity settles after a few
  // samples, so steady state allocates nothing here.
  thread_local std::vector<int> text_ids;

  RowWriter row(tmpl, ids, mask, labels);
  if (tmpl.bos_id >= 0) {
    const int bos = tmpl.bos_id;
    row.Append(std::span<const int>(&bos, 1), /*trained=*/false);
  }
  for (const Turn& turn : turns) {
    if (row.full()) break;  // the rest would be truncated: skip tokenizing it
    const bool trained = turn.role == Role::kAssistant;
    row.Append(tmpl.prefix[static_cast<int>(turn.role)], /*trained=*/false);
    if (row.full()) break;
    // Only as much of the text as the row has room for: a huge turn costs no more
    // than a short one.
    HR_RETURN_IF_ERROR(EncodeLeadingTokens(model, turn.text, row.room(), &text_ids));
    row.Append(text_ids, trained);
    row.Append(tmpl.turn_end, trained);
  }
  if (tmpl.eos_id >= 0) {
    const int eos = tmpl.eos_id;
    row.Append(std::span<const int>(&eos, 1), turns.back().role == Role::kAssistant);
  }
  row.PadToEnd();
  return Status::Ok();
}

// --- TokenizeOp -----------------------------------------------------------------------

namespace {
constexpr const char* kOutputs[] = {"input_ids", "attention_mask", "labels"};
// With pad false: the tokens only, and where each is in its sample.
constexpr const char* kRaggedOutputs[] = {"input_ids", "position_ids", "labels"};
}  // namespace

ImageTokenKeys ResolveImageTokens(const TokenizeSpec& spec) {
  ImageTokenKeys keys{spec.image_token, spec.image_start, spec.image_end, spec.patch_size,
                      spec.merge_size, ""};
  if (const VisionPreset* p = FindVisionPreset(spec.preset)) {
    if (keys.token.empty()) keys.token = p->tokens.image_pad;
    if (keys.start.empty()) keys.start = p->tokens.vision_start;
    if (keys.end.empty()) keys.end = p->tokens.vision_end;
    if (keys.patch_size == 0) keys.patch_size = p->patch_size;
    if (keys.merge_size == 0) keys.merge_size = p->merge_size;
    keys.preset = PresetOfSizes(spec.preset, spec.patch_size, spec.merge_size);
  }
  if (!spec.video_grid_field.empty()) {
    keys.video_token = spec.video_token;
    const VisionPreset* p = FindVisionPreset(spec.preset);
    if (keys.video_token.empty() && p != nullptr) keys.video_token = p->tokens.video_pad;
  }
  return keys;
}

Status TokenizeOp::Validate(const Spec& s, const std::string& p) {
  if (s.tokenizer.empty()) {
    HR_RETURN_IF_ERROR(schema::NonEmpty(
        p + ".model", s.model,
        "the SentencePiece .model file; or give tokenizer: a Hugging Face tokenizer.json"));
  } else if (!s.model.empty()) {
    return schema::Invalid(p + ".model",
                           "give one of model (a SentencePiece .model file) and tokenizer (a "
                           "Hugging Face tokenizer.json), not both");
  }
  HR_RETURN_IF_ERROR(schema::InRange(p + ".max_length", s.max_length, 1, kMaxTokens));
  if (!s.tokenizer.empty()) {
    HR_RETURN_IF_ERROR(schema::InRange(p + ".image_tokens", s.image_tokens, 0, kMaxTokens));
    HR_RETURN_IF_ERROR(schema::InRange(p + ".patch_size", s.patch_size, 0, 4096));
    HR_RETURN_IF_ERROR(schema::InRange(p + ".merge_size", s.merge_size, 0, 64));
    HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".preset", s.preset));
    const bool expands = !ResolveImageTokens(s).token.empty();
    if (!s.grid_field.empty()) {
      if (!expands) {
        return schema::Invalid(p + ".grid_field",
                               "needs image_token (or a preset): the token each grid's "
                               "count repeats");
      }
      if (s.image_tokens != 0) {
        return schema::Invalid(p + ".image_tokens",
                               "give image_tokens (the same count for every image) or "
                               "grid_field (each image's own), not both");
      }
    } else if (expands && s.image_tokens == 0 && s.video_grid_field.empty()) {
      HR_RETURN_IF_ERROR(
          schema::NonEmpty(p + ".image_field", s.image_field, "the image whose size gives N"));
    }
    if (!s.video_grid_field.empty()) {
      if (ResolveImageTokens(s).video_token.empty()) {
        return schema::Invalid(p + ".video_grid_field",
                               "needs video_token (or a preset): the token each video's "
                               "count repeats");
      }
      HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".video_placeholder", s.video_placeholder,
                                          "the text that stands for a video"));
      if (s.preset == VisionModel::kQwen3Vl && s.video_timestamps_field.empty()) {
        return schema::Invalid(p + ".video_timestamps_field",
                               "is needed with preset qwen3_vl: its prompt writes each "
                               "temporal group's time (video.patchify's video_timestamps)");
      }
    } else if (!s.video_timestamps_field.empty()) {
      return schema::Invalid(p + ".video_timestamps_field",
                             "needs video_grid_field (the videos the timestamps are of)");
    }
  } else if (s.preset != VisionModel::kNone || !s.grid_field.empty() ||
             !s.video_grid_field.empty()) {
    return schema::Invalid(p + (s.preset != VisionModel::kNone ? ".preset"
                                : !s.grid_field.empty()        ? ".grid_field"
                                                               : ".video_grid_field"),
                           "applies to tokenizer: (a tokenizer.json), not to model:");
  }
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".field", s.field, "the conversation value"));
  return schema::AtLeast(p + ".pad_id", s.pad_id, -1);
}

namespace {
bool ImageSized(const TokenizeSpec& spec) {
  return !spec.tokenizer.empty() && spec.grid_field.empty() && spec.video_grid_field.empty() &&
         !ResolveImageTokens(spec).token.empty() && spec.image_tokens == 0;
}

// Where the grids of `grid_field` (an image or a video grid field) are, with the checks
// of Declare: an i64 [3] per item, written by an op that agrees with this one's patch and
// merge sizes.
Result<TokenizeOp::GridInput> ReadGrids(const TokenizeSpec& spec, const std::string& grid_field,
                                        PlanContext& ctx) {
  using Layout = TokenizeOp::GridInput::Layout;
  TokenizeOp::GridInput grids;
  if (spec.tokenizer.empty() || grid_field.empty()) return grids;
  HR_ASSIGN_OR_RETURN(FieldRead field, ctx.ReadField(grid_field));
  const std::vector<int64_t>& shape = field.spec.sample_shape;
  const bool fixed = field.spec.layout == FieldLayout::kFixed;
  const bool padded = fixed && field.items > 0;
  const std::vector<int64_t> want =
      padded ? std::vector<int64_t>{field.items, 3} : std::vector<int64_t>{3};
  if (field.spec.dtype != DType::kI64 || shape != want ||
      (!fixed && field.spec.layout != FieldLayout::kItems &&
       field.spec.layout != FieldLayout::kRagged)) {
    return ctx.Error("grid_field '" + grid_field + "' (from " + field.writer +
                     ") is not an i64 (t, h, w) per image, as vision.patchify's grid_output is");
  }
  const ImageTokenKeys keys = ResolveImageTokens(spec);
  const PatchGeometry mine{keys.patch_size, keys.merge_size, ctx.key(), keys.preset};
  HR_RETURN_IF_ERROR(CheckSameGeometry(
      mine, field.geometry,
      "the grids of '" + grid_field + "' hold patches of " +
          std::to_string(field.geometry.patch_size) + " px merged " +
          std::to_string(field.geometry.merge_size) + "x" +
          std::to_string(field.geometry.merge_size) + " per token"));
  grids.layout = padded ? Layout::kPadded : fixed ? Layout::kOne : Layout::kAppended;
  grids.row = field.row;
  grids.max_items = field.items;
  grids.merge_size = keys.merge_size > 0             ? keys.merge_size
                     : field.geometry.merge_size > 0 ? field.geometry.merge_size
                                                     : 2;
  grids.field = grid_field;
  return grids;
}

// The row of video_timestamps_field: a ragged f32 field of an earlier op; -1 for none.
Result<int> ReadTimestamps(const TokenizeSpec& spec, PlanContext& ctx) {
  if (spec.tokenizer.empty() || spec.video_timestamps_field.empty()) return -1;
  HR_ASSIGN_OR_RETURN(FieldRead field, ctx.ReadField(spec.video_timestamps_field));
  if (field.spec.dtype != DType::kF32 || field.spec.layout != FieldLayout::kRagged) {
    return ctx.Error("video_timestamps_field '" + spec.video_timestamps_field + "' (from " +
                     field.writer + ") is not a ragged f32 field, as video.patchify's "
                     "timestamps_output is");
  }
  return field.row;
}

// attention_mask, or with pad false position_ids.
std::string SecondOutput(const TokenizeSpec& spec) {
  return spec.pad ? kOutputs[1] : kRaggedOutputs[1];
}
}  // namespace

TokenSequence TokenizeOp::Sequence(std::string field) const {
  if (hf_ != nullptr) {
    TokenSequence s{std::move(field), hf_->pad_id, hf_->ignore_index, {}};
    if (hf_->image_token_id >= 0) s.vision_token_ids.push_back(hf_->image_token_id);
    if (hf_->video_token_id >= 0) s.vision_token_ids.push_back(hf_->video_token_id);
    return s;
  }
  return TokenSequence{std::move(field), template_.pad_id, template_.ignore_index, {}};
}

Status TokenizeOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_RETURN_IF_ERROR(ctx.Read(spec.field, ValueKind::kConversation).status());
  if (ImageSized(spec)) HR_RETURN_IF_ERROR(ctx.Read(spec.image_field, ValueKind::kImage).status());
  HR_RETURN_IF_ERROR(ReadGrids(spec, spec.grid_field, ctx).status());
  HR_RETURN_IF_ERROR(ReadGrids(spec, spec.video_grid_field, ctx).status());
  HR_RETURN_IF_ERROR(ReadTimestamps(spec, ctx).status());
  for (const char* name : spec.pad ? kOutputs : kRaggedOutputs) {
    if (spec.pad) {
      ctx.AddField(FieldSpec{spec.output_prefix + name, DType::kI64, {spec.max_length}},
                   ctx.key() + ".max_length " + std::to_string(spec.max_length));
    } else {
      ctx.AddField(FieldSpec{spec.output_prefix + name, DType::kI64, {}, FieldLayout::kRagged,
                             "", spec.output_prefix + "input_ids"},
                   ctx.key() + ".pad false (each sample's tokens, up to max_length " +
                       std::to_string(spec.max_length) + ")");
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<Op>> TokenizeOp::Make(const Spec& spec, PlanContext& ctx) {
  if (!spec.tokenizer.empty()) {
    HR_ASSIGN_OR_RETURN(Buffer json, ctx.ReadFile("tokenizer", spec.tokenizer));
    TokenizerConfig config;
    // The config beside tokenizer.json is read unless another is named, also when the
    // template is given inline: as with transformers' apply_chat_template(chat_template=),
    // the template replaces the config's, its bos/eos/pad tokens stay. Only when the
    // template is inline (or the preset brings one, which the config's replaces) may the
    // file be missing (HfChat::Make then takes the BOS from
    // the tokenizer's post-processor, or refuses a template that needs one).
    std::string config_uri = spec.tokenizer_config;
    const bool named = !config_uri.empty();
    if (!named) {
      const size_t slash = spec.tokenizer.rfind('/');
      config_uri = (slash == std::string::npos ? std::string()
                                                : spec.tokenizer.substr(0, slash + 1)) +
                   "tokenizer_config.json";
    }
    auto bytes = ctx.ReadFile("tokenizer_config", config_uri);
    const VisionPreset* preset = FindVisionPreset(spec.preset);
    const bool optional =
        !named && (!spec.chat_template.empty() ||
                   (preset != nullptr && !preset->chat_template.empty()));
    // ReadFile reports a missing file as kInvalidArgument (other failures keep their
    // code: a denied or unreachable config still stops the plan).
    if (!bytes.ok() && !(optional && bytes.status().code() == StatusCode::kInvalidArgument)) {
      if (!named && preset != nullptr && bytes.status().code() == StatusCode::kInvalidArgument) {
        return Status::InvalidArgument(
            bytes.status().message() + "; preset " + std::string(EnumName(spec.preset)) +
            " brings no chat template (set chat_template, or tokenizer_config to the model's "
            "tokenizer_config.json)");
      }
      return bytes.status();
    }
    if (bytes.ok()) {
      auto parsed = ParseTokenizerConfig(
          std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()),
          config_uri);
      if (!parsed.ok()) return parsed.status().WithContext(ctx.key() + ".tokenizer_config");
      config = std::move(parsed).value();
    }
    HR_ASSIGN_OR_RETURN(GridInput grids, ReadGrids(spec, spec.grid_field, ctx));
    VideoInput videos;
    HR_ASSIGN_OR_RETURN(videos.grids, ReadGrids(spec, spec.video_grid_field, ctx));
    HR_ASSIGN_OR_RETURN(videos.timestamps_row, ReadTimestamps(spec, ctx));
    auto op = FromTokenizer(
        spec, std::string_view(reinterpret_cast<const char*>(json.data()), json.size()), config,
        ctx.row(spec.output_prefix + kOutputs[0]), ctx.row(spec.output_prefix + SecondOutput(spec)),
        ctx.row(spec.output_prefix + kOutputs[2]), ctx.slot(spec.field),
        ImageSized(spec) ? ctx.slot(spec.image_field) : -1, std::move(grids), std::move(videos));
    if (!op.ok()) return op.status().WithContext(ctx.key().substr(0, ctx.key().find('.')));
    if (!spec.pad) ctx.AddSequence((*op)->Sequence(spec.output_prefix + kRaggedOutputs[0]));
    return std::unique_ptr<Op>(*std::move(op));
  }
  HR_ASSIGN_OR_RETURN(Buffer model, ctx.ReadFile("model", spec.model));
  auto op = FromModel(
      spec, std::string_view(reinterpret_cast<const char*>(model.data()), model.size()),
      ctx.row(spec.output_prefix + kOutputs[0]), ctx.row(spec.output_prefix + SecondOutput(spec)),
      ctx.row(spec.output_prefix + kOutputs[2]), ctx.slot(spec.field));
  if (!op.ok()) return op.status().WithContext(ctx.key().substr(0, ctx.key().find('.')));
  if (!spec.pad) ctx.AddSequence((*op)->Sequence(spec.output_prefix + kRaggedOutputs[0]));
  return std::unique_ptr<Op>(*std::move(op));
}

TokenizeOp::TokenizeOp(std::unique_ptr<SentencePieceModel> model, ChatTemplate tmpl,
                       int input_ids_row, int attention_mask_row, int labels_row,
                       int conversation_slot)
    : model_(std::move(model)),
      template_(std::move(tmpl)),
      input_ids_row_(input_ids_row),
      attention_mask_row_(attention_mask_row),
      labels_row_(labels_row),
      conversation_slot_(conversation_slot) {}

Result<std::unique_ptr<TokenizeOp>> TokenizeOp::FromModel(const TokenizeSpec& spec,
                                                          std::string_view model_bytes,
                                                          int input_ids_row,
                                                          int attention_mask_row, int labels_row,
                                                          int conversation_slot) {
  if (input_ids_row < 0 || attention_mask_row < 0 || labels_row < 0 ||
      input_ids_row == attention_mask_row || input_ids_row == labels_row ||
      attention_mask_row == labels_row) {
    return Status::InvalidArgument(
        "text.tokenize: output fields must be distinct and non-negative, got " +
        std::to_string(input_ids_row) + ", " + std::to_string(attention_mask_row) + ", " +
        std::to_string(labels_row));
  }
  if (spec.model.empty()) return Status::InvalidArgument("text.tokenize.model is required");
  auto model = SentencePieceModel::FromSerialized(model_bytes, spec.model);
  if (!model.ok()) return model.status().WithContext("text.tokenize.model");
  HR_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::Make(**model, spec));
  auto op = std::unique_ptr<TokenizeOp>(new TokenizeOp(std::move(model).value(), std::move(tmpl),
                                                       input_ids_row, attention_mask_row,
                                                       labels_row, conversation_slot));
  op->pad_ = spec.pad;
  return op;
}

Result<std::unique_ptr<TokenizeOp>> TokenizeOp::FromTokenizer(
    const TokenizeSpec& spec, std::string_view tokenizer_json, const TokenizerConfig& config,
    int input_ids_row, int attention_mask_row, int labels_row, int conversation_slot,
    int image_slot, GridInput grids, VideoInput videos) {
  if (input_ids_row < 0 || attention_mask_row < 0 || labels_row < 0 ||
      input_ids_row == attention_mask_row || input_ids_row == labels_row ||
      attention_mask_row == labels_row) {
    return Status::InvalidArgument(
        "text.tokenize: output fields must be distinct and non-negative, got " +
        std::to_string(input_ids_row) + ", " + std::to_string(attention_mask_row) + ", " +
        std::to_string(labels_row));
  }
  HR_RETURN_IF_ERROR(Validate(spec, "text.tokenize"));
  HR_ASSIGN_OR_RETURN(std::unique_ptr<HfChat> chat, HfChat::Make(spec, tokenizer_json, config));
  auto op = std::unique_ptr<TokenizeOp>(new TokenizeOp(nullptr, ChatTemplate{}, input_ids_row,
                                                       attention_mask_row, labels_row,
                                                       conversation_slot));
  op->hf_ = std::move(chat);
  op->image_slot_ = image_slot;
  op->grids_ = std::move(grids);
  op->videos_ = std::move(videos);
  op->pad_ = spec.pad;
  return op;
}

namespace {
// This sample's grids, as the op before wrote them (GridInput::Layout).
Result<std::span<const int64_t>> SampleGrids(const SampleContext& ctx,
                                             const TokenizeOp::GridInput& grids) {
  using Layout = TokenizeOp::GridInput::Layout;
  switch (grids.layout) {
    case Layout::kOne:
      return std::span<const int64_t>(reinterpret_cast<const int64_t*>(ctx.rows[grids.row]), 3);
    case Layout::kPadded: {
      const auto* row = reinterpret_cast<const int64_t*>(ctx.rows[grids.row]);
      size_t n = 0;
      while (n < static_cast<size_t>(grids.max_items) && row[3 * n] != 0) ++n;
      return std::span<const int64_t>(row, 3 * n);
    }
    case Layout::kAppended: {
      if (ctx.ragged == nullptr) return Status::Internal("text.tokenize: no appended grids");
      const std::span<const uint8_t> bytes = ctx.ragged->bytes(grids.row);
      return std::span<const int64_t>(reinterpret_cast<const int64_t*>(bytes.data()),
                                      bytes.size() / sizeof(int64_t));
    }
    case Layout::kNone: break;
  }
  return Status::Internal("text.tokenize: no grid field");
}
}  // namespace

Status TokenizeOp::TokenizeImages(std::span<const int64_t> thw, const VideoCounts& videos,
                                  std::span<const Turn> turns, int64_t* const* rows) const {
  thread_local std::vector<int64_t> counts;
  counts.clear();
  const bool with_images = grids_.layout != GridInput::Layout::kNone;
  if (with_images) {
    const int64_t merge = int64_t{grids_.merge_size} * grids_.merge_size;
    for (size_t i = 0; i + 3 <= thw.size(); i += 3) {
      const int64_t patches = thw[i] * thw[i + 1] * thw[i + 2];
      if (thw[i] < 1 || thw[i + 1] < 1 || thw[i + 2] < 1 || patches % merge != 0) {
        return Status::TokenizeError("text.tokenize: " + grids_.field + "[" +
                                     std::to_string(i / 3) + "] = (" + std::to_string(thw[i]) +
                                     ", " + std::to_string(thw[i + 1]) + ", " +
                                     std::to_string(thw[i + 2]) +
                                     ") is not a grid of merge_size " +
                                     std::to_string(grids_.merge_size));
      }
      counts.push_back(patches / merge);
    }
  }
  const std::span<const int64_t> per_image(counts);
  return TokenizeChat(*hf_, turns, with_images ? &per_image : nullptr, grids_.field, videos,
                      rows[0], rows[1], rows[2]);
}

Status TokenizeOp::TokenizeWithGrids(const SampleContext& ctx, std::span<const Turn> turns,
                                     int64_t* const* rows) const {
  std::span<const int64_t> thw;
  if (grids_.layout != GridInput::Layout::kNone) {
    HR_ASSIGN_OR_RETURN(thw, SampleGrids(ctx, grids_));
  }
  VideoCounts videos;
  if (videos_.grids.layout != GridInput::Layout::kNone) {
    HR_ASSIGN_OR_RETURN(videos.thw, SampleGrids(ctx, videos_.grids));
    videos.merge_size = videos_.grids.merge_size;
    videos.source = videos_.grids.field;
    if (videos_.timestamps_row >= 0) {
      if (ctx.ragged == nullptr) return Status::Internal("text.tokenize: no video timestamps");
      const std::span<const uint8_t> bytes = ctx.ragged->bytes(videos_.timestamps_row);
      videos.timestamps = {reinterpret_cast<const float*>(bytes.data()),
                           bytes.size() / sizeof(float)};
    }
  }
  return TokenizeImages(thw, videos, turns, rows);
}

namespace {
// What the size pass tokenized on this thread, for Run to append (TokenizeOp::Predict):
// the sample it was (its conversation, epoch and index) and the image grids it counted
// (Run checks them against the grids the sample made: a grid other than told is
// tokenized again). Run takes it whether it uses it or not.
struct Told {
  const TokenizeOp* op = nullptr;
  const Turn* turns = nullptr;
  int64_t epoch = -1;
  int64_t index = -1;
  std::vector<int64_t> grids;
  int64_t tokens = 0;
  std::vector<int64_t> ids;
  std::vector<int64_t> labels;
};
thread_local Told tls_told;
}  // namespace

bool TokenizeOp::Predict(SizePass& pass) const {
  if (pad_) return true;  // the fields are fixed rows: nothing appended
  tls_told.op = nullptr;
  const TurnsView* conversation = pass.ctx->Get<TurnsView>(conversation_slot_);
  if (conversation == nullptr || pass.ctx->sample == nullptr) return false;
  if (videos_.grids.layout != GridInput::Layout::kNone) return false;  // no video size pass
  const int64_t max_length = hf_ != nullptr ? hf_->max_length : template_.max_length;
  thread_local std::vector<int64_t> buffer;
  buffer.resize(static_cast<size_t>(3 * max_length));
  int64_t* rows[3];
  for (int r = 0; r < 3; ++r) rows[r] = buffer.data() + r * max_length;
  Told& told = tls_told;
  told.grids.clear();
  int image_tokens = hf_ != nullptr ? hf_->image_tokens : 0;
  if (hf_ != nullptr && grids_.layout != GridInput::Layout::kNone) {
    if (grids_.layout != GridInput::Layout::kAppended || pass.grids.empty()) return false;
    told.grids = pass.grids[static_cast<size_t>(grids_.row)];
  } else if (hf_ != nullptr && image_slot_ >= 0) {
    const SizePass::Size image = pass.images[static_cast<size_t>(image_slot_)];
    if (image.width <= 0) return false;
    const Result<int> tokens = hf_->ImageTokens(image.width, image.height);
    if (!tokens.ok()) return false;
    image_tokens = *tokens;
    told.grids = {image.width, image.height};
  }
  const int64_t epoch = pass.ctx->sample->epoch;
  const int64_t index = pass.ctx->sample->index;
  if (ToldSequence* before = pass.ctx->sample->told;
      before != nullptr && !before->ids.empty() && before->grids == told.grids) {
    // What the size pass before the run tokenized (a planned pack's sizer), taken once.
    told.ids.swap(before->ids);
    told.labels.swap(before->labels);
    before->ids.clear();
    before->labels.clear();
  } else {
    // Tokenized here.
    Status status;
    if (hf_ != nullptr && grids_.layout != GridInput::Layout::kNone) {
      status = TokenizeImages(told.grids, VideoCounts{}, conversation->turns, rows);
    } else if (hf_ != nullptr) {
      status = TokenizeChat(*hf_, conversation->turns, image_tokens, rows[0], rows[1], rows[2]);
    } else {
      status = TokenizeConversation(*model_, template_, conversation->turns, rows[0], rows[1],
                                    rows[2]);
    }
    if (!status.ok()) return false;
    const int64_t n = std::find(rows[1], rows[1] + max_length, 0) - rows[1];
    told.ids.assign(rows[0], rows[0] + n);
    told.labels.assign(rows[2], rows[2] + n);
  }
  const auto n = static_cast<int64_t>(told.ids.size());
  told.tokens = n;
  told.turns = conversation->turns.data();
  told.epoch = epoch;
  told.index = index;
  told.op = this;
  for (const int row : {input_ids_row_, labels_row_, attention_mask_row_}) {
    pass.rows[static_cast<size_t>(row)] += n;
  }
  if (pass.sequence != nullptr) {
    pass.sequence->grids = told.grids;
    pass.sequence->ids = told.ids;
    pass.sequence->labels = told.labels;
  }
  return true;
}

bool TokenizeOp::TakeTold(const SampleContext& ctx, const Turn* turns) const {
  Told& told = tls_told;
  const bool same = told.op == this && told.turns == turns && ctx.sample != nullptr &&
                    told.epoch == ctx.sample->epoch && told.index == ctx.sample->index;
  told.op = nullptr;  // taken, used or not
  if (!same) return false;
  // The grids the sample made must be those the pass counted.
  if (hf_ != nullptr && grids_.layout != GridInput::Layout::kNone) {
    const Result<std::span<const int64_t>> thw = SampleGrids(ctx, grids_);
    return thw.ok() && std::equal(thw->begin(), thw->end(), told.grids.begin(), told.grids.end());
  }
  if (hf_ != nullptr && image_slot_ >= 0) {
    const ImageView* image = ctx.Get<ImageView>(image_slot_);
    return image != nullptr && told.grids.size() == 2 && told.grids[0] == image->width &&
           told.grids[1] == image->height;
  }
  return true;
}

Status TokenizeOp::Run(SampleContext& ctx) const {
  if (ctx.rows == nullptr) return Status::Internal("text.tokenize: context without batch rows");
  const TurnsView* conversation = ctx.Get<TurnsView>(conversation_slot_);
  if (conversation == nullptr) {
    return Status::MissingField("the record has no conversation for text.tokenize");
  }
  // Padded: the kernels write the batch rows in place. Ragged: they write this thread's
  // max_length rows, and the tokens are appended from there; or the size pass tokenized
  // the sample already (Predict), and they are appended from what it kept.
  thread_local std::vector<int64_t> unpadded;
  const int64_t max_length = hf_ != nullptr ? hf_->max_length : template_.max_length;
  int64_t* rows[3];
  int64_t n = 0;
  const int64_t* ids = nullptr;
  const int64_t* labels = nullptr;
  if (!pad_ && TakeTold(ctx, conversation->turns.data())) {
    n = tls_told.tokens;
    ids = tls_told.ids.data();
    labels = tls_told.labels.data();
  } else {
    if (pad_) {
      rows[0] = reinterpret_cast<int64_t*>(ctx.rows[input_ids_row_]);
      rows[1] = reinterpret_cast<int64_t*>(ctx.rows[attention_mask_row_]);
      rows[2] = reinterpret_cast<int64_t*>(ctx.rows[labels_row_]);
    } else {
      unpadded.resize(static_cast<size_t>(3 * max_length));
      for (int r = 0; r < 3; ++r) rows[r] = unpadded.data() + r * max_length;
    }
    if (hf_ != nullptr && (grids_.layout != GridInput::Layout::kNone ||
                           videos_.grids.layout != GridInput::Layout::kNone)) {
      HR_RETURN_IF_ERROR(TokenizeWithGrids(ctx, conversation->turns, rows));
    } else if (hf_ != nullptr) {
      int image_tokens = hf_->image_tokens;
      if (image_slot_ >= 0) {
        const ImageView* image = ctx.Get<ImageView>(image_slot_);
        if (image == nullptr) {
          return Status::MissingField(
              "the sample has no image to size text.tokenize's image tokens");
        }
        HR_ASSIGN_OR_RETURN(image_tokens, hf_->ImageTokens(image->width, image->height));
      }
      HR_RETURN_IF_ERROR(TokenizeChat(*hf_, conversation->turns, image_tokens, rows[0],
                                      rows[1], rows[2]));
    } else {
      HR_RETURN_IF_ERROR(TokenizeConversation(*model_, template_, conversation->turns, rows[0],
                                              rows[1], rows[2]));
    }
    if (pad_) return Status::Ok();
    // The tokens are the mask's leading ones (the kernels fill left to right).
    n = std::find(rows[1], rows[1] + max_length, 0) - rows[1];
    ids = rows[0];
    labels = rows[2];
  }
  HR_ASSIGN_OR_RETURN(uint8_t * ids_out, ctx.AppendRows(input_ids_row_, n));
  std::memcpy(ids_out, ids, static_cast<size_t>(n) * sizeof(int64_t));
  HR_ASSIGN_OR_RETURN(uint8_t * labels_out, ctx.AppendRows(labels_row_, n));
  std::memcpy(labels_out, labels, static_cast<size_t>(n) * sizeof(int64_t));
  HR_ASSIGN_OR_RETURN(uint8_t * positions, ctx.AppendRows(attention_mask_row_, n));
  auto* position = reinterpret_cast<int64_t*>(positions);
  for (int64_t i = 0; i < n; ++i) position[i] = i;
  return Status::Ok();
}

}  // namespace headrace
