#include "headrace/ops/text/tokenize.h"

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "headrace/core/rng.h"

namespace headrace {
namespace {

namespace fs = std::filesystem;

constexpr int kPad = 3;  // the pad id the main test model declares

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return i_ >= lines_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return lines_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t i_ = 0;
};

std::vector<std::string> Corpus() {
  static const char* const kWords[] = {
      "what",   "colour", "is",      "the",   "bus",   "blue",  "red", "green", "box",   "circle",
      "how",    "many",   "objects", "are",   "there", "three", "two", "left",  "right", "top",
      "bottom", "a",      "small",   "large", "ball",  "near",  "sky", "field", "where", "it"};
  constexpr int kWordCount = sizeof(kWords) / sizeof(kWords[0]);
  Rng rng(7);
  std::vector<std::string> lines;
  for (int i = 0; i < 400; ++i) {
    std::string line = i % 4 == 0 ? "<image>\n" : "";
    const int n = 3 + static_cast<int>(rng.Below(8));
    for (int w = 0; w < n; ++w) {
      std::string word = kWords[rng.Below(kWordCount)];
      if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
      line += word;
      line += w + 1 == n ? (rng.Bernoulli(0.5) ? "?" : ".") : " ";
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

// The op as the planner makes it: from the bytes of spec.model (here read from local
// disk; the planner reads them through its Storage).
Result<std::unique_ptr<TokenizeOp>> MakeFromFile(const TokenizeSpec& spec, int ids, int mask,
                                                 int labels) {
  std::ifstream in(spec.model, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return TokenizeOp::FromModel(spec, bytes, ids, mask, labels, /*conversation_slot=*/0);
}

void Train(std::unordered_map<std::string, std::string> args) {
  const std::vector<std::string> corpus = Corpus();
  VectorIterator it(corpus);
  args.emplace("model_type", "bpe");
  args.emplace("vocab_size", "300");
  args.emplace("hard_vocab_limit", "false");
  args.emplace("character_coverage", "1.0");
  args.emplace("minloglevel", "2");
  args.emplace("num_threads", "1");
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it);
  ASSERT_TRUE(status.ok()) << status.ToString();
}

struct Rows {
  std::vector<int64_t> ids, mask, labels;
  int64_t real() const {
    int64_t n = 0;
    for (int64_t m : mask) n += m;
    return n;
  }
};

Turn User(std::string text) { return Turn{Role::kUser, std::move(text)}; }
Turn Assistant(std::string text) { return Turn{Role::kAssistant, std::move(text)}; }
Turn System(std::string text) { return Turn{Role::kSystem, std::move(text)}; }

class TokenizeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* env = std::getenv("HEADRACE_TEST_TMP");
    dir_ =
        fs::path(env != nullptr ? env : "/tmp") / ("tokenize_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // What `headrace make-sample` trains: the template's markers as user-defined
    // symbols, a pad id, and whitespace kept so that a "\n" turn_end is a token.
    Train({{"model_prefix", (dir_ / "chat").string()},
           {"user_defined_symbols", "<image>,<|system|>,<|user|>,<|assistant|>"},
           {"unk_id", "0"},
           {"bos_id", "1"},
           {"eos_id", "2"},
           {"pad_id", "3"},
           {"add_dummy_prefix", "false"},
           {"remove_extra_whitespaces", "false"}});
    // SentencePiece's defaults: no pad id, whitespace normalized away.
    Train({{"model_prefix", (dir_ / "plain").string()}});
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  static std::string ModelPath(const char* name) {
    return (dir_ / (std::string(name) + ".model")).string();
  }

  static TokenizeSpec Spec(int max_length = 64) {
    TokenizeSpec spec;
    spec.model = ModelPath("chat");
    spec.max_length = max_length;
    return spec;
  }

  static std::unique_ptr<TokenizeOp> MakeOp(const TokenizeSpec& spec) {
    auto op = MakeFromFile(spec, 0, 1, 2);
    EXPECT_TRUE(op.ok()) << op.status().ToString();
    return op.ok() ? std::move(op).value() : nullptr;
  }

  // Runs the op as the executor would: through a SampleContext whose rows point at
  // this sample's rows, the record's turns bound to the conversation value (slot 0).
  static Rows Run(const TokenizeOp& op, std::vector<Turn> turns, Status* status = nullptr) {
    const int64_t n = op.chat_template().max_length;
    Rows rows{std::vector<int64_t>(n, -7), std::vector<int64_t>(n, -7),
              std::vector<int64_t>(n, -7)};
    SampleRecord record;
    record.turns = std::move(turns);
    Sample sample;
    sample.record = &record;
    uint8_t* slots[3] = {reinterpret_cast<uint8_t*>(rows.ids.data()),
                         reinterpret_cast<uint8_t*>(rows.mask.data()),
                         reinterpret_cast<uint8_t*>(rows.labels.data())};
    Value values[1] = {TurnsView{record.turns}};
    SampleContext ctx;
    ctx.sample = &sample;
    ctx.rows = slots;
    ctx.values = values;
    Status s = op.Run(ctx);
    if (status != nullptr) {
      *status = s;
    } else {
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return rows;
  }

  // Independent reference: SentencePiece itself, one piece at a time.
  static std::vector<int> Encode(std::string_view text) {
    static sentencepiece::SentencePieceProcessor sp;
    static const bool loaded = sp.Load(ModelPath("chat")).ok();
    EXPECT_TRUE(loaded);
    std::vector<int> ids;
    EXPECT_TRUE(sp.Encode(text, &ids).ok());
    return ids;
  }

  static inline fs::path dir_;
};

TEST_F(TokenizeTest, LabelsCoverExactlyTheAssistantTextAndTurnEnd) {
  const TokenizeSpec spec = Spec();
  auto op = MakeOp(spec);
  const Rows rows = Run(*op, {User("<image>\nWhat colour is the bus?"), Assistant("Blue."),
                              User("Where is it?"), Assistant("Top left.")});

  std::vector<int64_t> want_ids, want_labels;
  auto add = [&](const std::vector<int>& ids, bool trained) {
    for (int id : ids) {
      want_ids.push_back(id);
      want_labels.push_back(trained ? id : spec.ignore_index);
    }
  };
  add({1}, false);  // BOS
  add(Encode(spec.user_prefix), false);
  add(Encode("<image>\nWhat colour is the bus?"), false);
  add(Encode(spec.turn_end), false);
  add(Encode(spec.assistant_prefix), false);
  add(Encode("Blue."), true);
  add(Encode(spec.turn_end), true);
  add(Encode(spec.user_prefix), false);
  add(Encode("Where is it?"), false);
  add(Encode(spec.turn_end), false);
  add(Encode(spec.assistant_prefix), false);
  add(Encode("Top left."), true);
  add(Encode(spec.turn_end), true);
  add({2}, true);  // EOS after an assistant turn is trained: it is how the model stops
  ASSERT_LT(want_ids.size(), 64u);

  const auto n = static_cast<std::ptrdiff_t>(want_ids.size());
  EXPECT_EQ(std::vector<int64_t>(rows.ids.begin(), rows.ids.begin() + n), want_ids);
  EXPECT_EQ(std::vector<int64_t>(rows.labels.begin(), rows.labels.begin() + n), want_labels);

  // And in words: the trained pieces spell the two answers, each with its turn end.
  std::string trained;
  for (int64_t id : rows.labels) {
    if (id != spec.ignore_index) trained += op->model().IdToPiece(static_cast<int>(id)) + "|";
  }
  std::string want;
  for (const char* text : {"Blue.", "\n", "Top left.", "\n"}) {
    for (int id : Encode(text)) want += op->model().IdToPiece(id) + "|";
  }
  want += "</s>|";
  EXPECT_EQ(trained, want);
}

TEST_F(TokenizeTest, PadsToMaxLengthAndMasksThePadding) {
  auto op = MakeOp(Spec(48));
  const Rows rows = Run(*op, {User("How many objects are there?"), Assistant("Three.")});
  const int64_t real = rows.real();
  ASSERT_GT(real, 5);
  ASSERT_LT(real, 48);
  for (int64_t i = 0; i < 48; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(rows.mask[i], i < real ? 1 : 0);
    if (i >= real) {
      EXPECT_EQ(rows.ids[i], kPad);
      EXPECT_EQ(rows.labels[i], -100);
    }
  }
  EXPECT_EQ(rows.ids[real - 1], 2);  // EOS is the last real token
}

TEST_F(TokenizeTest, TruncatesOnTheRight) {
  const std::vector<Turn> turns = {
      User("<image>\nWhat colour is the box?"), Assistant("The box is red."),
      User("How many objects are there?"), Assistant("There are three objects.")};
  const Rows full = Run(*MakeOp(Spec(128)), turns);
  const int64_t n = full.real();
  const int64_t cut = n - 5;
  const Rows rows = Run(*MakeOp(Spec(static_cast<int>(cut))), turns);

  ASSERT_EQ(static_cast<int64_t>(rows.ids.size()), cut);
  EXPECT_EQ(rows.ids, std::vector<int64_t>(full.ids.begin(), full.ids.begin() + cut));
  EXPECT_EQ(rows.labels, std::vector<int64_t>(full.labels.begin(), full.labels.begin() + cut));
  EXPECT_EQ(rows.mask, std::vector<int64_t>(cut, 1));
  EXPECT_NE(rows.ids.back(), 2);  // the EOS fell off the end
}

TEST_F(TokenizeTest, AddsBosAndEosOnlyWhenAsked) {
  const std::vector<Turn> turns = {User("Where is the ball?"), Assistant("On the left.")};
  const Rows both = Run(*MakeOp(Spec()), turns);
  EXPECT_EQ(both.ids[0], 1);
  EXPECT_EQ(both.labels[0], -100);  // BOS is never trained
  EXPECT_EQ(both.ids[both.real() - 1], 2);

  TokenizeSpec spec = Spec();
  spec.add_bos = false;
  spec.add_eos = false;
  const Rows neither = Run(*MakeOp(spec), turns);
  EXPECT_EQ(neither.real(), both.real() - 2);
  EXPECT_EQ(std::vector<int64_t>(neither.ids.begin(), neither.ids.begin() + neither.real()),
            std::vector<int64_t>(both.ids.begin() + 1, both.ids.begin() + both.real() - 1));
}

TEST_F(TokenizeTest, TrainsTheFinalEosOnlyAfterAnAssistantTurn) {
  auto op = MakeOp(Spec());
  const Rows rows = Run(*op, {User("Where is the ball?"), Assistant("Left."), User("Why?")});
  const int64_t last = rows.real() - 1;
  EXPECT_EQ(rows.ids[last], 2);
  EXPECT_EQ(rows.labels[last], -100);
}

TEST_F(TokenizeTest, NeverTrainsSystemOrUserTurns) {
  auto op = MakeOp(Spec());
  const Rows rows = Run(*op, {System("Answer briefly."), User("What colour is the sky?")});
  for (int64_t label : rows.labels) EXPECT_EQ(label, -100);
}

TEST_F(TokenizeTest, KeepsDeclaredSymbolsAsSingleTokens) {
  auto op = MakeOp(Spec());
  const SentencePieceModel& model = op->model();
  const Rows rows =
      Run(*op, {System("Be brief."), User("<image>\nWhat is there?"), Assistant("A red box.")});
  auto count = [&](std::string_view piece) {
    const int id = model.PieceToId(piece);
    EXPECT_NE(id, 0) << piece << " is unknown to the model";
    int64_t n = 0;
    for (int64_t t : rows.ids) n += t == id;
    return n;
  };
  EXPECT_EQ(count("<image>"), 1);
  EXPECT_EQ(count("<|system|>"), 1);
  EXPECT_EQ(count("<|user|>"), 1);
  EXPECT_EQ(count("<|assistant|>"), 1);
  // The image placeholder opens the user's text, right after the user prefix.
  const auto& prefix = op->chat_template().prefix[static_cast<int>(Role::kUser)];
  ASSERT_FALSE(prefix.empty());
  EXPECT_EQ(prefix[0], model.PieceToId("<|user|>"));
}

TEST_F(TokenizeTest, RejectsAConversationWithoutTurns) {
  auto op = MakeOp(Spec());
  Status status;
  Run(*op, {}, &status);
  EXPECT_EQ(status.code(), StatusCode::kTokenizeError) << status.ToString();
}

TEST_F(TokenizeTest, IsDeterministicAcrossThreads) {
  auto op = MakeOp(Spec(40));
  std::vector<std::vector<Turn>> conversations;
  for (int i = 0; i < 32; ++i) {
    std::vector<Turn> turns = {User("<image>\nHow many objects are there?"),
                               Assistant(std::string(i % 5 + 1, 'x') + " red boxes.")};
    if (i % 3 == 0) turns.push_back(User("Where is the bus?"));
    if (i % 3 == 0) turns.push_back(Assistant("Near the bottom right."));
    conversations.push_back(std::move(turns));
  }
  std::vector<Rows> want;
  for (const auto& turns : conversations) want.push_back(Run(*op, turns));

  constexpr int kThreads = 4;
  std::vector<std::vector<Rows>> got(kThreads);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int rep = 0; rep < 8; ++rep) {
          for (const auto& turns : conversations) got[t].push_back(Run(*op, turns));
        }
      });
    }
  }
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(got[t].size(), 8 * conversations.size());
    for (size_t i = 0; i < got[t].size(); ++i) {
      const Rows& w = want[i % conversations.size()];
      EXPECT_EQ(got[t][i].ids, w.ids);
      EXPECT_EQ(got[t][i].mask, w.mask);
      EXPECT_EQ(got[t][i].labels, w.labels);
    }
  }
}

// Ordinary text of about `bytes` bytes: the corpus's words with punctuation, runs of
// spaces, newlines and a few non-ASCII words.
std::string LongText(size_t bytes, uint64_t seed) {
  static const char* const kWords[] = {"what", "colour", "is",    "the",   "bus",  "blue",
                                       "red",  "Where",  "many",  "objects", "café", "naïve",
                                       "<image>", "three", "left", "bottom", "sky", "ball."};
  constexpr int kWordCount = sizeof(kWords) / sizeof(kWords[0]);
  static const char* const kGaps[] = {" ", " ", " ", " ", "  ", ", ", "? ", ".\n", "\n", "   "};
  Rng rng(seed);
  std::string text;
  text.reserve(bytes + 16);
  while (text.size() < bytes) {
    text += kWords[rng.Below(kWordCount)];
    text += kGaps[rng.Below(10)];
  }
  return text;
}

TEST_F(TokenizeTest, LeadingTokensEqualThoseOfTheWholeText) {
  auto op = MakeOp(Spec());
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const std::string text = LongText(64 << 10, seed);
    const std::vector<int> full = Encode(text);
    for (int64_t count : {1, 2, 7, 48, 128, 1000, 4000}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << ", count " << count);
      std::vector<int> ids;
      ASSERT_TRUE(EncodeLeadingTokens(op->model(), text, count, &ids).ok());
      ASSERT_GE(static_cast<int64_t>(ids.size()), count);
      EXPECT_EQ(std::vector<int>(ids.begin(), ids.begin() + count),
                std::vector<int>(full.begin(), full.begin() + count));
    }
  }
}

TEST_F(TokenizeTest, LeadingTokensOfAShortTextAreAllOfIt) {
  auto op = MakeOp(Spec());
  std::vector<int> ids;
  ASSERT_TRUE(EncodeLeadingTokens(op->model(), "What colour is the bus?", 100, &ids).ok());
  EXPECT_EQ(ids, Encode("What colour is the bus?"));
}

TEST_F(TokenizeTest, LeadingTokensOfTextWithoutSpacesAreCutAtACharacter) {
  auto op = MakeOp(Spec());
  std::string text;
  while (text.size() < (16 << 10)) text += "whatcolourcafé";
  std::vector<int> ids;
  ASSERT_TRUE(EncodeLeadingTokens(op->model(), text, 16, &ids).ok());
  ASSERT_GE(ids.size(), 16u);
  const std::vector<int> full = Encode(text);
  EXPECT_EQ(std::vector<int>(ids.begin(), ids.begin() + 16),
            std::vector<int>(full.begin(), full.begin() + 16));
}

TEST_F(TokenizeTest, AHugeTurnCostsWhatMaxLengthNeeds) {
  // Measured before the fix: a 100 MB turn took 14 GB and 124 s for max_length 48,
  // because the whole text was encoded and then cut.
  const TokenizeSpec spec = Spec(48);
  auto op = MakeOp(spec);
  const std::string text = LongText(4 << 20, 9);
  const int64_t before = op->model().bytes_encoded();
  const Rows rows = Run(*op, {User(text), Assistant("Blue.")});
  const int64_t encoded = op->model().bytes_encoded() - before;
  // A few hundred bytes of the text, whatever its length.
  EXPECT_LE(encoded, 2 * (spec.max_length + kLeadingSlackTokens) * kLeadingBytesPerToken);

  // The row is the one the whole text would give: BOS, the user prefix, then the
  // text's first tokens up to max_length. The reference encodes a 64 KiB prefix cut
  // before a space, which holds the same first tokens (LeadingTokensEqualThoseOf...).
  std::vector<int64_t> want = {1};
  for (int id : Encode(spec.user_prefix)) want.push_back(id);
  for (int id : Encode(text.substr(0, text.find(' ', 64 << 10)))) want.push_back(id);
  want.resize(spec.max_length);
  EXPECT_EQ(rows.ids, want);
  EXPECT_EQ(rows.mask, std::vector<int64_t>(spec.max_length, 1));
}

TEST_F(TokenizeTest, UsesZeroForPaddingWhenTheModelHasNoPadUnlessTold) {
  TokenizeSpec spec = Spec(32);
  spec.model = ModelPath("plain");
  spec.turn_end = " END";  // this model strips a bare "\n"
  const Rows rows = Run(*MakeOp(spec), {User("Where?"), Assistant("Left.")});
  ASSERT_LT(rows.real(), 32);
  EXPECT_EQ(rows.ids.back(), 0);

  spec.pad_id = 5;
  EXPECT_EQ(Run(*MakeOp(spec), {User("Where?"), Assistant("Left.")}).ids.back(), 5);
}

TEST_F(TokenizeTest, RejectsATurnEndTheModelNormalizesAway) {
  TokenizeSpec spec = Spec();
  spec.model = ModelPath("plain");
  auto op = MakeFromFile(spec, 0, 1, 2);
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(op.status().message().find("text.tokenize.turn_end"), std::string::npos)
      << op.status().ToString();
}

TEST_F(TokenizeTest, RejectsEmptyModelBytesNamingTheKeyAndUri) {
  TokenizeSpec spec = Spec();
  spec.model = "s3://bucket/empty.model";
  auto op = TokenizeOp::FromModel(spec, "", 0, 1, 2, 0);
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(op.status().message().find("text.tokenize.model"), std::string::npos);
  EXPECT_NE(op.status().message().find(spec.model), std::string::npos) << op.status().ToString();
}

TEST_F(TokenizeTest, RejectsAFileThatIsNotAModel) {
  const std::string path = (dir_ / "garbage.model").string();
  std::ofstream(path) << "this is not a protobuf";
  TokenizeSpec spec = Spec();
  spec.model = path;
  auto op = MakeFromFile(spec, 0, 1, 2);
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(op.status().message().find(path), std::string::npos) << op.status().ToString();
}

TEST_F(TokenizeTest, RejectsBadSpecsAndFields) {
  TokenizeSpec spec = Spec(0);
  EXPECT_EQ(MakeFromFile(spec, 0, 1, 2).status().code(), StatusCode::kInvalidArgument);
  spec = Spec();
  spec.pad_id = 100000;
  EXPECT_EQ(MakeFromFile(spec, 0, 1, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeFromFile(Spec(), 0, 0, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeFromFile(Spec(), -1, 1, 2).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace headrace
