// Fuzz target: a chat template from a model repository (JinjaChatTemplate: minja under
// ChatTemplateLimits) on arbitrary bytes.
//
// Input layout: the template's source, optionally followed by 0x00 and turns separated
// by 0x00 (a turn's first byte picks its role, mod 3: system, user, assistant; the rest
// is its text). Without turns the conversation is user, assistant, user.
// Limits are small so that each input runs in milliseconds: 20,000 steps, depth 200,
// output 64 KiB. Properties checked besides "no crash, no leak, no UB, no timeout":
// Parse fails only with kInvalidArgument; an accepted template's renderings fail only
// with kTokenizeError; a rendering is at most max_output_bytes; spans are ordered and
// inside the text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "headrace/ops/text/chat_template.h"

namespace headrace::fuzz {
namespace {

ChatTemplateLimits FuzzLimits() {
  ChatTemplateLimits limits;
  limits.max_parse_depth = 128;
  limits.max_depth = 200;
  limits.max_steps = 20'000;
  limits.max_output_bytes = 64 << 10;
  return limits;
}

}  // namespace
}  // namespace headrace::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headrace;
  using namespace headrace::fuzz;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string source(input.substr(0, split));
  std::vector<Turn> turns;
  if (split != std::string_view::npos) {
    std::string_view rest = input.substr(split + 1);
    while (!rest.empty()) {
      const size_t end = rest.find('\0');
      const std::string_view turn = rest.substr(0, end);
      if (!turn.empty()) {
        turns.push_back({static_cast<Role>(static_cast<uint8_t>(turn[0]) % 3),
                         std::string(turn.substr(1))});
      }
      if (end == std::string_view::npos) break;
      rest.remove_prefix(end + 1);
    }
  }
  if (turns.empty()) {
    turns = {{Role::kUser, "What is this?"}, {Role::kAssistant, "A bus."}, {Role::kUser, "Sure?"}};
  }
  const ChatTemplateLimits limits = FuzzLimits();
  auto tmpl = JinjaChatTemplate::Parse(source, "<s>", "</s>", "chat_template", limits);
  if (!tmpl.ok()) {
    HR_FUZZ_CHECK(tmpl.status().code() == StatusCode::kInvalidArgument, "%s",
                  tmpl.status().ToString().c_str());
    return 0;
  }
  for (bool prompt : {false, true}) {
    auto text = (*tmpl)->Render(turns, prompt);
    if (!text.ok()) {
      HR_FUZZ_CHECK(text.status().code() == StatusCode::kTokenizeError, "%s",
                    text.status().ToString().c_str());
      continue;
    }
    HR_FUZZ_CHECK(text->size() <= limits.max_output_bytes, "rendering of %zu bytes",
                  text->size());
  }
  std::string text;
  std::vector<std::pair<size_t, size_t>> spans;
  const Status s = (*tmpl)->RenderWithSpans(turns, &text, &spans);
  if (!s.ok()) {
    HR_FUZZ_CHECK(s.code() == StatusCode::kTokenizeError, "%s", s.ToString().c_str());
    return 0;
  }
  HR_FUZZ_CHECK(text.size() <= limits.max_output_bytes, "rendering of %zu bytes", text.size());
  size_t previous_end = 0;
  for (const auto& [start, end] : spans) {
    HR_FUZZ_CHECK(start <= end && end <= text.size() && start >= previous_end,
                  "span [%zu, %zu) after %zu in %zu bytes", start, end, previous_end,
                  text.size());
    previous_end = end;
  }
  return 0;
}
