// The spec's enum tables, the text helpers of config_schema.h, and ParseByteSize.
#include "headrace/pipeline/config_schema.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <utility>

#include "headrace/core/field_kind_names.h"
#include "headrace/core/strings.h"
#include "headrace/pipeline/config.h"

namespace headrace {
namespace {

constexpr std::pair<ErrorPolicy, std::string_view> kPolicies[] = {{ErrorPolicy::kSkip, "skip"}};
constexpr std::pair<BadShardPolicy, std::string_view> kBadShardPolicies[] = {
    {BadShardPolicy::kSkip, "skip"}, {BadShardPolicy::kFail, "fail"}};
constexpr std::pair<AddressingStyle, std::string_view> kAddressingStyles[] = {
    {AddressingStyle::kAuto, "auto"},
    {AddressingStyle::kPath, "path"},
    {AddressingStyle::kVirtual, "virtual"}};
constexpr std::pair<ManifestRecordsForm, std::string_view> kRecordsForms[] = {
    {ManifestRecordsForm::kAuto, "auto"},
    {ManifestRecordsForm::kParsed, "parsed"},
    {ManifestRecordsForm::kLines, "lines"}};

constexpr std::pair<PackOverflow, std::string_view> kPackOverflows[] = {
    {PackOverflow::kTruncate, "truncate"}, {PackOverflow::kSkip, "skip"}};

constexpr std::pair<BlendUntil, std::string_view> kBlendUntils[] = {
    {BlendUntil::kFirstExhausted, "first_exhausted"},
    {BlendUntil::kAllExhausted, "all_exhausted"},
    {BlendUntil::kSamples, "samples"},
    {BlendUntil::kEpochized, "epochized"}};

constexpr std::pair<ShuffleScope, std::string_view> kShuffleScopes[] = {
    {ShuffleScope::kWindow, "window"}, {ShuffleScope::kGlobal, "global"}};

}  // namespace

EnumTable<BlendUntil> TableOf(BlendUntil) { return kBlendUntils; }
EnumTable<ShuffleScope> TableOf(ShuffleScope) { return kShuffleScopes; }
EnumTable<PackOverflow> TableOf(PackOverflow) { return kPackOverflows; }
EnumTable<ErrorPolicy> TableOf(ErrorPolicy) { return kPolicies; }
EnumTable<BadShardPolicy> TableOf(BadShardPolicy) { return kBadShardPolicies; }
EnumTable<AddressingStyle> TableOf(AddressingStyle) { return kAddressingStyles; }
EnumTable<FieldKind> TableOf(FieldKind) { return kFieldKindNames; }
EnumTable<ManifestRecordsForm> TableOf(ManifestRecordsForm) { return kRecordsForms; }

namespace config_internal {

std::string FormatFloat(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

bool IsIndex(std::string_view s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

std::string ChildPath(std::string_view path, std::string_view key) {
  if (IsIndex(key)) return std::string(path) + "[" + std::string(key) + "]";
  if (path.empty()) return std::string(key);
  return std::string(path) + "." + std::string(key);
}

}  // namespace config_internal

using config_internal::Quote;

Result<int64_t> ParseByteSize(std::string_view text) {
  const auto fail = [&] {
    return Status::InvalidArgument(
        "expected a byte size: an integer or a number with a unit (B, KB, MB, GB, TB, KiB, "
        "MiB, GiB, TiB), got " +
        Quote(text));
  };
  std::string_view s = TrimWhitespace(text);
  if (!s.empty() && s.front() == '-') {
    return Status::InvalidArgument("a byte size cannot be negative, got " + Quote(text));
  }
  size_t number_end = 0;
  while (number_end < s.size() &&
         ((s[number_end] >= '0' && s[number_end] <= '9') || s[number_end] == '.')) {
    ++number_end;
  }
  const std::string_view number = s.substr(0, number_end);
  const std::string_view unit = TrimWhitespace(s.substr(number_end));
  if (number.empty() || number.front() == '.' || number.back() == '.') return fail();
  static constexpr std::pair<std::string_view, int64_t> kUnits[] = {
      {"", 1},
      {"B", 1},
      {"KB", 1'000},
      {"MB", 1'000'000},
      {"GB", 1'000'000'000},
      {"TB", 1'000'000'000'000},
      {"KiB", int64_t{1} << 10},
      {"MiB", int64_t{1} << 20},
      {"GiB", int64_t{1} << 30},
      {"TiB", int64_t{1} << 40},
  };
  int64_t multiplier = 0;
  for (const auto& [name, m] : kUnits) {
    if (EqualsIgnoreCase(unit, name)) multiplier = m;
  }
  if (multiplier == 0) return fail();
  const auto too_big = [&] {
    return Status::InvalidArgument("byte size " + Quote(text) + " is too large (max " +
                                   std::to_string(std::numeric_limits<int64_t>::max()) + ")");
  };
  if (number.find('.') == std::string_view::npos) {
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (ec == std::errc::result_out_of_range) return too_big();
    if (ec != std::errc() || ptr != number.data() + number.size()) return fail();
    int64_t bytes = 0;
    if (__builtin_mul_overflow(value, multiplier, &bytes)) return too_big();
    return bytes;
  }
  double value = 0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || ptr != number.data() + number.size()) return fail();
  const long double bytes = static_cast<long double>(value) * multiplier;
  if (bytes >= 9.2e18L) return too_big();
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace headrace
