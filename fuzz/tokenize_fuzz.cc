// Fuzz target: text.tokenize on arbitrary conversations (roles, texts, max_length).
//
// The model is trained once, in memory, at start-up, as `headrace make-sample` trains
// it (BPE, the chat template's markers as symbols, whitespace kept). Input layout:
//   byte 0       max_length - 1 (1..256)
//   byte 1       bit 0: add_bos, bit 1: add_eos
//   the rest     turns separated by 0x00; a turn's first byte picks its role (mod 3:
//                system, user, assistant), the other bytes are its text (any bytes,
//                invalid UTF-8 included)
// Properties checked besides "no crash, no leak, no UB": the only failure is
// kTokenizeError; the rows are max_length long, the mask is ones then zeros, padding is
// pad_id with ignore_index labels, every id is in the vocabulary, and a label is either
// ignore_index or the id at its position.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "headrace/ops/text/tokenize.h"
#include "make_sample/make_sample.h"

namespace headrace::fuzz {
namespace {

// Chat-like lines in every role, with non-ASCII text, to train the model on.
std::vector<std::string> Sentences() {
  static constexpr const char* kColours[] = {"red", "green", "blue", "yellow", "white"};
  static constexpr const char* kShapes[] = {"circle", "square", "triangle", "bus", "cat"};
  std::vector<std::string> lines;
  for (const char* c : kColours) {
    for (const char* s : kShapes) {
      lines.push_back(std::string("<|user|>\n<image>\nWhat colour is the ") + s + "?\n");
      lines.push_back(std::string("<|assistant|>\nThe ") + s + " is " + c + ".\n");
      lines.push_back(std::string("<|system|>\nDescribe a ") + c + " " + s +
                      ", in détail: ünïcödé 猫 🚌\n");
    }
  }
  return lines;
}

constexpr int kIds = 0, kMask = 1, kLabels = 2;
constexpr int kMaxLength = 256;

// One op per (add_bos, add_eos), indexed by flags & 3.
std::array<std::unique_ptr<TokenizeOp>, 4>& Ops() {
  static std::array<std::unique_ptr<TokenizeOp>, 4> ops;
  return ops;
}

void Init() {
  auto model = TrainChatTokenizer(Sentences(), /*vocab_size=*/200);
  HR_FUZZ_CHECK(model.ok(), "training the model: %s", model.status().ToString().c_str());
  for (int flags = 0; flags < 4; ++flags) {
    TokenizeSpec spec;
    spec.model = "fuzz.model";
    spec.max_length = kMaxLength;
    spec.add_bos = (flags & 1) != 0;
    spec.add_eos = (flags & 2) != 0;
    auto op = TokenizeOp::FromModel(spec, *model, kIds, kMask, kLabels, /*conversation_slot=*/0);
    HR_FUZZ_CHECK(op.ok(), "TokenizeOp::FromModel: %s", op.status().ToString().c_str());
    Ops()[flags] = std::move(op).value();
  }
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
  const int max_length = 1 + data[0];
  const TokenizeOp& op = *fuzz::Ops()[data[1] & 3];

  SampleRecord record;
  std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  while (!rest.empty()) {
    const size_t end = rest.find('\0');
    const std::string_view turn = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (turn.empty()) continue;
    record.turns.push_back(
        Turn{static_cast<Role>(static_cast<uint8_t>(turn[0]) % 3), std::string(turn.substr(1))});
  }
  Sample sample;
  sample.record = &record;

  // The op writes the template's max_length (kMaxLength); the kernel is also run with
  // the input's max_length on exactly-sized rows, so a write past the row is caught.
  std::vector<int64_t> ids(fuzz::kMaxLength), mask(fuzz::kMaxLength), labels(fuzz::kMaxLength);
  uint8_t* slots[3] = {reinterpret_cast<uint8_t*>(ids.data()),
                       reinterpret_cast<uint8_t*>(mask.data()),
                       reinterpret_cast<uint8_t*>(labels.data())};
  SampleContext ctx;
  Value values[1] = {TurnsView{sample.record->turns}};
  ctx.sample = &sample;
  ctx.rows = slots;
  ctx.values = values;
  const Status status = op.Run(ctx);

  ChatTemplate tmpl = op.chat_template();
  tmpl.max_length = max_length;
  std::vector<int64_t> short_ids(max_length), short_mask(max_length), short_labels(max_length);
  const Status short_status = TokenizeConversation(op.model(), tmpl, record.turns, short_ids.data(),
                                                   short_mask.data(), short_labels.data());
  // The short run stops tokenizing once its row is full, so it may succeed where the
  // long one meets a text the model rejects; never the other way round.
  for (const Status* s : {&status, &short_status}) {
    HR_FUZZ_CHECK(s->ok() || s->code() == StatusCode::kTokenizeError, "%s", s->ToString().c_str());
  }
  HR_FUZZ_CHECK(short_status.ok() || !status.ok(), "max_length %d fails (%s), %d does not",
                max_length, short_status.ToString().c_str(), fuzz::kMaxLength);
  if (!status.ok()) return 0;

  const int vocab = op.model().vocab_size();
  const auto check_rows = [&](const std::vector<int64_t>& i, const std::vector<int64_t>& m,
                              const std::vector<int64_t>& l) {
    bool padding = false;
    for (size_t k = 0; k < i.size(); ++k) {
      HR_FUZZ_CHECK(m[k] == 0 || m[k] == 1, "mask[%zu] = %lld", k, static_cast<long long>(m[k]));
      HR_FUZZ_CHECK(!(padding && m[k] == 1), "mask has a 1 after padding at %zu", k);
      padding = padding || m[k] == 0;
      HR_FUZZ_CHECK(i[k] >= 0 && i[k] < vocab, "id %lld outside the vocabulary of %d",
                    static_cast<long long>(i[k]), vocab);
      if (m[k] == 0) {
        HR_FUZZ_CHECK(i[k] == tmpl.pad_id && l[k] == tmpl.ignore_index, "padding at %zu", k);
      } else {
        HR_FUZZ_CHECK(l[k] == tmpl.ignore_index || l[k] == i[k], "label %lld for id %lld",
                      static_cast<long long>(l[k]), static_cast<long long>(i[k]));
      }
    }
  };
  check_rows(ids, mask, labels);
  check_rows(short_ids, short_mask, short_labels);
  // Truncation cuts on the right: the short rows are a prefix of the long ones.
  for (int k = 0; k < max_length; ++k) {
    HR_FUZZ_CHECK(short_mask[k] == 0 || (short_ids[k] == ids[k] && short_labels[k] == labels[k]),
                  "truncated row differs at %d", k);
  }
  return 0;
}
