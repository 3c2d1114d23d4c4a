#include "headrace/ops/text/chat_template.h"

#include <minja/minja.hpp>
#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <ctime>
#include <exception>
#include <sstream>
#include <unordered_map>

namespace headrace {
namespace {

std::atomic<uint64_t> next_template_instance{1};

constexpr const char* kRoleNames[] = {"system", "user", "assistant"};

const char* RoleName(Role role) { return kRoleNames[static_cast<int>(role)]; }

// transformers renders with trim_blocks and lstrip_blocks on, trailing newline dropped.
minja::Options ParseOptions(const ChatTemplateLimits& limits) {
  return minja::Options{.trim_blocks = true,
                        .lstrip_blocks = true,
                        .keep_trailing_newline = false,
                        .max_parse_depth = limits.max_parse_depth};
}

// Where to cut `s` at or before `limit` so that no UTF-8 character is split.
size_t CharBoundaryAtOrBefore(const std::string& s, size_t limit) {
  if (limit >= s.size()) return s.size();
  while (limit > 0 && (static_cast<uint8_t>(s[limit]) & 0xC0) == 0x80) --limit;
  return limit;
}

// Python's str.isspace(), which Jinja's `trim` strips; minja's own trim strips ASCII
// whitespace only, so a turn of "\u00a0" rendered differently from transformers.
bool PythonSpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

// Decodes the UTF-8 character ending before `end` (valid UTF-8: the templates' inputs
// are sanitized); sets *begin to its first byte.
uint32_t CharBefore(const std::string& s, size_t end, size_t* begin) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80) --b;
  *begin = b;
  uint32_t c = static_cast<uint8_t>(s[b]);
  const size_t n = end - b;
  if (n > 1) c &= 0xFF >> (n + 1);
  for (size_t k = b + 1; k < end; ++k) c = (c << 6) | (static_cast<uint8_t>(s[k]) & 0x3F);
  return c;
}

uint32_t CharAt(const std::string& s, size_t at, size_t* next) {
  const uint8_t lead = static_cast<uint8_t>(s[at]);
  const size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  uint32_t c = n == 1 ? lead : lead & (0xFF >> (n + 1));
  for (size_t k = at + 1; k < at + n && k < s.size(); ++k) {
    c = (c << 6) | (static_cast<uint8_t>(s[k]) & 0x3F);
  }
  *next = std::min(at + n, s.size());
  return c;
}

// Jinja's trim(value, chars=None): Python's str.strip.
minja::Value Trim(const std::shared_ptr<minja::Context>&, minja::Value& args) {
  const std::string s = args.at("text").to_str();
  std::string chars;
  if (args.contains("chars") && !args.at("chars").is_null()) chars = args.at("chars").to_str();
  const auto strip = [&](uint32_t c, size_t b, size_t e) {
    return chars.empty() ? PythonSpace(c) : chars.find(s.substr(b, e - b)) != std::string::npos;
  };
  size_t start = 0, end = s.size(), next = 0, begin = 0;
  while (start < end && strip(CharAt(s, start, &next), start, next)) start = next;
  while (end > start && strip(CharBefore(s, end, &begin), begin, end)) end = begin;
  return minja::Value(s.substr(start, end - start));
}

std::string TokenString(simdjson::dom::element e) {
  std::string_view s;
  if (e.get(s) == simdjson::SUCCESS) return std::string(s);
  if (e["content"].get(s) == simdjson::SUCCESS) return std::string(s);  // AddedToken form
  return {};
}

// `json` with each integer literal too large for 64 bits written as a float ("1e30"
// stays 1e30, "1000000000000000019884624838656" becomes "...656e0"): simdjson refuses
// such integers, and Meta's Llama 3 config has one (model_max_length). Strings are
// copied as they are. Returns false when there is none (*out untouched).
bool BigIntegersAsFloats(std::string_view json, std::string* out) {
  bool changed = false;
  size_t copied = 0;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '"') {  // skip the string
      for (++i; i < json.size() && json[i] != '"'; ++i) {
        if (json[i] == '\\') ++i;
      }
      continue;
    }
    if (!(c >= '0' && c <= '9')) continue;
    size_t end = i;
    while (end < json.size() && json[end] >= '0' && json[end] <= '9') ++end;
    const bool is_float = end < json.size() &&
                          (json[end] == '.' || json[end] == 'e' || json[end] == 'E');
    if (end - i > 18 && !is_float) {
      if (!changed) out->clear();
      changed = true;
      out->append(json.substr(copied, end - copied)).append("e0");
      copied = end;
    }
    // The rest of the number (fraction, exponent) holds no integer literal to rewrite.
    while (end < json.size() && (json[end] == '.' || json[end] == 'e' || json[end] == 'E' ||
                                 json[end] == '+' || json[end] == '-' ||
                                 (json[end] >= '0' && json[end] <= '9'))) {
      ++end;
    }
    i = end - 1;
  }
  if (changed) out->append(json.substr(copied));
  return changed;
}

bool ValidDate(const std::string& d) {
  if (d.size() != 10 || d[4] != '-' || d[7] != '-') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9}) {
    if (d[i] < '0' || d[i] > '9') return false;
  }
  const int month = std::stoi(d.substr(5, 2)), day = std::stoi(d.substr(8, 2));
  return month >= 1 && month <= 12 && day >= 1 && day <= 31;
}

// Whether `source` has a `{% generation %}` tag (with any whitespace control).
bool HasGenerationBlock(const std::string& source) {
  for (size_t at = source.find("{%"); at != std::string::npos; at = source.find("{%", at + 2)) {
    size_t i = at + 2;
    if (i < source.size() && (source[i] == '-' || source[i] == '+')) ++i;
    while (i < source.size() && std::isspace(static_cast<unsigned char>(source[i]))) ++i;
    if (source.compare(i, 10, "generation") == 0) return true;
  }
  return false;
}

// strftime_now(format) on `date` at midnight, as Python's datetime.strftime formats it
// in the C locale.
std::string FormatDate(const std::string& date, const std::string& format) {
  std::tm tm{};
  tm.tm_year = std::stoi(date.substr(0, 4)) - 1900;
  tm.tm_mon = std::stoi(date.substr(5, 2)) - 1;
  tm.tm_mday = std::stoi(date.substr(8, 2));
  tm.tm_isdst = -1;
  std::tm normalized = tm;
  std::mktime(&normalized);  // fills the weekday and the day of the year
  tm.tm_wday = normalized.tm_wday;
  tm.tm_yday = normalized.tm_yday;
  if (format.empty()) return {};
  std::string out(format.size() * 8 + 64, '\0');
  const size_t n = std::strftime(out.data(), out.size(), format.c_str(), &tm);
  out.resize(n);
  return out;
}

size_t CommonPrefix(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  while (i > 0 && i < a.size() && (static_cast<uint8_t>(a[i]) & 0xC0) == 0x80) --i;
  return i;
}

// The common suffix's length, at most `limit`, starting at a UTF-8 character of `a`.
size_t CommonSuffix(std::string_view a, std::string_view b, size_t limit) {
  size_t n = 0;
  while (n < limit && n < a.size() && n < b.size() && a[a.size() - 1 - n] == b[b.size() - 1 - n]) {
    ++n;
  }
  while (n > 0 && (static_cast<uint8_t>(a[a.size() - n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

Result<TokenizerConfig> ParseTokenizerConfig(std::string_view json, const std::string& source) {
  simdjson::dom::parser parser;
  std::string rewritten;
  if (BigIntegersAsFloats(json, &rewritten)) json = rewritten;
  const simdjson::padded_string padded(json);
  simdjson::dom::object root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS) {
    return Status::InvalidArgument("tokenizer config '" + source + "': not a JSON object");
  }
  TokenizerConfig config;
  config.read = true;
  simdjson::dom::element e;
  if (root["chat_template"].get(e) == simdjson::SUCCESS) {
    std::string_view s;
    simdjson::dom::array list;
    if (e.get(s) == simdjson::SUCCESS) {
      config.chat_template = std::string(s);
    } else if (e.get(list) == simdjson::SUCCESS) {
      for (simdjson::dom::element item : list) {
        std::string_view name, text;
        if (item["name"].get(name) == simdjson::SUCCESS && name == "default" &&
            item["template"].get(text) == simdjson::SUCCESS) {
          config.chat_template = std::string(text);
        }
      }
    }
  }
  if (root["bos_token"].get(e) == simdjson::SUCCESS) config.bos_token = TokenString(e);
  if (root["eos_token"].get(e) == simdjson::SUCCESS) config.eos_token = TokenString(e);
  if (root["pad_token"].get(e) == simdjson::SUCCESS) config.pad_token = TokenString(e);
  return config;
}

ChatTemplateLimits ChatTemplateLimits::ForMaxLength(int64_t max_length) {
  ChatTemplateLimits limits;
  const auto tokens = static_cast<size_t>(std::max<int64_t>(max_length, 1)) + 8;
  limits.max_output_bytes =
      std::clamp<size_t>(tokens * 1024, size_t{1} << 20, size_t{64} << 20);
  return limits;
}

JinjaChatTemplate::JinjaChatTemplate(std::string source, std::string bos, std::string eos,
                                     ChatTemplateLimits limits, uint64_t instance)
    : source_(std::move(source)),
      limits_(limits),
      bos_token_(std::move(bos)),
      eos_token_(std::move(eos)),
      instance_(instance) {}

JinjaChatTemplate::~JinjaChatTemplate() = default;

Result<std::unique_ptr<JinjaChatTemplate>> JinjaChatTemplate::Parse(std::string source,
                                                                    std::string bos_token,
                                                                    std::string eos_token,
                                                                    const std::string& key,
                                                                    ChatTemplateLimits limits,
                                                                    std::string date) {
  if (!date.empty() && !ValidDate(date)) {
    return Status::InvalidArgument(key + ": template_date '" + date +
                                   "' is not a date (YYYY-MM-DD)");
  }
  if (date.empty() && source.find("strftime_now") != std::string::npos) {
    return Status::InvalidArgument(
        key + ": the chat template calls strftime_now (the date in the system prompt); set "
        "text.tokenize.template_date: YYYY-MM-DD, the day to render (transformers renders "
        "today's, which would change the rows of a run resumed on another day)");
  }
  // minja reports with exceptions; they stop here, at the wrapper.
  try {
    minja::Parser::parse(source, ParseOptions(limits));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(key + ": the chat template does not parse: " + e.what());
  }
  std::unique_ptr<JinjaChatTemplate> parsed(new JinjaChatTemplate(
      std::move(source), std::move(bos_token), std::move(eos_token), limits, next_template_instance++));
  parsed->has_generation_ = HasGenerationBlock(parsed->source_);
  parsed->date_ = std::move(date);
  // The probe: one user and one assistant turn, the shape every chat template accepts
  // (some refuse a system turn, most require the user first).
  const Turn probe_turns[] = {{Role::kUser, "Hello"}, {Role::kAssistant, "Hi."}};
  std::string text;
  std::vector<std::pair<size_t, size_t>> spans;
  if (Status probe = parsed->RenderWithSpans(probe_turns, &text, &spans); !probe.ok()) {
    return Status::InvalidArgument(key + ": the chat template fails on a conversation of one "
                                   "user and one assistant turn: " + probe.message());
  }
  return parsed;
}

Result<std::string> JinjaChatTemplate::Render(std::span<const Turn> turns,
                                              bool add_generation_prompt) const {
  bool over_limit = false;
  return RenderChecked(turns, add_generation_prompt, &over_limit);
}

Result<std::string> JinjaChatTemplate::RenderChecked(
    std::span<const Turn> turns, bool add_generation_prompt, bool* over_limit,
    std::vector<std::pair<size_t, size_t>>* generation) const {
  *over_limit = false;
  // This thread's parse of the template and its builtins (parsed once per thread).
  struct Parsed {
    std::shared_ptr<minja::TemplateNode> root;
  };
  thread_local std::unordered_map<uint64_t, Parsed> parsed;
  thread_local std::shared_ptr<minja::Context> builtins = minja::Context::builtins();
  // Templates of ops that are gone stay until the map is cleared: bounded, since a
  // process makes few ops (clearing only costs a re-parse).
  if (parsed.size() >= 16 && parsed.find(instance_) == parsed.end()) parsed.clear();
  Parsed& p = parsed[instance_];
  // The budget of this render; minja reads it from this thread (third_party/README.md).
  minja::RenderBudget budget;
  size_t input_bytes = bos_token_.size() + eos_token_.size();
  for (const Turn& turn : turns) input_bytes += turn.text.size() + 16;
  budget.limits.max_depth = limits_.max_depth;
  budget.limits.max_steps = limits_.max_steps;
  budget.limits.max_output_bytes = limits_.max_output_bytes;
  budget.limits.max_value_bytes = limits_.max_output_bytes + input_bytes;
  budget.limits.max_made_bytes = limits_.value_budget_factor * budget.limits.max_value_bytes;
  std::ostringstream out;
  budget.top = &out;
  budget.generation_spans = generation;
  try {
    if (p.root == nullptr) p.root = minja::Parser::parse(source_, ParseOptions(limits_));
    const minja::BudgetScope scope(&budget);
    auto messages = minja::Value::array();
    for (const Turn& turn : turns) {
      auto message = minja::Value::object();
      message.set("role", RoleName(turn.role));
      message.set("content", turn.text);
      messages.push_back(message);
    }
    auto values = minja::Value::object();
    values.set("messages", messages);
    values.set("add_generation_prompt", add_generation_prompt);
    values.set("bos_token", bos_token_);
    values.set("eos_token", eos_token_);
    thread_local const minja::Value trim = minja::simple_function("trim", {"text", "chars"}, Trim);
    values.set("trim", trim);
    if (!date_.empty()) {
      const std::string date = date_;
      values.set("strftime_now", minja::simple_function(
                                     "strftime_now", {"format"},
                                     [date](const std::shared_ptr<minja::Context>&,
                                            minja::Value& args) {
                                       return minja::Value(
                                           FormatDate(date, args.at("format").to_str()));
                                     }));
    }
    auto context = minja::Context::make(std::move(values), builtins);
    p.root->render(out, context);
    return std::move(out).str();
  } catch (const minja::OutputFull&) {
    std::string text = std::move(out).str();
    text.resize(CharBoundaryAtOrBefore(text, limits_.max_output_bytes));
    return text;
  } catch (const minja::LimitError& e) {
    *over_limit = true;
    return Status::TokenizeError(std::string("the chat template passes a limit: ") + e.what());
  } catch (const std::exception& e) {
    return Status::TokenizeError(e.what());
  }
}

Status JinjaChatTemplate::RenderWithSpans(std::span<const Turn> turns, std::string* text,
                                          std::vector<std::pair<size_t, size_t>>* spans) const {
  if (turns.empty()) return Status::TokenizeError("the conversation has no turns");
  bool over_limit = false;
  std::vector<std::pair<size_t, size_t>> blocks;
  auto full = RenderChecked(turns, /*add_generation_prompt=*/false, &over_limit,
                            has_generation_ ? &blocks : nullptr);
  // A limit's failure is named as it is: rendering each prefix could cost the limit again
  // per turn.
  if (!full.ok() && over_limit) return full.status();
  if (!full.ok()) {
    // Name the first turn whose rendering fails: render longer and longer prefixes.
    size_t bad = turns.size() - 1;
    for (size_t n = 1; n < turns.size(); ++n) {
      if (!Render(turns.first(n), false).ok()) {
        bad = n - 1;
        break;
      }
    }
    return Status::TokenizeError("the chat template fails at turn " + std::to_string(bad) +
                                 " (" + RoleName(turns[bad].role) +
                                 "): " + full.status().message());
  }
  *text = std::move(full).value();
  if (has_generation_) {
    for (auto [begin, end] : blocks) {
      end = std::min(end, text->size());
      if (begin < end) spans->emplace_back(begin, end);
    }
    return Status::Ok();
  }
  size_t searched = 0;  // the end of the previous span
  for (size_t i = 0; i < turns.size(); ++i) {
    if (turns[i].role != Role::kAssistant) continue;
    std::pair<size_t, size_t> span;
    if (!TurnSpan(turns, i, *text, &span)) continue;  // the template dropped the turn
    span.first = std::max(span.first, searched);
    if (span.first >= span.second) continue;
    spans->push_back(span);
    searched = span.second;
  }
  return Status::Ok();
}

bool JinjaChatTemplate::TurnSpan(std::span<const Turn> turns, size_t i, const std::string& text,
                                 std::pair<size_t, size_t>* span) const {
  // The probe: a private-use character no template treats specially (strip, split and
  // startswith leave it), so the renderings differ exactly where the content goes.
  static constexpr std::string_view kProbe = "\xEE\x80\x80";  // U+E000
  thread_local std::vector<Turn> probed;
  probed.assign(turns.begin(), turns.end());
  probed[i].text = turns[i].text == kProbe ? "\xEE\x80\x81" : std::string(kProbe);
  const std::span<const Turn> through(probed.data(), i + 1);
  const bool last = i + 1 == turns.size();
  auto own = last ? Result<std::string>(text) : Render(turns.first(i + 1), false);
  auto own_probed = Render(through, false);
  if (!own.ok() || !own_probed.ok()) return false;
  // In the rendering that ends with the turn: where the content starts, and the text
  // the template closes the turn with (what follows the content either way).
  const size_t start = CommonPrefix(*own, *own_probed);
  const size_t closing =
      CommonSuffix(*own, *own_probed, std::min(own->size(), own_probed->size()) - start);
  if (text.compare(0, own->size(), *own) == 0) {  // the turn renders as it does at the end
    if (start >= own->size()) return false;
    *span = {start, own->size()};
    return true;
  }
  // The template renders the turn differently once others follow: find it in the
  // whole rendering by probing there.
  auto all_probed = Render(probed, false);
  if (!all_probed.ok()) return false;
  const size_t begin = CommonPrefix(text, *all_probed);
  size_t end = text.size() - CommonSuffix(text, *all_probed, text.size() - begin);
  const std::string_view close = std::string_view(*own).substr(own->size() - closing);
  if (text.compare(end, close.size(), close) == 0) end += close.size();
  if (begin >= end) return false;
  *span = {begin, end};
  return true;
}

}  // namespace headrace
