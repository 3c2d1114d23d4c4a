// The tokenizer: SentencePiece BPE trained on the conversations' text
// (TrainChatTokenizer, make_sample.h), written as tokenizer.model and tokenizer.vocab.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "make_sample/make_sample.h"
#include "make_sample/make_sample_internal.h"

namespace headrace {
namespace {

class SentenceList : public sentencepiece::SentenceIterator {
 public:
  explicit SentenceList(const std::vector<std::string>& sentences) : sentences_(sentences) {}
  bool done() const override { return i_ >= sentences_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return sentences_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& sentences_;
  size_t i_ = 0;
};

// SentencePiece loads every sentence into memory; past this many, a stride sample of the
// conversations is used (deterministically, unlike SentencePiece's own sampling).
constexpr size_t kMaxTrainingSentences = 200'000;

}  // namespace

Result<std::string> TrainChatTokenizer(const std::vector<std::string>& sentences,
                                       int vocab_size) {
  SentenceList iterator(sentences);
  // No model_prefix: the trainer would record it (an absolute path) inside the model,
  // and the files would differ by where they were written.
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"hard_vocab_limit", "false"},
      {"character_coverage", "1.0"},
      {"user_defined_symbols", "<image>,<|system|>,<|user|>,<|assistant|>"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "3"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"num_threads", "1"},  // BPE training is serial anyway; keeps the model reproducible
      {"minloglevel", "2"},  // SentencePiece logs every step at INFO
  };
  std::string model;
  const auto trained = sentencepiece::SentencePieceTrainer::Train(args, &iterator, &model);
  if (!trained.ok()) {
    return Status::InvalidArgument("training the tokenizer failed: " + trained.ToString());
  }
  return model;
}

namespace make_sample_detail {

Status TrainTokenizer(const std::vector<std::vector<QA>>& conversations,
                      const MakeSampleOptions& options) {
  size_t total = 0;
  for (const auto& c : conversations) total += 2 * c.size();
  const size_t stride =
      std::max<size_t>(1, (total + kMaxTrainingSentences - 1) / kMaxTrainingSentences);
  std::vector<std::string> sentences;
  for (size_t i = 0; i < conversations.size(); i += stride) {
    for (const QA& qa : conversations[i]) {
      sentences.push_back(qa.question);
      sentences.push_back(qa.answer);
    }
  }
  HR_ASSIGN_OR_RETURN(const std::string model, TrainChatTokenizer(sentences, options.vocab_size));
  // The .vocab file as spm_train writes it: "piece<TAB>score" per id.
  sentencepiece::SentencePieceProcessor sp;
  const auto loaded = sp.LoadFromSerializedProto(model);
  if (!loaded.ok()) {
    return Status::Internal("the trained tokenizer does not load: " + loaded.ToString());
  }
  std::ostringstream vocab;
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    vocab << sp.IdToPiece(id) << '\t' << sp.GetScore(id) << '\n';
  }
  const fs::path root(options.out_dir);
  HR_RETURN_IF_ERROR(WriteFile(root / "tokenizer.model", model.data(), model.size()));
  const std::string vocab_text = vocab.str();
  return WriteFile(root / "tokenizer.vocab", vocab_text.data(), vocab_text.size());
}

}  // namespace make_sample_detail
}  // namespace headrace
