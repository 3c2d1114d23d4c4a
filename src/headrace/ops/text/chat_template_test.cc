// Hostile chat templates (issue 26): each used to crash the process (SIGFPE, a stack
// overflow) or take unbounded memory or time; under ChatTemplateLimits each is an error.
// The same templates are fuzz seeds (fuzz/make_seeds.cc, HostileChatTemplates()).
#include <pthread.h>

#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "headrace/ops/text/chat_template.h"
#include "fuzz/hostile_chat_templates.h"

namespace headrace {
namespace chat_template_test {
namespace {

const std::vector<Turn> kThreeTurns = {
    {Role::kUser, "a"}, {Role::kAssistant, "b"}, {Role::kUser, "c"}};

// Renders `source` as a sample would be: kInvalidArgument when Parse refuses it (it does
// not parse, or fails on the probe), else RenderWithSpans' status on `turns`.
Status RenderStatus(const std::string& source, std::span<const Turn> turns = kThreeTurns,
                    ChatTemplateLimits limits = {}, std::string* text = nullptr) {
  auto tmpl = JinjaChatTemplate::Parse(source, "<s>", "</s>", "text.tokenize.chat_template",
                                       limits);
  if (!tmpl.ok()) return tmpl.status();
  std::string rendered;
  std::vector<std::pair<size_t, size_t>> spans;
  Status s = (*tmpl)->RenderWithSpans(turns, &rendered, &spans);
  if (text != nullptr) *text = std::move(rendered);
  return s;
}

// `body` runs only on conversations longer than the probe's two turns: the template
// passes the probe and fails the sample.
std::string OnlyPastTheProbe(const std::string& body) {
  return "{% if messages|length > 2 %}" + body +
         "{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}";
}

void ExpectRefused(const HostileTemplate& h) {
  SCOPED_TRACE(h.name);
  // At start: the probe fails, a configuration error naming the key.
  const Status at_start = RenderStatus(h.source);
  EXPECT_EQ(at_start.code(), StatusCode::kInvalidArgument) << at_start.ToString();
  EXPECT_NE(at_start.message().find("text.tokenize.chat_template"), std::string::npos);
  EXPECT_NE(at_start.message().find(h.expect), std::string::npos) << at_start.message();
  if (!h.renders) return;  // a parse-time limit: no sample ever renders it
  // On a sample: that sample's error.
  const Status on_sample = RenderStatus(OnlyPastTheProbe(h.source));
  EXPECT_EQ(on_sample.code(), StatusCode::kTokenizeError) << on_sample.ToString();
  EXPECT_NE(on_sample.message().find(h.expect), std::string::npos) << on_sample.message();
}

const HostileTemplate& Named(const std::string& name) {
  for (const HostileTemplate& h : HostileChatTemplates()) {
    if (h.name == name) return h;
  }
  ADD_FAILURE() << "no hostile template " << name;
  static const HostileTemplate none{};
  return none;
}

TEST(ChatTemplateLimits, DivisionAndModuloByZeroAreTemplateErrorsNotSigfpe) {
  for (const char* name : {"int_floordiv_zero", "int_mod_zero", "int_div_zero", "float_div_zero"}) {
    ExpectRefused(Named(name));
  }
}

TEST(ChatTemplateLimits, IntegerOverflowIsATemplateErrorNotSigfpeOrUb) {
  for (const char* name : {"int_min_floordiv_minus_one", "int_max_plus_one", "int_mul_overflow"}) {
    ExpectRefused(Named(name));
  }
  // INT_MIN % -1 traps in C++; in Python it is 0.
  std::string text;
  ASSERT_TRUE(RenderStatus("{{ (-9223372036854775807 - 1) % -1 }}", kThreeTurns, {}, &text).ok());
  EXPECT_EQ(text, "0");
}

TEST(ChatTemplateLimits, MacroRecursionStopsAtTheDepthLimitNotAStackOverflow) {
  ExpectRefused(Named("macro_recursion"));
}

// The depth limits keep a parse and a render inside a small stack: the deepest templates
// run on a thread of 4 MiB (engine threads have 8; the limits need under 1 MiB, 2 under
// ASan), so if a limit allowed more than that stack holds the test would crash.
TEST(ChatTemplateLimits, TheDepthLimitFitsASmallThreadStack) {
  std::promise<Status> result;
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, size_t{4} << 20), 0);
  pthread_t thread;
  auto body = [](void* arg) -> void* {
    // Parsing 256 nested parentheses first, then 500 levels of rendering.
    Status parsed = RenderStatus(Named("nested_parentheses").source);
    static_cast<std::promise<Status>*>(arg)->set_value(
        parsed.code() == StatusCode::kInvalidArgument
            ? RenderStatus(OnlyPastTheProbe(Named("macro_recursion").source))
            : parsed);
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, body, &result), 0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attr);
  const Status s = result.get_future().get();
  EXPECT_EQ(s.code(), StatusCode::kTokenizeError) << s.ToString();
  EXPECT_NE(s.message().find("nests deeper"), std::string::npos) << s.message();
}

TEST(ChatTemplateLimits, DeepNestingIsRefusedWhenParsing) {
  // 100k nested parentheses overflowed the stack; 20k nested ifs ran past 120 s.
  for (const char* name : {"nested_parentheses", "nested_ifs", "nested_lists", "nested_nots"}) {
    ExpectRefused(Named(name));
  }
}

TEST(ChatTemplateLimits, ValuesTooLargeAreRefusedBeforeTheyAreMade) {
  for (const char* name : {"range_1e9", "list_doubled", "indent_1e9", "string_times_1e10",
                           "replace_empty", "replace_grows", "tojson_indent", "join_grows"}) {
    ExpectRefused(Named(name));
  }
}

// One test per template: each runs to the default step limit, which under the sanitizers
// takes tens of seconds, and ctest runs separate tests side by side.
class EndlessLoops : public testing::TestWithParam<const char*> {};

TEST_P(EndlessLoops, AreRefused) { ExpectRefused(Named(GetParam())); }

INSTANTIATE_TEST_SUITE_P(ChatTemplateLimits, EndlessLoops,
                         testing::Values("split_empty", "range_step_zero",
                                         "range_four_arguments", "loops_1e9",
                                         "loop_over_a_long_string"));

TEST(ChatTemplateLimits, ALoopCountsEachItemItVisits) {
  // With the output limit of a long max_length (64 MiB), a loop over a 60 MB string
  // made 60M one-character values (~5 GB) before its body ran once: each item is now a
  // step, so the loop stops at the step limit.
  ChatTemplateLimits limits;
  limits.max_output_bytes = size_t{64} << 20;
  limits.max_steps = 1000;
  const Status s = RenderStatus("{% set s = 'x' * 60000000 %}{% for c in s %}{% endfor %}",
                                kThreeTurns, limits);
  EXPECT_NE(s.message().find("more than 1000 steps"), std::string::npos) << s.ToString();
}

TEST(ChatTemplateLimits, CyclesAndDeepValuesAreRefused) {
  for (const char* name : {"list_contains_itself", "namespace_contains_itself", "deep_value"}) {
    ExpectRefused(Named(name));
  }
  // A value nested deeper than max_depth is refused as it is made (dumping or freeing it
  // recurses once per level), whatever the bytes it holds.
  ChatTemplateLimits limits;
  limits.max_depth = 100;
  const Status s = RenderStatus(
      "{% set ns = namespace(x=[]) %}{% for i in range(200) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}{{ ns.x }}",
      kThreeTurns, limits);
  EXPECT_NE(s.message().find("a value nests deeper than 100"), std::string::npos) << s.message();
}

// Upstream minja read dead stack frames here; the ASan build of the suite is what sees
// the first two (a plain build may print garbage and pass).
TEST(ChatTemplateLimits, LoopCallablesKeptPastTheirLoopAreSafe) {
  for (const char* name : {"cycle_kept_past_its_loop", "cycle_with_fewer_arguments",
                           "recursive_loop_kept_past_its_loop"}) {
    ExpectRefused(Named(name));
  }
}

// A macro's context holds the macro, which held the context: every render of a template
// with a macro leaked (LeakSanitizer in the ASan build of the suite reports it).
TEST(ChatTemplateLimits, MacrosAndCallBlocksDoNotLeakTheirContext) {
  std::string text;
  ASSERT_TRUE(RenderStatus("{% macro m(x) %}<{{ x }}{{ caller() }}>{% endmacro %}"
                           "{% for t in messages %}{% call m(t['content']) %}!{% endcall %}{% endfor %}",
                           kThreeTurns, {}, &text).ok());
  EXPECT_EQ(text, "<a!><b!><c!>");
}

TEST(ChatTemplateLimits, ALongRenderingIsCutAtTheOutputLimit) {
  // 1 GB of output: cut at max_output_bytes, a UTF-8 character never split.
  ChatTemplateLimits limits;
  limits.max_output_bytes = 1000;
  std::string text;
  const Status s = RenderStatus("x{{ '\xc3\xa9' * 500 }}",
                                kThreeTurns, limits, &text);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(text.size(), 999u);  // 1000 would split the last é
  EXPECT_EQ(text.substr(0, 5), "x\xc3\xa9\xc3\xa9");
  // Defaults: the 1 GB template of the issue stops at 1 MiB.
  ASSERT_TRUE(RenderStatus(Named("output_1gb").source, kThreeTurns, {}, &text).ok());
  EXPECT_EQ(text.size(), size_t{1} << 20);
}

TEST(ChatTemplateLimits, TheOutputLimitFollowsMaxLength) {
  EXPECT_EQ(ChatTemplateLimits::ForMaxLength(128).max_output_bytes, size_t{1} << 20);
  EXPECT_EQ(ChatTemplateLimits::ForMaxLength(8192).max_output_bytes, size_t{8200} * 1024);
  EXPECT_EQ(ChatTemplateLimits::ForMaxLength(1 << 20).max_output_bytes, size_t{64} << 20);
}

TEST(ChatTemplateLimits, ATurnLargerThanTheOutputLimitStillRenders) {
  // A value may hold the conversation's bytes besides the output limit: a 4 MiB turn
  // passes through `trim` and is cut, not refused.
  ChatTemplateLimits limits;
  limits.max_output_bytes = 4096;
  const std::vector<Turn> turns = {{Role::kUser, std::string(4 << 20, 'x')},
                                   {Role::kAssistant, "b"}};
  std::string text;
  const Status s = RenderStatus("{% for m in messages %}{{ m['content'] | trim }}{% endfor %}",
                                turns, limits, &text);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(text.size(), 4096u);
}

TEST(ChatTemplateLimits, RealTemplatesRenderWellWithinTheLimits) {
  // A ChatML template over a long conversation: 200 turns take ~2,000 steps.
  std::vector<Turn> turns;
  for (int i = 0; i < 200; ++i) {
    turns.push_back({i % 2 == 0 ? Role::kUser : Role::kAssistant, "turn " + std::to_string(i)});
  }
  ChatTemplateLimits limits;
  limits.max_steps = 20'000;
  limits.max_depth = 64;
  std::string text;
  const Status s = RenderStatus(
      "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
      "<|im_start|>system\nYou are helpful.<|im_end|>\n{% endif %}<|im_start|>"
      "{{ message['role'] }}\n{{ message['content'] | trim }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      turns, limits, &text);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(text.find("turn 199<|im_end|>"), std::string::npos);
}

// --- spans, dates, configs (issue 25) ----------------------------------------------------

std::vector<std::string> Spans(const std::string& source, std::span<const Turn> turns,
                               std::string date = {}) {
  auto tmpl = JinjaChatTemplate::Parse(source, "<s>", "</s>", "k", {}, std::move(date));
  EXPECT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  if (!tmpl.ok()) return {};
  std::string text;
  std::vector<std::pair<size_t, size_t>> spans;
  EXPECT_TRUE((*tmpl)->RenderWithSpans(turns, &text, &spans).ok());
  std::vector<std::string> out;
  for (auto [b, e] : spans) out.push_back(text.substr(b, e - b));
  return out;
}

// The shape of Qwen3's template: the last assistant turn gets an empty think block, and
// the earlier ones render differently once later turns follow.
constexpr const char* kThinkLast =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and loop.last %}<think>\n\n</think>\n\n{% endif %}"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

TEST(ChatTemplateSpans, EveryAssistantTurnEndsWithItsEndMarkerAndNoTemplateFiller) {
  const std::vector<Turn> turns = {{Role::kUser, "q1"}, {Role::kAssistant, "a1"},
                                   {Role::kUser, "q2"}, {Role::kAssistant, "a2"}};
  EXPECT_EQ(Spans(kThinkLast, turns),
            (std::vector<std::string>{"a1<|im_end|>\n", "a2<|im_end|>\n"}));
}

TEST(ChatTemplateSpans, AnEmptyAnswerStillTrainsItsEndMarker) {
  const std::vector<Turn> turns = {{Role::kUser, "q"}, {Role::kAssistant, ""}};
  EXPECT_EQ(Spans(kThinkLast, turns), (std::vector<std::string>{"<|im_end|>\n"}));
}

TEST(ChatTemplateSpans, GenerationBlocksAreTheSpans) {
  const std::string source =
      "{% for m in messages %}{{ m['role'] }}: {% if m['role'] == 'assistant' %}"
      "{%- generation -%}{{ m['content'] }}!{%- endgeneration -%}{% else %}{{ m['content'] }}"
      "{% endif %}\n{% endfor %}";
  const std::vector<Turn> turns = {{Role::kUser, "q"}, {Role::kAssistant, "a"},
                                   {Role::kUser, "r"}, {Role::kAssistant, "b"}};
  EXPECT_EQ(Spans(source, turns), (std::vector<std::string>{"a!", "b!"}));
}

TEST(ChatTemplateDate, StrftimeNowRendersTheConfiguredDay) {
  const std::string source =
      "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%A') }}{% for m in messages %}"
      "{{ m['content'] }}{% endfor %}";
  auto tmpl = JinjaChatTemplate::Parse(source, "", "", "k", {}, "2024-07-26");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  const Turn turns[] = {{Role::kUser, "x"}};
  EXPECT_EQ(*(*tmpl)->Render(turns, false), "26 Jul 2024|Fridayx");
  auto missing = JinjaChatTemplate::Parse(source, "", "", "text.tokenize.chat_template");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("template_date"), std::string::npos);
  EXPECT_FALSE(JinjaChatTemplate::Parse(source, "", "", "k", {}, "26 Jul 2024").ok());
}

TEST(TokenizerConfig, IntegersOfAnySizeParse) {
  // Meta's Llama 3 tokenizer_config.json.
  auto config = ParseTokenizerConfig(
      R"({"bos_token": "<|begin_of_text|>", "model_max_length": 1000000000000000019884624838656,
          "x": [-123456789012345678901234567890, 1.5e300, "9999999999999999999999"],
          "eos_token": "<|eot_id|>"})",
      "tokenizer_config.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_TRUE(config->read);
  EXPECT_EQ(config->bos_token, "<|begin_of_text|>");
  EXPECT_EQ(config->eos_token, "<|eot_id|>");
  EXPECT_FALSE(ParseTokenizerConfig("[1]", "c").ok());
}

}  // namespace
}  // namespace chat_template_test
}  // namespace headrace
