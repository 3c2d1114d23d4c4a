// Fuzz target: the WebDataset shard reader (ListTarMembers, GroupSamples) and the shard
// index parser (ParseShardIndex) on arbitrary bytes.
//
// Properties checked besides "no crash, no leak, no UB":
//   - a listing fails only with kCorruptData or kUnsupportedFormat;
//   - every member's byte range lies inside the input, in archive order, not
//     overlapping the next one, and its name is not empty;
//   - grouping keeps every member as exactly one field, a good sample has a key and no
//     field twice;
//   - the index of the good samples round-trips through its JSON unchanged;
//   - the input read as an index is accepted or kBadRecord, and an accepted one
//     round-trips.
// Member names are only compared and copied here, never used as paths.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "headrace/formats/tar_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headrace;
  const Buffer bytes = fuzz::ExactCopy(data, size);
  const TarListing listing = ListTarMembers({bytes.data(), bytes.size()});
  const StatusCode code = listing.status.code();
  HR_FUZZ_CHECK(code == StatusCode::kOk || code == StatusCode::kCorruptData ||
                    code == StatusCode::kUnsupportedFormat,
                "%s", listing.status.ToString().c_str());
  const int64_t total = static_cast<int64_t>(size);
  int64_t previous_end = 0;
  for (const TarMember& m : listing.members) {
    HR_FUZZ_CHECK(!m.name.empty(), "member without a name");
    HR_FUZZ_CHECK(m.offset >= previous_end && m.size >= 0 && m.size <= total - m.offset,
                  "member '%s' [%lld, +%lld) outside the input (%lld bytes) or before %lld",
                  m.name.c_str(), static_cast<long long>(m.offset), static_cast<long long>(m.size),
                  static_cast<long long>(total), static_cast<long long>(previous_end));
    previous_end = m.offset + m.size;
  }

  const std::string required[] = {"json"};
  const auto samples = GroupSamples(listing.members, required);
  size_t fields = 0;
  for (const TarSample& s : samples) {
    fields += s.fields.size();
    if (!s.status.ok()) continue;
    HR_FUZZ_CHECK(!s.key.empty(), "good sample without a key");
    std::set<std::string> names;
    for (const TarField& f : s.fields) {
      HR_FUZZ_CHECK(!f.name.empty() && names.insert(f.name).second,
                    "good sample '%s' has field '%s' empty or twice", s.key.c_str(),
                    f.name.c_str());
    }
  }
  HR_FUZZ_CHECK(fields == listing.members.size(), "%zu members grouped into %zu fields",
                listing.members.size(), fields);

  const std::string json = ShardIndexToJson(MakeShardIndex("s.tar", total, samples));
  const Result<ShardIndex> parsed = ParseShardIndex(json);
  HR_FUZZ_CHECK(parsed.ok(), "own index does not parse: %s", parsed.status().ToString().c_str());
  HR_FUZZ_CHECK(ShardIndexToJson(*parsed) == json, "index does not round-trip");

  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const Result<ShardIndex> as_index = ParseShardIndex(text);
  if (!as_index.ok()) {
    HR_FUZZ_CHECK(as_index.status().code() == StatusCode::kBadRecord, "%s",
                  as_index.status().ToString().c_str());
  } else {
    const std::string again = ShardIndexToJson(*as_index);
    const Result<ShardIndex> reparsed = ParseShardIndex(again);
    HR_FUZZ_CHECK(reparsed.ok() && ShardIndexToJson(*reparsed) == again,
                  "accepted index does not round-trip");
  }
  // Checked against a shard of the index's own size (shard_set.cc reads it that way):
  // accepted only when every field fits where a tar puts data, so never more fields than
  // the shard has blocks.
  const Result<ShardIndex> fitted = ParseShardIndex(text, static_cast<int64_t>(size));
  if (!fitted.ok()) {
    HR_FUZZ_CHECK(fitted.status().code() == StatusCode::kBadRecord, "%s",
                  fitted.status().ToString().c_str());
  } else {
    size_t fitted_fields = 0;
    for (const ShardIndex::Sample& s : fitted->samples) fitted_fields += s.fields.size();
    HR_FUZZ_CHECK(fitted_fields <= size / 512, "%zu fields fitted in %zu bytes", fitted_fields,
                  size);
  }
  return 0;
}
