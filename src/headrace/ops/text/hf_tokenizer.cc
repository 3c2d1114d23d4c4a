// Hand-written because no packaged C/C++ library reads tokenizer.json (see the header).
// The pieces that are not ours: PCRE2 runs the split regexes, utf8proc normalizes,
// simdjson parses the file. What is ours is small: the byte-level alphabet, the split
// behaviours, the BPE merge loop, added-token matching and the post-processor.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "headrace/ops/text/hf_tokenizer.h"

#include <pcre2.h>
#include <simdjson.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <list>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "headrace/ops/text/unicode_reference.h"

namespace headrace {
namespace {

// --- UTF-8 ------------------------------------------------------------------------------
// (ValidSequenceLength, InvalidSubpartLength and SanitizeUtf8 are core/strings.h's.)

size_t Utf8CharLength(uint8_t lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the other
// 68 bytes for U+0100.. in byte order, so every byte is one visible character.
std::array<uint32_t, 256> ByteLevelAlphabet() {
  std::array<uint32_t, 256> cp{};
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    cp[static_cast<size_t>(b)] = printable ? static_cast<uint32_t>(b) : next++;
  }
  return cp;
}

// A byte-level token string back to the bytes it stands for; false when it has a
// character outside the alphabet.
bool ByteLevelDecode(std::string_view token, std::string* out) {
  static const std::unordered_map<uint32_t, uint8_t> inverse = [] {
    std::unordered_map<uint32_t, uint8_t> m;
    const auto cp = ByteLevelAlphabet();
    for (int b = 0; b < 256; ++b) m[cp[static_cast<size_t>(b)]] = static_cast<uint8_t>(b);
    return m;
  }();
  out->clear();
  for (size_t i = 0; i < token.size();) {
    const size_t n = ValidSequenceLength(token, i);
    if (n == 0) return false;
    utf8proc_int32_t cp;
    utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(token.data() + i),
                     static_cast<utf8proc_ssize_t>(n), &cp);
    const auto it = inverse.find(static_cast<uint32_t>(cp));
    if (it == inverse.end()) return false;
    out->push_back(static_cast<char>(it->second));
    i += n;
  }
  return true;
}

// --- small containers ----------------------------------------------------------------

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

int Find(const StringMap& map, std::string_view key) {
  const auto it = map.find(key);
  return it == map.end() ? -1 : it->second;
}

// (left id, right id) -> (rank, merged id), open addressing: the merge loop's one lookup.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int rank = 0;
    int merged = 0;
  };
  void Reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
  }
  // False when the pair is there already (the first rank wins, as in tokenizers).
  bool Insert(int left, int right, int rank, int merged) {
    const uint64_t key = Key(left, right);
    for (size_t i = Hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return false;
      if (slots_[i].key == kEmpty) {
        slots_[i] = Entry{key, rank, merged};
        return true;
      }
    }
  }
  const Entry* Find(int left, int right) const {
    const uint64_t key = Key(left, right);
    for (size_t i = Hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i];
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t Key(int l, int r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  static size_t Hash(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20); }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
};

// --- regex ----------------------------------------------------------------------------

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

// One compiled pattern. pcre2_code is read-only at match time, so it is shared; the
// match data (PCRE2's per-match scratch) is per thread.
class Regex {
 public:
  static Result<Regex> Compile(std::string_view pattern, bool literal, const std::string& key) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    // PCRE2_LITERAL refuses PCRE2_UCP (a {String: ...} pattern was always refused).
    const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                                     pattern.size(), options, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      return Status::InvalidArgument(key + ": bad regex at offset " + std::to_string(offset) +
                                     ": " + reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if absent
    Regex r;
    r.code_ = std::shared_ptr<pcre2_code>(code, CodeDeleter{});
    return r;
  }

  // Calls f(start, end) for each non-empty, non-overlapping match in `s`, left to right.
  template <typename F>
  void ForEachMatch(std::string_view s, pcre2_match_data* data, F&& f) const {
    size_t pos = 0;
    while (pos < s.size()) {
      const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(),
                                 pos, PCRE2_NO_UTF_CHECK, data, nullptr);
      if (rc < 0) return;  // no match (or a resource limit: the rest stays unsplit)
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
      const size_t start = ov[0], end = ov[1];
      if (end == start) {  // an empty match: step over one character
        pos = start + Utf8CharLength(static_cast<uint8_t>(s[start]));
        continue;
      }
      f(start, end);
      pos = end;
    }
  }

 private:
  std::shared_ptr<pcre2_code> code_;
};

// --- the tokenizer's parts ------------------------------------------------------------

// How a Split keeps what its pattern matched (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior {
  kIsolated,            // matches and the text between them are pieces of their own
  kRemoved,             // matches are dropped
  kMergedWithPrevious,  // a match joins the piece before it
  kMergedWithNext,      // a match joins the piece after it
  kContiguous,          // consecutive matches (or non-matches) form one piece
};

struct SplitStep {
  Regex regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool literal = false;  // a {String: ...} pattern: matched on the text as it is
};

struct AddedToken {
  std::string content;
  int id = 0;
  bool lstrip = false;
  bool rstrip = false;
};

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

using Piece = std::pair<uint32_t, uint32_t>;  // [start, end) in the normalized text

// The BPE merge loop's state: symbols in a doubly linked list, candidate merges in a
// min-heap by (rank, position), the order tokenizers applies them in.
struct Symbol {
  int id, bytes, prev, next;
};
struct Candidate {
  int rank, pos, left, right, merged;
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};
struct Part {  // a Split's view of a piece: matched or not
  uint32_t start, end;
  bool match;
};

// Recent words' (id, bytes) pairs, for one tokenizer (`owner`) at a time.
struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>> words;
};
constexpr size_t kCacheWords = 1 << 15;
constexpr size_t kCacheMaxWordBytes = 64;
// Everything Encode needs per call, one per thread (found once per Encode: a
// thread_local in a shared library costs a call to reach), capacities settling.
struct Scratch {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match{pcre2_match_data_create(1, nullptr)};
  std::string sanitized, normalized, next, substituted;
  std::vector<uint32_t> to_original, next_map;
  std::vector<Piece> pieces, pieces_next;
  std::vector<Part> parts;
  std::vector<int> initial, pairs;
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  WordCache cache;
};

}  // namespace

struct HfTokenizer::Impl {
  std::vector<NormalForm> normalizers;
  std::vector<SplitStep> splits;  // ByteLevel's own regex, when used, is the last
  bool byte_level = false;        // a ByteLevel pre-tokenizer: the model sees bytes
  StringMap token_to_id;          // vocabulary and added tokens, as the file spells them
  StringMap piece_to_id;          // vocabulary keyed by what the merge loop sees (bytes)
  std::array<int, 256> byte_id{};       // byte-level: the token of each single byte
  std::array<int, 256> fallback_id{};   // byte_fallback: "<0xAB>" tokens
  std::vector<int> token_bytes;         // per id: bytes it covers (for starts)
  MergeTable merges;
  int unk_id = -1;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  int vocab_size = 0;
  std::vector<AddedToken> added;            // longest first
  std::array<bool, 256> added_first{};      // a byte some added token starts with
  std::vector<int> prefix_ids, suffix_ids;  // the post-processor's, single sequence
  uint64_t instance = 0;                    // keys the per-thread cache

  void EncodeSegment(std::string_view text, uint32_t base, std::vector<int>* ids,
                     std::vector<uint32_t>* starts, Scratch& scratch) const;
  // Appends (id, bytes) pairs of one pre-token.
  void Bpe(std::string_view piece, std::vector<int>* out, Scratch& scratch) const;
  void InitialSymbols(std::string_view piece, std::vector<int>* out) const;
};

namespace {

std::atomic<uint64_t> next_tokenizer_instance{1};

using simdjson::dom::element;

// Reads an optional key into *out, leaving it when the key is absent or of another type.
template <typename T>
void Optional(simdjson::simdjson_result<element> r, T* out) {
  T v;
  if (r.get(v) == simdjson::SUCCESS) *out = v;
}

std::string_view TypeOf(element e) {
  std::string_view type;
  if (e["type"].get(type) != simdjson::SUCCESS) return {};
  return type;
}

Status Unsupported(const std::string& where, std::string_view type, std::string_view supported) {
  return Status::InvalidArgument(where + ".type '" + std::string(type) +
                                 "' is not supported (supported: " + std::string(supported) +
                                 ")");
}

// A "Sequence" step: `parse` on each entry of the list under `key`, in order, each named
// "<where>.<key>[i]" in messages.
template <typename Parse>
Status ParseSequence(element e, std::string_view key, const std::string& where, Parse&& parse) {
  simdjson::dom::array list;
  if (e[key].get(list) != simdjson::SUCCESS) {
    return Status::InvalidArgument(where + "." + std::string(key) + ": not a list");
  }
  size_t i = 0;
  for (element item : list) {
    HR_RETURN_IF_ERROR(
        parse(item, where + "." + std::string(key) + "[" + std::to_string(i++) + "]"));
  }
  return Status::Ok();
}

Status ParseNormalizer(element e, const std::string& where, HfTokenizer::Impl& t) {
  if (e.is_null()) return Status::Ok();
  const std::string_view type = TypeOf(e);
  if (type == "Sequence") {
    return ParseSequence(e, "normalizers", where, [&t](element item, const std::string& at) {
      return ParseNormalizer(item, at, t);
    });
  }
  static constexpr std::pair<std::string_view, NormalForm> kForms[] = {
      {"NFC", NormalForm::kNfc},
      {"NFD", NormalForm::kNfd},
      {"NFKC", NormalForm::kNfkc},
      {"NFKD", NormalForm::kNfkd}};
  for (const auto& [name, form] : kForms) {
    if (type == name) {
      t.normalizers.push_back(form);
      return Status::Ok();
    }
  }
  return Unsupported(where, type, "null, NFC, NFD, NFKC, NFKD, Sequence");
}

Result<SplitBehavior> ParseBehavior(std::string_view name, const std::string& where) {
  static constexpr std::pair<std::string_view, SplitBehavior> kBehaviors[] = {
      {"Isolated", SplitBehavior::kIsolated},
      {"Removed", SplitBehavior::kRemoved},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous}};
  for (const auto& [n, b] : kBehaviors) {
    if (n == name) return b;
  }
  return Status::InvalidArgument(where + ".behavior '" + std::string(name) +
                                 "' is not supported (supported: Isolated, Removed, "
                                 "MergedWithPrevious, MergedWithNext, Contiguous)");
}

Status ParsePreTokenizer(element e, const std::string& where, HfTokenizer::Impl& t) {
  if (e.is_null()) return Status::Ok();
  const std::string_view type = TypeOf(e);
  if (t.byte_level) {
    // ByteLevel hands the next step byte-level characters, not text; the models we
    // target put it last, and so must a file read here.
    return Status::InvalidArgument(where + ": a pre-tokenizer after ByteLevel is not supported");
  }
  if (type == "Sequence") {
    return ParseSequence(e, "pretokenizers", where, [&t](element item, const std::string& at) {
      return ParsePreTokenizer(item, at, t);
    });
  }
  if (type == "Split") {
    std::string_view pattern, behavior = "Isolated";
    bool literal = false;
    if (e["pattern"]["Regex"].get(pattern) != simdjson::SUCCESS) {
      if (e["pattern"]["String"].get(pattern) != simdjson::SUCCESS) {
        return Status::InvalidArgument(where + ".pattern: neither {Regex: ...} nor {String: ...}");
      }
      literal = true;
    }
    Optional(e["behavior"], &behavior);
    SplitStep step{.regex = {}};
    HR_ASSIGN_OR_RETURN(step.regex, Regex::Compile(pattern, literal, where + ".pattern"));
    step.literal = literal;
    HR_ASSIGN_OR_RETURN(step.behavior, ParseBehavior(behavior, where));
    Optional(e["invert"], &step.invert);
    t.splits.push_back(std::move(step));
    return Status::Ok();
  }
  if (type == "ByteLevel") {
    bool add_prefix_space = false, use_regex = true;
    Optional(e["add_prefix_space"], &add_prefix_space);
    Optional(e["use_regex"], &use_regex);
    if (add_prefix_space) {
      return Status::InvalidArgument(where +
                                     ".add_prefix_space: true is not supported (allowed: false)");
    }
    if (use_regex) {
      SplitStep step{.regex = {}};
      HR_ASSIGN_OR_RETURN(step.regex, Regex::Compile(kGpt2Pattern, false, where));
      t.splits.push_back(std::move(step));
    }
    t.byte_level = true;
    return Status::Ok();
  }
  return Unsupported(where, type, "null, Split, ByteLevel, Sequence");
}

// The special tokens a post-processor adds around a single sequence.
Status ParsePostProcessor(element e, const std::string& where, HfTokenizer::Impl& t) {
  if (e.is_null()) return Status::Ok();
  const std::string_view type = TypeOf(e);
  if (type == "ByteLevel") return Status::Ok();  // offsets only
  if (type == "Sequence") {
    return ParseSequence(e, "processors", where, [&t](element item, const std::string& at) {
      return ParsePostProcessor(item, at, t);
    });
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    int64_t cls = 0, sep = 0;
    if (e["cls"].at(1).get(cls) != simdjson::SUCCESS ||
        e["sep"].at(1).get(sep) != simdjson::SUCCESS) {
      return Status::InvalidArgument(where + ": cls/sep must be [token, id]");
    }
    t.prefix_ids.push_back(static_cast<int>(cls));
    t.suffix_ids.push_back(static_cast<int>(sep));
    return Status::Ok();
  }
  if (type == "TemplateProcessing") {
    simdjson::dom::array single;
    if (e["single"].get(single) != simdjson::SUCCESS) {
      return Status::InvalidArgument(where + ".single: not a list");
    }
    bool after_sequence = false;
    for (element item : single) {
      std::string_view name;
      if (item["Sequence"].error() == simdjson::SUCCESS) {
        after_sequence = true;
        continue;
      }
      if (item["SpecialToken"]["id"].get(name) != simdjson::SUCCESS) {
        return Status::InvalidArgument(where + ".single: items must be SpecialToken or Sequence");
      }
      simdjson::dom::array ids;
      if (e["special_tokens"][name]["ids"].get(ids) != simdjson::SUCCESS) {
        return Status::InvalidArgument(where + ".special_tokens: no ids for '" +
                                       std::string(name) + "'");
      }
      for (element id : ids) {
        int64_t v = 0;
        if (id.get(v) != simdjson::SUCCESS) {
          return Status::InvalidArgument(where + ".special_tokens: ids must be integers");
        }
        (after_sequence ? t.suffix_ids : t.prefix_ids).push_back(static_cast<int>(v));
      }
    }
    return Status::Ok();
  }
  return Unsupported(where, type,
                     "null, ByteLevel, TemplateProcessing, RobertaProcessing, "
                     "BertProcessing, Sequence");
}

Status ParseModel(element model, HfTokenizer::Impl& t) {
  std::string_view type = TypeOf(model);
  if (type.empty() && model["merges"].error() == simdjson::SUCCESS) type = "BPE";
  if (type != "BPE") {
    return Status::InvalidArgument("model.type '" + std::string(type) +
                                   "' is not supported: only BPE models (byte-level BPE as "
                                   "Qwen, Llama 3, GPT-2 and Mistral ship them) are; "
                                   "SentencePiece models go in text.tokenize.model");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    std::string_view v;
    if (model[key].get(v) == simdjson::SUCCESS && !v.empty()) {
      return Status::InvalidArgument(std::string("model.") + key + " is not supported");
    }
  }
  Optional(model["fuse_unk"], &t.fuse_unk);
  Optional(model["byte_fallback"], &t.byte_fallback);
  Optional(model["ignore_merges"], &t.ignore_merges);

  simdjson::dom::object vocab;
  if (model["vocab"].get(vocab) != simdjson::SUCCESS) {
    return Status::InvalidArgument("model.vocab: not an object");
  }
  t.token_to_id.reserve(vocab.size() * 2);
  for (auto [key, value] : vocab) {
    int64_t id = 0;
    if (value.get(id) != simdjson::SUCCESS || id < 0 || id > (1 << 30)) {
      return Status::InvalidArgument("model.vocab['" + std::string(key) + "']: not an id");
    }
    t.token_to_id.emplace(std::string(key), static_cast<int>(id));
    t.vocab_size = std::max(t.vocab_size, static_cast<int>(id) + 1);
  }
  std::string_view unk;
  if (model["unk_token"].get(unk) == simdjson::SUCCESS) t.unk_id = Find(t.token_to_id, unk);

  simdjson::dom::array merges;
  if (model["merges"].get(merges) != simdjson::SUCCESS) {
    return Status::InvalidArgument("model.merges: not a list");
  }
  t.merges.Reserve(merges.size());
  int rank = 0;
  std::string joined;
  for (element m : merges) {
    std::string_view a, b, s;
    if (m.get(s) == simdjson::SUCCESS) {  // "a b"
      const size_t space = s.find(' ', 1);
      if (space == std::string_view::npos) {
        return Status::InvalidArgument("model.merges[" + std::to_string(rank) +
                                       "]: not 'a b'");
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.at(0).get(a) != simdjson::SUCCESS || m.at(1).get(b) != simdjson::SUCCESS) {
      return Status::InvalidArgument("model.merges[" + std::to_string(rank) +
                                     "]: neither 'a b' nor [a, b]");
    }
    joined.assign(a).append(b);
    const int ia = Find(t.token_to_id, a), ib = Find(t.token_to_id, b);
    const int im = Find(t.token_to_id, joined);
    if (ia < 0 || ib < 0 || im < 0) {
      return Status::InvalidArgument("model.merges[" + std::to_string(rank) + "]: '" +
                                     std::string(ia < 0 ? a : ib < 0 ? b : joined) +
                                     "' is not in the vocabulary");
    }
    t.merges.Insert(ia, ib, rank, im);
    ++rank;
  }
  return Status::Ok();
}

}  // namespace

// --- loading --------------------------------------------------------------------------

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::FromJson(std::string_view json,
                                                           const std::string& source) {
  const auto fail = [&](const Status& s) {
    return Status::InvalidArgument("tokenizer '" + source + "': " + s.message());
  };
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(json);
  simdjson::dom::object root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS) {
    return fail(Status::InvalidArgument("not a JSON object (is it a tokenizer.json?)"));
  }
  auto t = std::make_unique<Impl>();
  t->instance = next_tokenizer_instance.fetch_add(1);
  element model;
  if (root["model"].get(model) != simdjson::SUCCESS) {
    return fail(Status::InvalidArgument("no 'model'"));
  }
  Status s = ParseModel(model, *t);
  // A missing part reads as null, as tokenizers reads it.
  const auto part = [&](const char* key, auto parse) {
    element e;
    if (!s.ok() || root[key].get(e) != simdjson::SUCCESS) return;
    s = parse(e, key, *t);
  };
  part("normalizer", ParseNormalizer);
  part("pre_tokenizer", ParsePreTokenizer);
  part("post_processor", ParsePostProcessor);
  if (!s.ok()) return fail(s);

  // What the merge loop sees: byte strings when a ByteLevel pre-tokenizer maps bytes to
  // the byte-level alphabet, the token strings otherwise.
  std::string bytes;
  t->piece_to_id.reserve(t->token_to_id.size() * 2);
  for (const auto& [token, id] : t->token_to_id) {
    if (!t->byte_level) {
      t->piece_to_id.emplace(token, id);
    } else if (ByteLevelDecode(token, &bytes)) {
      t->piece_to_id.emplace(bytes, id);
    }
  }
  const auto alphabet = ByteLevelAlphabet();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    AppendUtf8(alphabet[static_cast<size_t>(b)], &ch);
    t->byte_id[static_cast<size_t>(b)] = Find(t->token_to_id, ch);
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    t->fallback_id[static_cast<size_t>(b)] = Find(t->token_to_id, hex);
  }

  simdjson::dom::array added;
  if (root["added_tokens"].get(added) == simdjson::SUCCESS) {
    for (element a : added) {
      AddedToken token;
      std::string_view content;
      int64_t id = 0;
      if (a["content"].get(content) != simdjson::SUCCESS || a["id"].get(id) != simdjson::SUCCESS ||
          id < 0 || id > (1 << 30)) {
        return fail(Status::InvalidArgument("added_tokens: each needs 'content' and 'id'"));
      }
      if (content.empty()) continue;
      token.content = std::string(content);
      token.id = static_cast<int>(id);
      Optional(a["lstrip"], &token.lstrip);
      Optional(a["rstrip"], &token.rstrip);
      t->token_to_id[token.content] = token.id;
      t->vocab_size = std::max(t->vocab_size, token.id + 1);
      t->added_first[static_cast<uint8_t>(content[0])] = true;
      t->added.push_back(std::move(token));
    }
    std::stable_sort(t->added.begin(), t->added.end(), [](const auto& x, const auto& y) {
      return x.content.size() > y.content.size();
    });
  }

  // The bytes each token covers, for the starts Encode reports.
  t->token_bytes.assign(static_cast<size_t>(t->vocab_size), 0);
  for (const auto& [piece, id] : t->piece_to_id) {
    t->token_bytes[static_cast<size_t>(id)] = static_cast<int>(piece.size());
  }
  for (int b = 0; b < 256; ++b) {
    if (t->fallback_id[static_cast<size_t>(b)] >= 0) {
      t->token_bytes[static_cast<size_t>(t->fallback_id[static_cast<size_t>(b)])] = 1;
    }
  }
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(t)));
}

Result<std::shared_ptr<const HfTokenizer>> HfTokenizer::Shared(std::string_view json,
                                                               const std::string& source) {
  struct Kept {
    std::string json;
    std::shared_ptr<const HfTokenizer> tokenizer;
  };
  static std::mutex mu;
  static std::list<Kept> kept;  // guarded by mu: newest first
  {
    std::lock_guard lock(mu);
    for (auto it = kept.begin(); it != kept.end(); ++it) {
      if (it->json == json) {
        kept.splice(kept.begin(), kept, it);
        return kept.front().tokenizer;
      }
    }
  }
  // Parsed outside the lock: two pipelines made at once with the same file may both
  // parse it; the second keeps its own (equal) tokenizer.
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const HfTokenizer> parsed, FromJson(json, source));
  std::list<Kept> dropped;  // destroyed outside the lock (a tokenizer's teardown is ms)
  std::lock_guard lock(mu);
  kept.push_front(Kept{std::string(json), parsed});
  while (kept.size() > static_cast<size_t>(kKeptShared)) {
    dropped.splice(dropped.begin(), kept, std::prev(kept.end()));
  }
  return parsed;
}

int HfTokenizer::vocab_size() const { return impl_->vocab_size; }
std::string HfTokenizer::PostProcessorFirstToken() const {
  if (impl_->prefix_ids.size() != 1) return {};
  for (const auto& [token, id] : impl_->token_to_id) {
    if (id == impl_->prefix_ids[0]) return token;
  }
  return {};
}
int HfTokenizer::TokenToId(std::string_view token) const {
  return Find(impl_->token_to_id, token);
}

// --- encoding -------------------------------------------------------------------------


void HfTokenizer::Impl::InitialSymbols(std::string_view piece, std::vector<int>* out) const {
  // (id, bytes) pairs, one per byte (byte-level) or character.
  const auto unknown = [&](int bytes) {
    if (unk_id < 0) return;  // tokenizers drops what it cannot name
    if (fuse_unk && out->size() >= 2 && (*out)[out->size() - 2] == unk_id) {
      out->back() += bytes;
      return;
    }
    out->push_back(unk_id);
    out->push_back(bytes);
  };
  const auto fallback = [&](std::string_view bytes) {
    bool all = byte_fallback;
    for (char c : bytes) all = all && fallback_id[static_cast<uint8_t>(c)] >= 0;
    if (!all) return unknown(static_cast<int>(bytes.size()));
    for (char c : bytes) {
      out->push_back(fallback_id[static_cast<uint8_t>(c)]);
      out->push_back(1);
    }
  };
  if (byte_level) {
    for (char c : piece) {
      const int id = byte_id[static_cast<uint8_t>(c)];
      if (id >= 0) {
        out->push_back(id);
        out->push_back(1);
      } else {
        fallback(std::string_view(&c, 1));
      }
    }
    return;
  }
  for (size_t i = 0; i < piece.size();) {
    const size_t n = std::min(Utf8CharLength(static_cast<uint8_t>(piece[i])), piece.size() - i);
    const int id = Find(piece_to_id, piece.substr(i, n));
    if (id >= 0) {
      out->push_back(id);
      out->push_back(static_cast<int>(n));
    } else {
      fallback(piece.substr(i, n));
    }
    i += n;
  }
}

void HfTokenizer::Impl::Bpe(std::string_view piece, std::vector<int>* out,
                            Scratch& scratch) const {
  if (ignore_merges) {
    const int id = Find(piece_to_id, piece);
    if (id >= 0) {
      out->push_back(id);
      out->push_back(static_cast<int>(piece.size()));
      return;
    }
  }
  std::vector<int>& initial = scratch.initial;
  initial.clear();
  InitialSymbols(piece, &initial);
  const int n = static_cast<int>(initial.size() / 2);
  if (n == 1) {  // one byte or character: nothing to merge
    out->insert(out->end(), initial.begin(), initial.end());
    return;
  }
  // A heap entry is stale when either of its symbols changed since it was pushed.
  std::vector<Symbol>& symbols = scratch.symbols;
  std::vector<Candidate>& heap = scratch.heap;
  symbols.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    symbols[static_cast<size_t>(i)] = {initial[2 * static_cast<size_t>(i)],
                                       initial[2 * static_cast<size_t>(i) + 1], i - 1,
                                       i + 1 < n ? i + 1 : -1};
  }
  heap.clear();
  const auto push = [&](int pos) {
    const int next = symbols[static_cast<size_t>(pos)].next;
    if (next < 0) return;
    const int l = symbols[static_cast<size_t>(pos)].id, r = symbols[static_cast<size_t>(next)].id;
    if (const MergeTable::Entry* m = merges.Find(l, r)) {
      heap.push_back({m->rank, pos, l, r, m->merged});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& s = symbols[static_cast<size_t>(c.pos)];
    if (s.bytes == 0 || s.id != c.left || s.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(s.next)];
    if (right.id != c.right) continue;
    s.id = c.merged;
    s.bytes += right.bytes;
    right.bytes = 0;
    s.next = right.next;
    if (s.next >= 0) symbols[static_cast<size_t>(s.next)].prev = c.pos;
    if (s.prev >= 0) push(s.prev);
    push(c.pos);
  }
  for (int i = 0; i >= 0 && i < n; i = symbols[static_cast<size_t>(i)].next) {
    out->push_back(symbols[static_cast<size_t>(i)].id);
    out->push_back(symbols[static_cast<size_t>(i)].bytes);
  }
}

namespace {

// Applies a Split to each piece of `in`, appending the resulting pieces to `out`.
void ApplySplit(const SplitStep& step, std::string_view text, const std::vector<Piece>& in,
                std::vector<Piece>* out, Scratch& scratch) {
  std::vector<Part>& parts = scratch.parts;
  for (const Piece& piece : in) {
    parts.clear();
    uint32_t prev = piece.first;
    step.regex.ForEachMatch(text.substr(piece.first, piece.second - piece.first),
                            scratch.match.get(), [&](size_t s, size_t e) {
                              const uint32_t start = piece.first + static_cast<uint32_t>(s);
                              const uint32_t end = piece.first + static_cast<uint32_t>(e);
                              if (start > prev) parts.push_back({prev, start, step.invert});
                              parts.push_back({start, end, !step.invert});
                              prev = end;
                            });
    if (prev < piece.second) parts.push_back({prev, piece.second, step.invert});

    const size_t first = out->size();
    bool previous_match = false;
    switch (step.behavior) {
      case SplitBehavior::kIsolated:
        for (const Part& p : parts) out->push_back({p.start, p.end});
        break;
      case SplitBehavior::kRemoved:
        for (const Part& p : parts) {
          if (!p.match) out->push_back({p.start, p.end});
        }
        break;
      case SplitBehavior::kMergedWithPrevious:
        for (const Part& p : parts) {
          if (p.match && !previous_match && out->size() > first) {
            out->back().second = p.end;
          } else {
            out->push_back({p.start, p.end});
          }
          previous_match = p.match;
        }
        break;
      case SplitBehavior::kMergedWithNext: {
        for (size_t i = parts.size(); i-- > 0;) {
          const Part& p = parts[i];
          if (p.match && !previous_match && out->size() > first) {
            out->back().first = p.start;
          } else {
            out->push_back({p.start, p.end});
          }
          previous_match = p.match;
        }
        std::reverse(out->begin() + static_cast<std::ptrdiff_t>(first), out->end());
        break;
      }
      case SplitBehavior::kContiguous:
        for (size_t i = 0; i < parts.size(); ++i) {
          if (i > 0 && parts[i].match == previous_match) {
            out->back().second = parts[i].end;
          } else {
            out->push_back({parts[i].start, parts[i].end});
          }
          previous_match = parts[i].match;
        }
        break;
    }
  }
}

// Whether normalization can never reach across the start of the character at
// text[at]: ASCII and every starter (combining class 0) that is neither a mark nor a
// Hangul vowel/trailing jamo, the only characters that compose with what precedes them.
bool ChunkStart(std::string_view text, size_t at) {
  const auto lead = static_cast<uint8_t>(text[at]);
  if (lead < 0x80) return true;
  utf8proc_int32_t cp = -1;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + at),
                   static_cast<utf8proc_ssize_t>(text.size() - at), &cp);
  if (cp < 0) return true;
  if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) return false;
  const utf8proc_property_t* p = utf8proc_get_property(cp);
  return p->combining_class == 0 && p->category != UTF8PROC_CATEGORY_MN &&
         p->category != UTF8PROC_CATEGORY_MC && p->category != UTF8PROC_CATEGORY_ME;
}

// Whether the character at text[at], alone, is left as it is by `form`: it has no
// decomposition (a Hangul syllable only decomposes in NFD/NFKD). Characters with one
// (é, Ω, ﬁ) go through utf8proc.
bool StableAlone(std::string_view text, size_t at, NormalForm form) {
  if (static_cast<uint8_t>(text[at]) < 0x80) return true;
  utf8proc_int32_t cp = -1;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + at),
                   static_cast<utf8proc_ssize_t>(text.size() - at), &cp);
  if (cp < 0) return true;
  if (cp >= 0xAC00 && cp <= 0xD7A3) return form == NormalForm::kNfc || form == NormalForm::kNfkc;
  return utf8proc_get_property(cp)->decomp_seqindex == UINT16_MAX;
}

// Applies one normal form to `text` in chunks that each start where ChunkStart says no
// normalization crosses. Writes the result to *out and, per byte of it, the byte of
// `text` its chunk starts at (exact where a chunk is unchanged).
// Returns false when the text is unchanged (*out and *map are then unspecified).
bool NormalizeChunks(std::string_view text, NormalForm form, std::string* out,
                     std::vector<uint32_t>* map) {
  // Below U+0300 (lead byte 0xCC) every character is NFC already; only ASCII is stable
  // under every form.
  const uint8_t stable_below = form == NormalForm::kNfc ? 0xCC : 0x80;
  if (std::all_of(text.begin(), text.end(),
                  [&](char c) { return static_cast<uint8_t>(c) < stable_below; })) {
    return false;
  }
  thread_local std::string result;
  // Nothing is written until a chunk changes: most text passes through unchanged.
  bool changed = false;
  for (size_t start = 0; start < text.size();) {
    const size_t first = std::min(Utf8CharLength(static_cast<uint8_t>(text[start])),
                                  text.size() - start);
    size_t end = start + first;
    bool stable = StableAlone(text, start, form);
    while (end < text.size() && !ChunkStart(text, end)) {
      end = std::min(end + Utf8CharLength(static_cast<uint8_t>(text[end])), text.size());
      stable = false;
    }
    const std::string_view chunk = text.substr(start, end - start);
    result.clear();
    if (!stable) NormalizeAsReference(chunk, form, &result);
    const bool same = stable || result == chunk;
    if (!same && !changed) {  // the first change: what came before is copied as it was
      changed = true;
      out->assign(text.substr(0, start));
      map->resize(start);
      for (size_t k = 0; k < start; ++k) (*map)[k] = static_cast<uint32_t>(k);
    }
    if (changed && same) {
      out->append(chunk);
      for (size_t k = start; k < end; ++k) map->push_back(static_cast<uint32_t>(k));
    } else if (changed) {
      out->append(result);
      // A chunk's first character, when normalization kept it, maps to itself and the
      // rest to the character after it: a template's "\n" before a turn that starts
      // with reordered marks stays the template's, the marks the turn's.
      size_t kept = 0;
      if (result.size() > first && result.compare(0, first, chunk.substr(0, first)) == 0) {
        kept = first;
      }
      map->insert(map->end(), kept, static_cast<uint32_t>(start));
      map->insert(map->end(), result.size() - kept, static_cast<uint32_t>(start + kept));
    }
    start = end;
  }
  return changed;
}

}  // namespace

void HfTokenizer::Impl::EncodeSegment(std::string_view text, uint32_t base,
                                      std::vector<int>* ids, std::vector<uint32_t>* starts,
                                      Scratch& scratch) const {
  if (text.empty()) return;
  // Normalization. When it changes the text, `to_original` maps each normalized byte
  // back to the text's byte (the start of the chunk it came from), so starts stay
  // exact outside the characters it changed.
  std::string& normalized = scratch.normalized;
  std::vector<uint32_t>& to_original = scratch.to_original;
  bool changed = false;
  for (const NormalForm form : normalizers) {
    if (NormalizeChunks(text, form, &scratch.next, &scratch.next_map)) {
      if (changed) {
        for (uint32_t& o : scratch.next_map) o = to_original[o];
      }
      std::swap(normalized, scratch.next);
      std::swap(to_original, scratch.next_map);
      text = normalized;
      changed = true;
    }
  }
  const auto original = [&](uint32_t at) {
    return !changed ? at : at < to_original.size() ? to_original[at] : to_original.back();
  };

  // The split regexes see the text as the reference's Unicode version classifies it
  // (same offsets): PCRE2's tables are older. A literal pattern sees the text itself.
  std::string_view split_text = text;
  if (!splits.empty() && SubstituteForRegex(text, &scratch.substituted)) {
    split_text = scratch.substituted;
  }
  std::vector<Piece>& pieces = scratch.pieces;
  pieces.assign(1, Piece{0, static_cast<uint32_t>(text.size())});
  for (const SplitStep& step : splits) {
    scratch.pieces_next.clear();
    ApplySplit(step, step.literal ? text : split_text, pieces, &scratch.pieces_next, scratch);
    std::swap(pieces, scratch.pieces_next);
  }

  WordCache& cache = scratch.cache;
  if (cache.owner != instance) {
    cache.words.clear();
    cache.owner = instance;
  }
  std::vector<int>& pairs = scratch.pairs;
  for (const Piece& p : pieces) {
    if (p.second <= p.first) continue;
    const std::string_view word = text.substr(p.first, p.second - p.first);
    const std::vector<int>* result;
    if (word.size() <= kCacheMaxWordBytes) {
      auto it = cache.words.find(word);
      if (it == cache.words.end()) {
        if (cache.words.size() >= kCacheWords) cache.words.clear();
        std::vector<int> computed;
        Bpe(word, &computed, scratch);
        it = cache.words.emplace(std::string(word), std::move(computed)).first;
      }
      result = &it->second;
    } else {
      pairs.clear();
      Bpe(word, &pairs, scratch);
      result = &pairs;
    }
    uint32_t at = p.first;
    for (size_t i = 0; i < result->size(); i += 2) {
      ids->push_back((*result)[i]);
      if (starts != nullptr) starts->push_back(base + original(at));
      at += static_cast<uint32_t>((*result)[i + 1]);
    }
  }
}

void HfTokenizer::Encode(std::string_view text, bool add_special_tokens, std::vector<int>* ids,
                         std::vector<uint32_t>* starts) const {
  bytes_encoded_.fetch_add(static_cast<int64_t>(text.size()), std::memory_order_relaxed);
  thread_local Scratch scratch;
  if (SanitizeUtf8(text, &scratch.sanitized)) text = scratch.sanitized;
  const Impl& t = *impl_;
  const auto push_special = [&](const std::vector<int>& list, size_t at) {
    for (int id : list) {
      ids->push_back(id);
      if (starts != nullptr) starts->push_back(static_cast<uint32_t>(at));
    }
  };
  if (add_special_tokens) push_special(t.prefix_ids, 0);

  // Added tokens first, leftmost-longest; the text between them goes through the model.
  size_t segment = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!t.added_first[static_cast<uint8_t>(text[i])]) continue;
    const AddedToken* hit = nullptr;
    for (const AddedToken& a : t.added) {
      if (text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) continue;
    size_t start = i, end = i + hit->content.size();
    const auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
    if (hit->lstrip) {
      while (start > segment && space(text[start - 1])) --start;
    }
    if (hit->rstrip) {
      while (end < text.size() && space(text[end])) ++end;
    }
    t.EncodeSegment(text.substr(segment, start - segment), static_cast<uint32_t>(segment), ids,
                    starts, scratch);
    ids->push_back(hit->id);
    if (starts != nullptr) starts->push_back(static_cast<uint32_t>(start));
    segment = end;
    i = end - 1;
  }
  t.EncodeSegment(text.substr(segment), static_cast<uint32_t>(segment), ids, starts, scratch);
  if (add_special_tokens) push_special(t.suffix_ids, text.size());
}

}  // namespace headrace
