#include "headrace/ops/text/hf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "headrace/ops/text/chat_template.h"
#include "headrace/ops/text/hf_chat.h"
#include "headrace/ops/text/tokenize.h"

namespace headrace {
namespace {

// JSON string escaping for the small test files built below.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// The byte-level character of byte b (GPT-2's alphabet), as UTF-8.
std::string ByteChar(int b) {
  const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  int cp = b;
  if (!printable) {
    cp = 256;
    for (int x = 0; x < b; ++x) {
      const bool p = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
      if (!p) ++cp;
    }
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

struct Options {
  std::string merges_format = "string";  // or "pairs"
  std::string model_type = "BPE";
  std::string pre_tokenizer{};  // "" : Split(Qwen-like regex) + ByteLevel
  std::string post_processor = "null";
  bool ignore_merges = false;
};

// A byte-level BPE tokenizer.json: the 256 byte characters (ids 0..255), then merges
// h+e, l+l, he+ll, hell+o... and " w"; added tokens <|im_start|>, <|im_end|>, <|pad|>.
std::string TokenizerJson(const Options& o = {}) {
  std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {ByteChar(' '), "w"},
      {"o", "r"}, {ByteChar(' ') + "w", "or"}, {"l", "d"}, {ByteChar(' ') + "wor", "ld"}};
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(ByteChar(b));
  for (const auto& [a, b] : merges) vocab.push_back(a + b);
  std::string json = "{\"version\":\"1.0\",\"added_tokens\":[";
  const char* added[] = {"<|im_start|>", "<|im_end|>",    "<|pad|>",      "<|image_pad|>",
                         "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"};
  for (int i = 0; i < 7; ++i) {
    json += std::string(i ? "," : "") + "{\"id\":" + std::to_string(vocab.size() + i) +
            ",\"content\":" + Quote(added[i]) + ",\"special\":true}";
  }
  json += "],\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":";
  json += o.pre_tokenizer.empty()
              ? std::string("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
                            "\"pattern\":{\"Regex\":") +
                    Quote(R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)") +
                    "},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
                    "\"add_prefix_space\":false,\"use_regex\":false}]}"
              : o.pre_tokenizer;
  json += ",\"post_processor\":" + o.post_processor;
  json += ",\"model\":{\"type\":" + Quote(o.model_type) + ",\"ignore_merges\":" +
          (o.ignore_merges ? "true" : "false") + ",\"vocab\":{";
  for (size_t i = 0; i < vocab.size(); ++i) {
    json += std::string(i ? "," : "") + Quote(vocab[i]) + ":" + std::to_string(i);
  }
  json += "},\"merges\":[";
  for (size_t i = 0; i < merges.size(); ++i) {
    json += i ? "," : "";
    json += o.merges_format == "string"
                ? Quote(merges[i].first + " " + merges[i].second)
                : "[" + Quote(merges[i].first) + "," + Quote(merges[i].second) + "]";
  }
  return json + "]}}";
}

constexpr int kHello = 256 + 3, kSpaceWorld = 256 + 8, kImStart = 265, kImEnd = 266,
              kPadToken = 267, kImagePad = 268, kVideoPad = 269;

std::unique_ptr<HfTokenizer> Load(const Options& o = {}) {
  auto t = HfTokenizer::FromJson(TokenizerJson(o), "test/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<int> Encode(const HfTokenizer& t, std::string_view text, bool special = false) {
  std::vector<int> ids;
  t.Encode(text, special, &ids);
  return ids;
}

TEST(HfTokenizer, MergesByRankInBothMergeFormats) {
  for (const char* format : {"string", "pairs"}) {
    auto t = Load({.merges_format = format});
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(Encode(*t, "hello world"), (std::vector<int>{kHello, kSpaceWorld})) << format;
    // No merge applies across the split between "hello" and "!".
    EXPECT_EQ(Encode(*t, "hello!"), (std::vector<int>{kHello, '!'})) << format;
  }
}

TEST(HfTokenizer, UnmergedBytesAreTheirByteTokens) {
  auto t = Load();
  // Space is byte 0x20, not printable: its character is U+0120 ("Ġ"), id 32.
  EXPECT_EQ(Encode(*t, "xy z"), (std::vector<int>{'x', 'y', ' ', 'z'}));
  EXPECT_EQ(Encode(*t, "é"), (std::vector<int>{0xC3, 0xA9}));
}

TEST(HfTokenizer, AddedTokensAreMatchedBeforeTheModel) {
  auto t = Load();
  EXPECT_EQ(Encode(*t, "<|im_start|>hello<|im_end|>"),
            (std::vector<int>{kImStart, kHello, kImEnd}));
  // A partial marker is ordinary text.
  EXPECT_EQ(Encode(*t, "<|im_sta").size(), 8u);
}

TEST(HfTokenizer, SplitRegexLookaheadLeavesOneSpaceForTheNextWord) {
  auto t = Load();
  // "\s+(?!\S)" takes two of the three spaces; the third joins " world".
  EXPECT_EQ(Encode(*t, "hello   world"), (std::vector<int>{kHello, ' ', ' ', kSpaceWorld}));
}

std::string RemovingSplit(const std::string& kind, const std::string& pattern) {
  return R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{")" + kind +
         R"(":)" + Quote(pattern) + R"(},"behavior":"Removed","invert":false},)"
         R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]})";
}

std::vector<int> Bytes(std::string_view s) {
  std::vector<int> ids;
  for (char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

// Issue 25: the reference's regexes classify with Unicode 16, PCRE2 10.42 with 14.
TEST(HfTokenizer, SplitRegexesClassifyAsTheReferencesUnicodeDoes) {
  // U+11F04 (Kawi, Unicode 15) is a letter: \p{L}+ removes all of "a\U00011F04b".
  auto letters = Load({.pre_tokenizer = RemovingSplit("Regex", R"(\p{L}+)")});
  EXPECT_EQ(Encode(*letters, "a\xF0\x91\xBC\x84" "b 1"), Bytes(" 1"));
  // U+180E is not white space (Unicode 6.3); PCRE2 10.42 says it is.
  auto spaces = Load({.pre_tokenizer = RemovingSplit("Regex", R"(\s)")});
  EXPECT_EQ(Encode(*spaces, "x\xE1\xA0\x8Ey z"), Bytes("x\xE1\xA0\x8Eyz"));
  // A literal pattern matches the text itself, never the regexes' view of it.
  auto literal = Load({.pre_tokenizer = RemovingSplit("String", "\xE1\xA0\x8E")});
  EXPECT_EQ(Encode(*literal, "x\xE1\xA0\x8Ey"), Bytes("xy"));
}

// (SanitizeUtf8's own rules: core/strings_test.cc.)
TEST(HfTokenizer, InvalidUtf8IsReplacedNeverACrash) {
  auto t = Load();
  EXPECT_EQ(Encode(*t, "\xff"), (std::vector<int>{0xEF, 0xBF, 0xBD}));
  for (int b = 0; b < 256; ++b) {
    const std::string s(3, static_cast<char>(b));
    EXPECT_FALSE(Encode(*t, s).empty());
  }
}

TEST(HfTokenizer, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  auto t = Load({.ignore_merges = true});
  EXPECT_EQ(Encode(*t, "hello world"), (std::vector<int>{kHello, kSpaceWorld}));
}

TEST(HfTokenizer, TemplateProcessingAddsSpecialTokensOnlyWhenAsked) {
  const std::string post =
      R"({"type":"Sequence","processors":[{"type":"ByteLevel"},{"type":"TemplateProcessing",)"
      R"("single":[{"SpecialToken":{"id":"<|im_start|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},)"
      R"({"SpecialToken":{"id":"<|im_end|>","type_id":0}}],"pair":[],"special_tokens":{)"
      R"("<|im_start|>":{"id":"<|im_start|>","ids":[265],"tokens":["<|im_start|>"]},)"
      R"("<|im_end|>":{"id":"<|im_end|>","ids":[266],"tokens":["<|im_end|>"]}}}]})";
  auto t = Load({.post_processor = post});
  EXPECT_EQ(Encode(*t, "hello", true), (std::vector<int>{kImStart, kHello, kImEnd}));
  std::vector<int> ids;
  std::vector<uint32_t> starts;
  t->Encode("hello", true, &ids, &starts);
  EXPECT_EQ(starts, (std::vector<uint32_t>{0, 0, 5}));
  EXPECT_EQ(Encode(*t, "hello", false), (std::vector<int>{kHello}));
}

TEST(HfTokenizer, RejectsUnsupportedModelTypesNamingThem) {
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    auto t = HfTokenizer::FromJson(TokenizerJson({.model_type = type}), "m/tokenizer.json");
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(type), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find("only BPE"), std::string::npos);
    EXPECT_NE(t.status().message().find("m/tokenizer.json"), std::string::npos);
  }
}

TEST(HfTokenizer, RejectsUnsupportedPreTokenizersAndBadFiles) {
  auto t = HfTokenizer::FromJson(TokenizerJson({.pre_tokenizer = R"({"type":"Metaspace"})"}), "x");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("pre_tokenizer.type 'Metaspace'"), std::string::npos)
      << t.status().message();
  EXPECT_FALSE(HfTokenizer::FromJson("not json", "x").ok());
  EXPECT_FALSE(HfTokenizer::FromJson("{}", "x").ok());
  auto bad_regex = HfTokenizer::FromJson(
      TokenizerJson({.pre_tokenizer = R"({"type":"Split","pattern":{"Regex":"(["}})"}), "x");
  ASSERT_FALSE(bad_regex.ok());
  EXPECT_NE(bad_regex.status().message().find("bad regex"), std::string::npos);
}

TEST(HfTokenizer, StartsPointAtEachTokensFirstByte) {
  auto t = Load();
  std::vector<int> ids;
  std::vector<uint32_t> starts;
  t->Encode("hello<|im_end|> world", false, &ids, &starts);
  EXPECT_EQ(ids, (std::vector<int>{kHello, kImEnd, kSpaceWorld}));
  EXPECT_EQ(starts, (std::vector<uint32_t>{0, 5, 15}));
}

TEST(HfTokenizer, ManyThreadsGetTheSameIds) {
  auto t = Load();
  const std::string text = "hello world <|im_start|> héllo  wörld\n\n 猫 🚌 hello";
  const std::vector<int> expected = Encode(*t, text);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 500; ++k) {
        if (Encode(*t, text) != expected) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(HfTokenizer, SharedParsesEqualBytesOnceAndKeepsTheLastFew) {
  static_assert(HfTokenizer::kKeptShared == 2);
  const std::string a = TokenizerJson({.merges_format = "string"});
  const std::string b = TokenizerJson({.merges_format = "pairs"});
  const std::string c = TokenizerJson({.ignore_merges = true});
  auto first = HfTokenizer::Shared(a, "a/tokenizer.json");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // Equal bytes (another copy of them, another name): the same tokenizer.
  auto again = HfTokenizer::Shared(std::string(a), "elsewhere/tokenizer.json");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), first->get());
  auto other = HfTokenizer::Shared(b, "b/tokenizer.json");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->get(), first->get());
  EXPECT_EQ(Encode(**other, "hello world"), Encode(**first, "hello world"));
  // Used again, a is the newest: c then drops the least recently used, b.
  ASSERT_TRUE(HfTokenizer::Shared(a, "a").ok());
  auto third = HfTokenizer::Shared(c, "c/tokenizer.json");
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(HfTokenizer::Shared(a, "a")->get(), first->get());   // kept
  EXPECT_NE(HfTokenizer::Shared(b, "b")->get(), other->get());   // dropped, parsed anew
  // One that fails to parse is not kept, and fails again with its own name.
  auto bad = HfTokenizer::Shared("{}", "bad/tokenizer.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad/tokenizer.json"), std::string::npos);
  EXPECT_FALSE(HfTokenizer::Shared("{}", "bad2").ok());
  // A tokenizer dropped from the cache lives on with its users.
  EXPECT_EQ(Encode(**other, "hello world"), (std::vector<int>{kHello, kSpaceWorld}));
}

// --- chat templates -------------------------------------------------------------------

constexpr const char* kChatMl =
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

TEST(JinjaChatTemplate, RendersAndMarksAssistantTurnsThroughTheirEnd) {
  auto tmpl = JinjaChatTemplate::Parse(kChatMl, "", "<|im_end|>", "k");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  const std::vector<Turn> turns = {{Role::kUser, "hi"}, {Role::kAssistant, "hello"},
                                   {Role::kUser, "more"}, {Role::kAssistant, "world"}};
  std::string text;
  std::vector<std::pair<size_t, size_t>> spans;
  ASSERT_TRUE((*tmpl)->RenderWithSpans(turns, &text, &spans).ok());
  EXPECT_EQ(text,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
            "<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\nworld<|im_end|>\n");
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(text.substr(spans[0].first, spans[0].second - spans[0].first), "hello<|im_end|>\n");
  EXPECT_EQ(text.substr(spans[1].first, spans[1].second - spans[1].first), "world<|im_end|>\n");
}

TEST(JinjaChatTemplate, AFailingTurnIsNamed) {
  const char* strict =
      "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}"
      "{{ message['content'] }}{% endfor %}";
  auto tmpl = JinjaChatTemplate::Parse(strict, "", "", "k");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  const std::vector<Turn> turns = {{Role::kUser, "a"}, {Role::kAssistant, "b"},
                                   {Role::kAssistant, "c"}};
  std::string text;
  std::vector<std::pair<size_t, size_t>> spans;
  const Status s = (*tmpl)->RenderWithSpans(turns, &text, &spans);
  EXPECT_EQ(s.code(), StatusCode::kTokenizeError);
  EXPECT_NE(s.message().find("turn 2 (assistant)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("must alternate"), std::string::npos) << s.message();
}

TEST(JinjaChatTemplate, ATemplateThatDoesNotParseIsAConfigError) {
  auto tmpl = JinjaChatTemplate::Parse("{% for m in messages %}", "", "", "text.tokenize.chat_template");
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(tmpl.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tmpl.status().message().find("text.tokenize.chat_template"), std::string::npos);
}

TEST(TokenizerConfig, ReadsTemplateAndTokensInBothForms) {
  auto c = ParseTokenizerConfig(
      R"({"chat_template":[{"name":"tool_use","template":"x"},{"name":"default","template":"T"}],)"
      R"("bos_token":{"content":"<s>","lstrip":false},"eos_token":"</s>","pad_token":null})",
      "cfg");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->chat_template, "T");
  EXPECT_EQ(c->bos_token, "<s>");
  EXPECT_EQ(c->eos_token, "</s>");
  EXPECT_EQ(c->pad_token, "");
}

// --- the kernel -----------------------------------------------------------------------

TEST(TokenizeChat, LabelsCoverExactlyTheAssistantSpansAndImagesExpand) {
  TokenizeSpec spec;
  spec.tokenizer = "test/tokenizer.json";
  spec.chat_template = kChatMl;
  spec.image_token = "<|image_pad|>";
  spec.max_length = 40;
  TokenizerConfig config;
  config.pad_token = "<|pad|>";
  auto chat = HfChat::Make(spec, TokenizerJson(), config);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  const std::vector<Turn> turns = {{Role::kUser, "<image>hello"}, {Role::kAssistant, "hello world"}};
  std::vector<int64_t> ids(40), mask(40), labels(40);
  ASSERT_TRUE(TokenizeChat(**chat, turns, 3, ids.data(), mask.data(), labels.data()).ok());

  // <|im_start|> u s e r \n  [3 x image] hello <|im_end|> \n
  // <|im_start|> a s s i s t a n t \n  hello " world" <|im_end|> \n
  const auto& t = *(*chat)->tokenizer;
  std::vector<int> user = Encode(t, "<|im_start|>user\n<|image_pad|><|image_pad|><|image_pad|>hello<|im_end|>\n");
  std::vector<int> prompt = Encode(t, "<|im_start|>assistant\n");
  std::vector<int> answer = Encode(t, "hello world<|im_end|>\n");
  std::vector<int64_t> want_ids, want_labels;
  for (int id : user) want_ids.push_back(id), want_labels.push_back(-100);
  for (int id : prompt) want_ids.push_back(id), want_labels.push_back(-100);
  for (int id : answer) want_ids.push_back(id), want_labels.push_back(id);
  EXPECT_EQ(std::count(user.begin(), user.end(), kImagePad), 3);
  const size_t n = want_ids.size();
  ASSERT_LT(n, 40u);
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + n), want_ids);
  EXPECT_EQ(std::vector<int64_t>(labels.begin(), labels.begin() + n), want_labels);
  for (size_t i = 0; i < 40; ++i) {
    EXPECT_EQ(mask[i], i < n ? 1 : 0);
    if (i >= n) {
      EXPECT_EQ(ids[i], kPadToken);
      EXPECT_EQ(labels[i], -100);
    }
  }
}

TEST(TokenizeChat, TruncatesAtMaxLengthAndBoundsAHugeTurn) {
  TokenizeSpec spec;
  spec.tokenizer = "t";
  spec.chat_template = kChatMl;
  spec.max_length = 32;
  auto chat = HfChat::Make(spec, TokenizerJson(), {});
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  std::string huge;
  for (int i = 0; i < 1 << 20; ++i) huge += "hello ";
  const std::vector<Turn> turns = {{Role::kUser, "q"}, {Role::kAssistant, huge}};
  std::vector<int64_t> ids(32), mask(32), labels(32);
  const int64_t before = (*chat)->tokenizer->bytes_encoded();
  ASSERT_TRUE(TokenizeChat(**chat, turns, 0, ids.data(), mask.data(), labels.data()).ok());
  EXPECT_LT((*chat)->tokenizer->bytes_encoded() - before, 4096);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(mask[i], 1);
  EXPECT_EQ(labels[31], ids[31]);  // inside the assistant's turn
  EXPECT_TRUE(ids[31] == kHello || ids[31] == ' ') << ids[31];  // "hello", " ", "hello", ...
  EXPECT_EQ(labels[0], -100);
}

TEST(TokenizeChat, InvalidUtf8InATurnIsTokenizedAsItsReplacement) {
  TokenizeSpec spec;
  spec.tokenizer = "t";
  spec.chat_template = kChatMl;
  spec.max_length = 48;
  auto chat = HfChat::Make(spec, TokenizerJson(), {});
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  std::vector<int64_t> a(48), b(48), mask(48), la(48), lb(48);
  const std::vector<Turn> bad = {{Role::kUser, "caf\xff\xe2\x82"}, {Role::kAssistant, "\xc0hello"}};
  const std::vector<Turn> replaced = {{Role::kUser, "caf\xEF\xBF\xBD\xEF\xBF\xBD"},
                                      {Role::kAssistant, "\xEF\xBF\xBDhello"}};
  ASSERT_TRUE(TokenizeChat(**chat, bad, 0, a.data(), mask.data(), la.data()).ok());
  ASSERT_TRUE(TokenizeChat(**chat, replaced, 0, b.data(), mask.data(), lb.data()).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(la, lb);
}

TEST(TokenizeChat, ImageTokensMustBeInTheVocabulary) {
  TokenizeSpec spec;
  spec.tokenizer = "t";
  spec.chat_template = kChatMl;
  spec.image_token = "<|not_a_token|>";
  auto chat = HfChat::Make(spec, TokenizerJson(), {});
  ASSERT_FALSE(chat.ok());
  EXPECT_NE(chat.status().message().find("text.tokenize.image_token"), std::string::npos);
  spec.image_token.clear();
  spec.chat_template.clear();
  auto none = HfChat::Make(spec, TokenizerJson(), {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("chat_template"), std::string::npos);
}

TEST(TokenizeChat, ImageTokenCountFollowsTheImageSize) {
  HfChat chat;
  chat.image_divisor = 28;
  EXPECT_EQ(*chat.ImageTokens(224, 224), 64);
  EXPECT_EQ(*chat.ImageTokens(448, 224), 128);
  chat.image_tokens = 5;
  EXPECT_EQ(*chat.ImageTokens(448, 224), 5);
}

// Qwen2-VL's processor resizes 300x200 to 308x196 (77 tokens) and anything under 56 px
// up to 56 (4 tokens); floor division gave 70 and 1. Until the op resizes as the
// processor does, such sizes are the sample's error, never a silent miscount.
TEST(TokenizeChat, ImageSizesTheProcessorWouldResizeAreRefused) {
  HfChat chat;
  chat.image_divisor = 28;
  for (auto [w, h] : {std::pair{300, 200}, {28, 20}, {20, 20}, {56, 57}}) {
    const auto n = chat.ImageTokens(w, h);
    ASSERT_FALSE(n.ok()) << w << "x" << h;
    EXPECT_EQ(n.status().code(), StatusCode::kTokenizeError);
    EXPECT_NE(n.status().message().find("multiple of patch_size*merge_size = 28"),
              std::string::npos)
        << n.status().message();
  }
  EXPECT_EQ(*chat.ImageTokens(28, 56), 2);
}

// --- one count per image (text.tokenize.grid_field) -----------------------------------

Result<std::unique_ptr<HfChat>> ImageChat(int max_length) {
  TokenizeSpec spec;
  spec.tokenizer = "t";
  spec.chat_template = kChatMl;
  spec.image_token = "<|image_pad|>";
  spec.max_length = max_length;
  return HfChat::Make(spec, TokenizerJson(), {});
}

TEST(TokenizeChat, EachPlaceholderGetsItsOwnImagesCountInOrder) {
  auto chat = ImageChat(64);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  const std::vector<Turn> turns = {{Role::kUser, "<image>he<image>"},
                                   {Role::kAssistant, "hello"},
                                   {Role::kUser, "<image>"}};
  const int64_t per_image[] = {2, 5, 1};
  std::vector<int64_t> ids(64), mask(64), labels(64);
  ASSERT_TRUE(TokenizeChat(**chat, turns, per_image, "grids", ids.data(), mask.data(),
                           labels.data()).ok());
  const auto& t = *(*chat)->tokenizer;
  const std::string pad = "<|image_pad|>";
  const std::vector<int> want = Encode(
      t, "<|im_start|>user\n" + pad + pad + "he" + pad + pad + pad + pad + pad +
             "<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\n" + pad +
             "<|im_end|>\n");
  ASSERT_LT(want.size(), 64u);
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + static_cast<int64_t>(want.size())),
            std::vector<int64_t>(want.begin(), want.end()));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kImagePad), 8);
}

TEST(TokenizeChat, PlaceholdersAndImagesThatDisagreeInNumberNameBothCounts) {
  auto chat = ImageChat(64);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  std::vector<int64_t> ids(64), mask(64), labels(64);
  const std::vector<Turn> two = {{Role::kUser, "<image><image>what?"}, {Role::kAssistant, "a"}};
  const int64_t one[] = {4};
  const Status s = TokenizeChat(**chat, two, one, "image_grid_thw", ids.data(), mask.data(),
                                labels.data());
  EXPECT_EQ(s.code(), StatusCode::kTokenizeError);
  EXPECT_NE(s.message().find("2 image placeholders ('<image>') and the sample 1 image "
                             "(image_grid_thw)"),
            std::string::npos)
      << s.message();
  const std::vector<Turn> none = {{Role::kUser, "what?"}};
  const Status n = TokenizeChat(**chat, none, one, "g", ids.data(), mask.data(), labels.data());
  EXPECT_NE(n.message().find("0 image placeholders"), std::string::npos) << n.message();
  // No image and no placeholder: text only.
  EXPECT_TRUE(TokenizeChat(**chat, none, std::span<const int64_t>(), "g", ids.data(),
                           mask.data(), labels.data()).ok());
}

TEST(TokenizeChat, AMaxLengthThatCutsImageTokensFailsTheSample) {
  auto chat = ImageChat(12);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  std::vector<int64_t> ids(12), mask(12), labels(12);
  const std::vector<Turn> turns = {{Role::kUser, "<image>"}};
  const int64_t big[] = {20};
  const Status s = TokenizeChat(**chat, turns, big, "g", ids.data(), mask.data(), labels.data());
  EXPECT_EQ(s.code(), StatusCode::kTokenizeError);
  EXPECT_NE(s.message().find("max_length 12 cuts into the image tokens"), std::string::npos)
      << s.message();
  const int64_t small[] = {2};
  EXPECT_TRUE(TokenizeChat(**chat, turns, small, "g", ids.data(), mask.data(), labels.data()).ok());
}

TEST(TokenizeChat, AVisionTokenTypedInTheTextFailsTheSample) {
  auto chat = ImageChat(64);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  std::vector<int64_t> ids(64), mask(64), labels(64);
  // Two <|image_pad|> typed beside one image of 3 tokens: 5 in the row for 3 features.
  const std::vector<Turn> typed = {{Role::kUser, "<image> and <|image_pad|><|image_pad|>?"},
                                   {Role::kAssistant, "a"}};
  const int64_t one[] = {3};
  const Status s = TokenizeChat(**chat, typed, one, "g", ids.data(), mask.data(), labels.data());
  EXPECT_EQ(s.code(), StatusCode::kTokenizeError);
  EXPECT_NE(s.message().find("the messages' text holds 2 image tokens ('<|image_pad|>') of its "
                             "own beside the 3 that its 1 image needs"),
            std::string::npos)
      << s.message();
  // A text-only sample with the token typed: no image, one token.
  const std::vector<Turn> alone = {{Role::kUser, "what is <|image_pad|>?"}};
  const Status t = TokenizeChat(**chat, alone, std::span<const int64_t>(), "g", ids.data(),
                                mask.data(), labels.data());
  EXPECT_NE(t.message().find("holds 1 image token ('<|image_pad|>') of its own beside the 0 that its 0 "
                             "images need"),
            std::string::npos)
      << t.message();
  // The same words without the special token pass.
  const std::vector<Turn> plain = {{Role::kUser, "<image> and image_pad?"}, {Role::kAssistant, "a"}};
  EXPECT_TRUE(TokenizeChat(**chat, plain, one, "g", ids.data(), mask.data(), labels.data()).ok());
}

Result<std::unique_ptr<HfChat>> VideoChat(int max_length) {
  TokenizeSpec spec;
  spec.tokenizer = "t";
  spec.chat_template = kChatMl;
  spec.preset = VisionModel::kQwen2Vl;  // <|image_pad|>, <|video_pad|>, <|vision_start|>, ...
  spec.video_grid_field = "video_grid_thw";
  spec.max_length = max_length;
  return HfChat::Make(spec, TokenizerJson(), {});
}

TEST(TokenizeChat, EachVideoPlaceholderGetsItsOwnVideosCountBesideTheImages) {
  auto chat = VideoChat(128);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  const std::vector<Turn> turns = {{Role::kUser, "<video>he<image><video>"},
                                   {Role::kAssistant, "hello"}};
  const int64_t images[] = {2};
  const std::span<const int64_t> per_image(images);
  const int64_t thw[] = {2, 4, 4, 1, 2, 2};  // 8 and 1 tokens at merge 2
  std::vector<int64_t> ids(128), mask(128), labels(128);
  const Status s = TokenizeChat(**chat, turns, &per_image, "image_grid_thw",
                                VideoCounts{thw, {}, 2, "video_grid_thw"}, ids.data(),
                                mask.data(), labels.data());
  ASSERT_TRUE(s.ok()) << s.ToString();
  const auto& t = *(*chat)->tokenizer;
  const std::string v = "<|video_pad|>", i = "<|image_pad|>", a = "<|vision_start|>",
                    z = "<|vision_end|>";
  std::string user = a;
  for (int k = 0; k < 8; ++k) user += v;
  user += z + "he" + a + i + i + z + a + v + z;
  const std::vector<int> want = Encode(
      t, "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n");
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + static_cast<int64_t>(want.size())),
            std::vector<int64_t>(want.begin(), want.end()));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kVideoPad), 9);
}

TEST(TokenizeChat, Qwen3TimestampsPrecedeEachTemporalGroup) {
  auto chat = VideoChat(128);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  const std::vector<Turn> turns = {{Role::kUser, "<video>"}, {Role::kAssistant, "hello"}};
  const int64_t thw[] = {2, 2, 4};  // two groups of 2 tokens
  const float stamps[] = {0.2f, 1.2f};
  std::vector<int64_t> ids(128), mask(128), labels(128);
  const Status s = TokenizeChat(**chat, turns, nullptr, "", VideoCounts{thw, stamps, 2, "g"},
                                ids.data(), mask.data(), labels.data());
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string v = "<|video_pad|>", a = "<|vision_start|>", z = "<|vision_end|>";
  const std::string user = a + "<0.2 seconds>" + a + v + v + z + "<1.2 seconds>" + a + v + v +
                           z + z;
  const std::vector<int> want =
      Encode(*(*chat)->tokenizer, "<|im_start|>user\n" + user +
                                      "<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n");
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + static_cast<int64_t>(want.size())),
            std::vector<int64_t>(want.begin(), want.end()));
  // One timestamp per group, or the sample fails.
  const float one[] = {0.2f};
  EXPECT_EQ(TokenizeChat(**chat, turns, nullptr, "", VideoCounts{thw, one, 2, "g"}, ids.data(),
                         mask.data(), labels.data()).code(),
            StatusCode::kTokenizeError);
}

TEST(TokenizeChat, WithoutImageGridsAnImagePlaceholderStaysText) {
  auto chat = VideoChat(128);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  const std::vector<Turn> turns = {{Role::kUser, "<video><image>"}, {Role::kAssistant, "hello"}};
  const int64_t thw[] = {1, 2, 2};
  std::vector<int64_t> ids(128), mask(128), labels(128);
  ASSERT_TRUE(TokenizeChat(**chat, turns, nullptr, "", VideoCounts{thw, {}, 2, "g"}, ids.data(),
                           mask.data(), labels.data()).ok());
  const std::string a = "<|vision_start|>", z = "<|vision_end|>";
  const std::vector<int> want =
      Encode(*(*chat)->tokenizer,
             "<|im_start|>user\n" + a + "<|video_pad|>" + z +
                 "<image><|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n");
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + static_cast<int64_t>(want.size())),
            std::vector<int64_t>(want.begin(), want.end()));
}

TEST(TokenizeChat, VideoPlaceholdersAndVideosThatDisagreeInNumberNameBothCounts) {
  auto chat = VideoChat(128);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  const std::vector<Turn> two = {{Role::kUser, "<video><video>"}, {Role::kAssistant, "hello"}};
  const int64_t thw[] = {1, 2, 2};
  std::vector<int64_t> ids(128), mask(128), labels(128);
  const Status s = TokenizeChat(**chat, two, nullptr, "", VideoCounts{thw, {}, 2, "video_grid_thw"},
                                ids.data(), mask.data(), labels.data());
  EXPECT_EQ(s.code(), StatusCode::kTokenizeError);
  EXPECT_THAT(s.message(), ::testing::HasSubstr(
                               "2 video placeholders ('<video>') and the sample 1 video "
                               "(video_grid_thw)"));
}

TEST(TokenizeSpecValidate, Qwen3VideosNeedTheirTimestamps) {
  TokenizeSpec spec;
  spec.tokenizer = "t";
  spec.preset = VisionModel::kQwen3Vl;
  spec.video_grid_field = "video_grid_thw";
  EXPECT_THAT(TokenizeOp::Validate(spec, "text.tokenize").message(),
              ::testing::HasSubstr("text.tokenize.video_timestamps_field"));
  spec.video_timestamps_field = "video_timestamps";
  EXPECT_TRUE(TokenizeOp::Validate(spec, "text.tokenize").ok());
}

// An unpadded ChatML op reading image grids (grid_field), max_length 64.
TokenizeSpec GridSpec() {
  TokenizeSpec spec;
  spec.tokenizer = "t";
  spec.chat_template = kChatMl;
  spec.image_token = "<|image_pad|>";
  spec.grid_field = "image_grid_thw";
  spec.max_length = 64;
  spec.pad = false;
  return spec;
}

// Rows 0-5: input_ids, _lengths, position_ids, _lengths, labels, _lengths.
std::vector<FieldSpec> TokenFields() {
  std::vector<FieldSpec> fields;
  for (const char* name : {"input_ids", "position_ids", "labels"}) {
    fields.push_back(FieldSpec{name, DType::kI64, {}, FieldLayout::kRagged});
    fields.push_back(FieldSpec{std::string(name) + "_lengths", DType::kI32, {},
                               FieldLayout::kLengths});
  }
  return fields;
}

// The op reads the sample's grids where the op before wrote them (GridInput::Layout):
// a list's items appended to the sample's ragged rows, a padded list's row, one grid.
TEST(TokenizeOp, ReadsTheSamplesGridsInEachLayout) {
  TokenizeSpec spec = GridSpec();
  // Rows 0-5: TokenFields(); 6: the grids.
  std::vector<FieldSpec> fields = TokenFields();
  const auto memory = std::shared_ptr<Allocator>(DefaultAllocator(), [](Allocator*) {});
  const std::vector<Turn> turns = {{Role::kUser, "<image>he<image>"}, {Role::kAssistant, "hello"}};
  const TurnsView view{turns};
  using Layout = TokenizeOp::GridInput::Layout;
  // Grids (1, 2, 4) and (1, 2, 2): 2 and 1 tokens at merge_size 2.
  const int64_t two[] = {1, 2, 4, 1, 2, 2, 0, 0, 0};
  for (Layout layout : {Layout::kAppended, Layout::kPadded, Layout::kOne}) {
    std::vector<FieldSpec> with_grid = fields;
    with_grid.push_back(layout == Layout::kAppended
                            ? FieldSpec{"image_grid_thw", DType::kI64, {3}, FieldLayout::kItems}
                            : FieldSpec{"image_grid_thw", DType::kI64, {3}});
    RaggedRows ragged(with_grid, memory);
    std::vector<int64_t> fixed(two, two + 9);
    std::vector<uint8_t*> rows(7, nullptr);
    rows[6] = reinterpret_cast<uint8_t*>(fixed.data());
    if (layout == Layout::kAppended) {
      for (int i = 0; i < 2; ++i) {
        std::memcpy(*ragged.Append(6, 1), two + 3 * i, 3 * sizeof(int64_t));
      }
    }
    auto op = TokenizeOp::FromTokenizer(
        spec, TokenizerJson(), {}, 0, 2, 4, 0, -1,
        TokenizeOp::GridInput{layout, 6, 3, 2, "image_grid_thw"});
    ASSERT_TRUE(op.ok()) << op.status().ToString();
    std::vector<Value> values = {view};
    SampleContext ctx;
    ctx.values = values;
    ctx.rows = rows.data();
    ctx.ragged = &ragged;
    const Status status = (*op)->Run(ctx);
    const auto ids = ragged.bytes(0);
    const auto* id = reinterpret_cast<const int64_t*>(ids.data());
    const int64_t pads = std::count(id, id + ids.size() / 8, int64_t{kImagePad});
    if (layout == Layout::kOne) {  // one grid, two placeholders
      EXPECT_EQ(status.code(), StatusCode::kTokenizeError);
      EXPECT_NE(status.message().find("2 image placeholders ('<image>') and the sample 1 image"),
                std::string::npos)
          << status.message();
      continue;
    }
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(pads, 3) << static_cast<int>(layout);
  }
}

// The size pass (Predict): unpadded, the op tells the tokens Run appends, from the grids
// vision.patchify told before it; Run then appends what the pass tokenized (the same ids
// as tokenizing anew), unless the grids the sample made are not those told (it tokenizes
// again: the grids made decide), or the pass was for another sample.
TEST(TokenizeOp, TheSizePassTellsTheTokensRunAppends) {
  TokenizeSpec spec = GridSpec();
  std::vector<FieldSpec> fields = TokenFields();
  fields.push_back(FieldSpec{"image_grid_thw", DType::kI64, {3}, FieldLayout::kItems});
  const auto memory = std::shared_ptr<Allocator>(DefaultAllocator(), [](Allocator*) {});
  const std::vector<Turn> turns = {{Role::kUser, "<image>he<image>"}, {Role::kAssistant, "hello"}};
  const TurnsView view{turns};
  auto op = TokenizeOp::FromTokenizer(
      spec, TokenizerJson(), {}, 0, 2, 4, 0, -1,
      TokenizeOp::GridInput{TokenizeOp::GridInput::Layout::kAppended, 6, 0, 2, "image_grid_thw"});
  ASSERT_TRUE(op.ok()) << op.status().ToString();
  SampleRecord record;
  Sample sample;
  sample.record = &record;
  sample.epoch = 3;
  sample.index = 11;

  // Runs the op on a sample whose grids are `made`, after a size pass told `told` (none:
  // no pass); the rows told and the ids appended.
  struct Ran {
    std::vector<int64_t> told;
    std::vector<int64_t> ids;
    std::vector<int64_t> labels;
  };
  std::vector<Turn> edited = turns;
  const auto run = [&](const std::vector<int64_t>& made,
                       const std::optional<std::vector<int64_t>>& told, int64_t index,
                       const TurnsView& conversation = TurnsView{},
                       const std::function<void()>& between = [] {}) {
    RaggedRows ragged(fields, memory);
    std::vector<uint8_t*> rows(7, nullptr);
    std::vector<Value> values = {conversation.turns.empty() ? view : conversation};
    SampleContext ctx;
    ctx.values = values;
    ctx.rows = rows.data();
    ctx.ragged = &ragged;
    sample.index = index;
    ctx.sample = &sample;
    Ran out;
    if (told.has_value()) {
      std::vector<SizePass::Size> images(1);
      std::vector<int64_t> counted(7, 0);
      std::vector<std::vector<int64_t>> grids(7);
      grids[6] = *told;
      SizePass pass{&ctx, images, counted, grids};
      EXPECT_TRUE((*op)->Predict(pass));
      out.told = counted;
    }
    between();
    for (size_t i = 0; i + 3 <= made.size(); i += 3) {
      std::memcpy(*ragged.Append(6, 1), made.data() + i, 3 * sizeof(int64_t));
    }
    sample.index = 11;  // the sample that runs
    const Status status = (*op)->Run(ctx);
    EXPECT_TRUE(status.ok()) << status.ToString();
    const auto ids = ragged.bytes(0);
    const auto labels = ragged.bytes(4);
    out.ids.assign(reinterpret_cast<const int64_t*>(ids.data()),
                   reinterpret_cast<const int64_t*>(ids.data()) + ids.size() / 8);
    out.labels.assign(reinterpret_cast<const int64_t*>(labels.data()),
                      reinterpret_cast<const int64_t*>(labels.data()) + labels.size() / 8);
    EXPECT_EQ(ragged.rows(2), static_cast<int64_t>(out.ids.size()));
    return out;
  };
  // Grids (1, 2, 4) and (1, 2, 2): 2 and 1 tokens; (1, 2, 8): 4.
  const std::vector<int64_t> grids = {1, 2, 4, 1, 2, 2};
  const std::vector<int64_t> larger = {1, 2, 8, 1, 2, 2};
  const Ran fresh = run(grids, std::nullopt, 11);
  const Ran told = run(grids, grids, 11);
  ASSERT_FALSE(fresh.ids.empty());
  EXPECT_EQ(told.ids, fresh.ids);
  EXPECT_EQ(told.labels, fresh.labels);
  const auto n = static_cast<int64_t>(fresh.ids.size());
  EXPECT_EQ(told.told, (std::vector<int64_t>{n, 0, n, 0, n, 0, 0}));
  EXPECT_EQ(std::count(told.ids.begin(), told.ids.end(), int64_t{kImagePad}), 3);
  // The sample made other grids than told: tokenized with those.
  const Ran other = run(larger, grids, 11);
  EXPECT_EQ(std::count(other.ids.begin(), other.ids.end(), int64_t{kImagePad}), 5);
  EXPECT_EQ(other.ids, run(larger, std::nullopt, 11).ids);
  // A pass for another sample (index 12) is not taken for sample 11, though its
  // conversation lies where the other's did.
  const TurnsView reused{edited};
  const Ran stale = run(grids, grids, 12, reused, [&] { edited[1].text = "bye bye"; });
  const Ran bye = run(grids, std::nullopt, 11, reused);
  EXPECT_NE(bye.ids, fresh.ids);
  EXPECT_EQ(stale.ids, bye.ids);
  // Padded, the op appends nothing and the pass goes on.
  spec.pad = true;
  auto padded = TokenizeOp::FromTokenizer(spec, TokenizerJson(), {}, 0, 1, 2, 0, -1,
                                          TokenizeOp::GridInput{});
  ASSERT_TRUE(padded.ok()) << padded.status().ToString();
  std::vector<SizePass::Size> images(1);
  std::vector<int64_t> counted(3, 0);
  SampleContext ctx;
  SizePass pass{&ctx, images, counted};
  EXPECT_TRUE((*padded)->Predict(pass));
  EXPECT_EQ(counted, (std::vector<int64_t>{0, 0, 0}));
}

// A size pass on one thread (a planned pack's sizer, on the engine's driver) tells its
// tokens (SizePass::sequence); the sample's run, on another thread, is handed them
// (Sample::told) and its size pass takes them, with the grids told, instead of
// tokenizing again: once.
TEST(TokenizeOp, ASizePassHandsItsTokensToTheThreadThatRunsTheSample) {
  TokenizeSpec spec = GridSpec();
  auto op = TokenizeOp::FromTokenizer(
      spec, TokenizerJson(), {}, 0, 2, 4, 0, -1,
      TokenizeOp::GridInput{TokenizeOp::GridInput::Layout::kAppended, 6, 0, 2, "image_grid_thw"});
  ASSERT_TRUE(op.ok()) << op.status().ToString();
  EXPECT_EQ((*op)->Tells(), Telling::kRowsAndTokens);
  std::vector<Turn> turns = {{Role::kUser, "<image>he"}, {Role::kAssistant, "hello"}};
  const TurnsView view{turns};
  SampleRecord record;
  // Sample `index`'s size pass on this thread with grids `grids`, handed `handed`: the
  // tokens it told, and the sequence it left for whoever sized it.
  const auto pass = [&](int64_t index, const std::vector<int64_t>& grids,
                        ToldSequence* handed = nullptr) {
    Sample sample;
    sample.record = &record;
    sample.epoch = 1;
    sample.index = index;
    sample.told = handed;
    std::vector<Value> values = {view};
    SampleContext ctx;
    ctx.values = values;
    ctx.sample = &sample;
    std::vector<SizePass::Size> images(1);
    std::vector<int64_t> counted(7, 0);
    std::vector<std::vector<int64_t>> told_grids(7);
    told_grids[6] = grids;
    ToldSequence told;
    SizePass p{&ctx, images, counted, told_grids, &told};
    EXPECT_TRUE((*op)->Predict(p));
    EXPECT_EQ(counted[0], static_cast<int64_t>(told.ids.size()));
    return told;
  };
  const std::vector<int64_t> two = {1, 2, 4};   // 2 image tokens
  const std::vector<int64_t> four = {1, 2, 8};  // 4
  ToldSequence five = pass(5, two);
  const std::vector<int64_t> he = five.ids;
  EXPECT_EQ(five.grids, two);
  ToldSequence seven = pass(7, two);
  turns[1].text = "bye bye";  // what a fresh tokenization would now see
  std::vector<int64_t> taken, fresh, other_grids, again;
  std::thread runner([&] {
    taken = pass(5, two, &five).ids;          // the hand-off: the tokens of "hello"
    again = pass(5, two, &five).ids;          // taken once: tokenized anew
    other_grids = pass(7, four, &seven).ids;  // told with other grids: tokenized anew
  });
  runner.join();
  fresh = pass(9, two).ids;
  EXPECT_EQ(taken, he);
  EXPECT_NE(fresh, he);
  EXPECT_EQ(again, fresh);
  EXPECT_EQ(std::count(other_grids.begin(), other_grids.end(), int64_t{kImagePad}), 4);
}

TEST(ResolveImageTokens, APresetGivesTheVisionTokensAndExplicitKeysOverrideIt) {
  TokenizeSpec spec;
  spec.preset = VisionModel::kQwen3Vl;
  ImageTokenKeys keys = ResolveImageTokens(spec);
  EXPECT_EQ(keys.token, "<|image_pad|>");
  EXPECT_EQ(keys.start, "<|vision_start|>");
  EXPECT_EQ(keys.end, "<|vision_end|>");
  EXPECT_EQ(keys.patch_size, 16);
  EXPECT_EQ(keys.merge_size, 2);
  EXPECT_EQ(keys.preset, "qwen3_vl");
  spec.merge_size = 4;
  spec.image_start = "<s>";
  keys = ResolveImageTokens(spec);
  EXPECT_EQ(keys.merge_size, 4);
  EXPECT_EQ(keys.patch_size, 16);
  EXPECT_EQ(keys.start, "<s>");
  EXPECT_EQ(keys.preset, "");
  EXPECT_EQ(ResolveImageTokens(TokenizeSpec{}).merge_size, 0) << "no preset: unset";
}

}  // namespace
}  // namespace headrace
