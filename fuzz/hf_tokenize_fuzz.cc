// Fuzz target: text.tokenize's `tokenizer:` path (HfTokenizer::Encode and TokenizeChat)
// on arbitrary bytes.
//
// The tokenizer.json is built in memory at start-up: byte-level BPE with the Qwen2 split
// regex and NFC, the 256 byte tokens, a few merges and the ChatML/vision added tokens;
// the chat template is ChatML. Input layout:
//   byte 0       max_length - 1 (1..256)
//   byte 1       images per <image> placeholder (mod 8)
//   the rest     turns separated by 0x00; a turn's first byte picks its role (mod 3:
//                system, user, assistant), the other bytes are its text (any bytes)
// Properties checked besides "no crash, no leak, no UB": Encode's ids are in the
// vocabulary and its starts non-decreasing and inside the (sanitized) text; the only
// kernel failure is kTokenizeError; rows are max_length long, the mask is ones then
// zeros, padding is pad_id with ignore_index labels, a label is ignore_index or its id.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "headrace/ops/text/hf_chat.h"
#include "headrace/ops/text/tokenize.h"

namespace headrace::fuzz {
namespace {

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// GPT-2's byte-level character for byte b, as UTF-8.
std::string ByteChar(int b) {
  const auto printable = [](int x) {
    return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
  };
  int cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int x = 0; x < b; ++x) cp += printable(x) ? 0 : 1;
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

std::string TokenizerJson() {
  const std::string sp = ByteChar(' '), nl = ByteChar('\n');
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"}, {"th", "e"}, {sp, "t"}, {sp + "t", "h"}, {sp + "th", "e"}, {"i", "s"},
      {sp, "is"}, {nl, nl}, {sp, sp}, {ByteChar(0xC3), ByteChar(0xA9)} /* é */};
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(ByteChar(b));
  for (const auto& [a, b] : merges) vocab.push_back(a + b);
  std::string json = R"({"added_tokens":[)";
  const char* added[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|vision_start|>",
                         "<|vision_end|>", "<|image_pad|>"};
  for (size_t i = 0; i < 6; ++i) {
    json += std::string(i ? "," : "") + "{\"id\":" + std::to_string(vocab.size() + i) +
            ",\"content\":" + Quote(added[i]) + ",\"special\":true}";
  }
  json += R"(],"normalizer":{"type":"NFC"},"pre_tokenizer":{"type":"Sequence","pretokenizers":[)"
          R"({"type":"Split","pattern":{"Regex":)" +
          Quote(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)") +
          R"(},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,)"
          R"("use_regex":false}]},"post_processor":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{)";
  for (size_t i = 0; i < vocab.size(); ++i) {
    json += std::string(i ? "," : "") + Quote(vocab[i]) + ":" + std::to_string(i);
  }
  json += "},\"merges\":[";
  for (size_t i = 0; i < merges.size(); ++i) {
    json += std::string(i ? "," : "") + Quote(merges[i].first + " " + merges[i].second);
  }
  return json + "]}}";
}

constexpr const char* kChatMl =
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}";

std::unique_ptr<HfChat>& Chat() {
  static std::unique_ptr<HfChat> chat;
  return chat;
}

constexpr int kMaxLength = 256;

void Init() {
  TokenizeSpec spec;
  spec.tokenizer = "fuzz/tokenizer.json";
  spec.chat_template = kChatMl;
  spec.max_length = kMaxLength;
  spec.image_token = "<|image_pad|>";
  spec.image_start = "<|vision_start|>";
  spec.image_end = "<|vision_end|>";
  TokenizerConfig config;
  config.pad_token = "<|endoftext|>";
  auto chat = HfChat::Make(spec, TokenizerJson(), config);
  HR_FUZZ_CHECK(chat.ok(), "HfChat::Make: %s", chat.status().ToString().c_str());
  Chat() = std::move(chat).value();
}

}  // namespace
}  // namespace headrace::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  headrace::fuzz::Init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headrace;
  if (size < 2) return 0;
  HfChat& chat = *fuzz::Chat();
  const HfTokenizer& tokenizer = *chat.tokenizer;
  const int max_length = 1 + data[0];
  const int images = data[1] % 8;
  const std::string_view rest_all(reinterpret_cast<const char*>(data + 2), size - 2);

  // Encode on the raw bytes.
  std::vector<int> ids;
  std::vector<uint32_t> starts;
  tokenizer.Encode(rest_all, /*add_special_tokens=*/true, &ids, &starts);
  std::string sanitized;
  const size_t text_size = SanitizeUtf8(rest_all, &sanitized) ? sanitized.size() : rest_all.size();
  HR_FUZZ_CHECK(ids.size() == starts.size(), "%zu ids, %zu starts", ids.size(), starts.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    HR_FUZZ_CHECK(ids[k] >= 0 && ids[k] < tokenizer.vocab_size(), "id %d", ids[k]);
    HR_FUZZ_CHECK(starts[k] <= text_size, "start %u past %zu", starts[k], text_size);
    HR_FUZZ_CHECK(k == 0 || starts[k] >= starts[k - 1], "starts decrease at %zu", k);
  }
  HR_FUZZ_CHECK(!rest_all.empty() || ids.empty(), "tokens from nothing");

  // The kernel on the same bytes as turns.
  std::vector<Turn> turns;
  std::string_view rest = rest_all;
  while (!rest.empty()) {
    const size_t end = rest.find('\0');
    const std::string_view turn = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (turn.empty()) continue;
    turns.push_back(
        Turn{static_cast<Role>(static_cast<uint8_t>(turn[0]) % 3), std::string(turn.substr(1))});
  }
  chat.max_length = max_length;  // single-threaded: the target owns the kernel's spec
  std::vector<int64_t> row_ids(max_length), mask(max_length), labels(max_length);
  const Status status =
      TokenizeChat(chat, turns, images, row_ids.data(), mask.data(), labels.data());
  HR_FUZZ_CHECK(status.ok() || status.code() == StatusCode::kTokenizeError, "%s",
                status.ToString().c_str());
  if (!status.ok()) return 0;
  bool padding = false;
  for (int k = 0; k < max_length; ++k) {
    HR_FUZZ_CHECK(mask[k] == 0 || mask[k] == 1, "mask[%d]", k);
    HR_FUZZ_CHECK(!(padding && mask[k] == 1), "a 1 after padding at %d", k);
    padding = padding || mask[k] == 0;
    HR_FUZZ_CHECK(row_ids[k] >= 0 && row_ids[k] < tokenizer.vocab_size(), "row id at %d", k);
    if (mask[k] == 0) {
      HR_FUZZ_CHECK(row_ids[k] == chat.pad_id && labels[k] == chat.ignore_index, "padding %d", k);
    } else {
      HR_FUZZ_CHECK(labels[k] == chat.ignore_index || labels[k] == row_ids[k], "label at %d", k);
    }
  }
  return 0;
}
