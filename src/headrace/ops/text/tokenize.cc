#include "headrace/ops/text/tokenize.h"

#include <sentencepiece_processor.h>

#include <algorithm>
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
  if (!spec.pad) {
    return Status::InvalidArgument(
        "text.tokenize.pad: false is not supported yet (batches hold max_length rows)");
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

TokenizeOp::TokenizeOp(std::unique_ptr<SentencePieceModel> model, ChatTemplate tmpl,
                       int input_ids_field, int attention_mask_field, int labels_field)
    : model_(std::move(model)),
      template_(std::move(tmpl)),
      input_ids_field_(input_ids_field),
      attention_mask_field_(attention_mask_field),
      labels_field_(labels_field) {}

Result<std::unique_ptr<TokenizeOp>> TokenizeOp::Make(const TokenizeSpec& spec,
                                                     std::string_view model_bytes,
                                                     int input_ids_field, int attention_mask_field,
                                                     int labels_field) {
  if (input_ids_field < 0 || attention_mask_field < 0 || labels_field < 0 ||
      input_ids_field == attention_mask_field || input_ids_field == labels_field ||
      attention_mask_field == labels_field) {
    return Status::InvalidArgument(
        "text.tokenize: output fields must be distinct and non-negative, got " +
        std::to_string(input_ids_field) + ", " + std::to_string(attention_mask_field) + ", " +
        std::to_string(labels_field));
  }
  if (spec.model.empty()) return Status::InvalidArgument("text.tokenize.model is required");
  auto model = SentencePieceModel::FromSerialized(model_bytes, spec.model);
  if (!model.ok()) return model.status().WithContext("text.tokenize.model");
  HR_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::Make(**model, spec));
  return std::unique_ptr<TokenizeOp>(new TokenizeOp(std::move(model).value(), std::move(tmpl),
                                                    input_ids_field, attention_mask_field,
                                                    labels_field));
}

Status TokenizeOp::Run(SampleContext& ctx) const {
  if (ctx.sample == nullptr || ctx.sample->record == nullptr || ctx.slots == nullptr) {
    return Status::Internal("text.tokenize: context without a sample record or slots");
  }
  return TokenizeConversation(*model_, template_, ctx.sample->Conversation(),
                              reinterpret_cast<int64_t*>(ctx.slots[input_ids_field_]),
                              reinterpret_cast<int64_t*>(ctx.slots[attention_mask_field_]),
                              reinterpret_cast<int64_t*>(ctx.slots[labels_field_]));
}

}  // namespace headrace
