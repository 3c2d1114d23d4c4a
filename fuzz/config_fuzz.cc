// Fuzz target: the YAML pipeline config parser with `--set` overrides.
//
// Input: YAML text, optionally followed by a line "#--set" (a YAML comment, so a seed
// is still a valid config file) and then one override per line, as `--set` takes them:
//
//   source: {manifest: m.jsonl}
//   ops: [image.decode]
//   #--set
//   ops.0.image.decode.max_pixels=100
//
// Properties checked besides "no crash, no leak, no UB, no escaping exception":
//   - the only failure is kInvalidArgument (configuration errors exit 2);
//   - an accepted spec validates, and its canonical YAML (PipelineSpecToYaml) parses
//     back to a spec with the same canonical YAML: the round trip --print-config and
//     fingerprints rely on.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "headrace/pipeline/config.h"

namespace headrace::fuzz {
namespace {

constexpr std::string_view kSetMarker = "\n#--set\n";

void CheckFailure(const Status& s, std::string_view what) {
  HR_FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument, "%.*s: %s", static_cast<int>(what.size()),
                what.data(), s.ToString().c_str());
}

}  // namespace
}  // namespace headrace::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headrace;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view yaml = input;
  std::vector<std::string> overrides;
  if (const size_t marker = input.find(fuzz::kSetMarker); marker != std::string_view::npos) {
    yaml = input.substr(0, marker + 1);
    std::string_view rest = input.substr(marker + fuzz::kSetMarker.size());
    while (!rest.empty()) {
      const size_t newline = rest.find('\n');
      overrides.emplace_back(rest.substr(0, newline));
      rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
    }
  }

  Result<PipelineSpec> spec = ParsePipelineConfig(yaml, overrides);
  if (!spec.ok()) {
    fuzz::CheckFailure(spec.status(), "parse");
    return 0;
  }
  const Status valid = ValidatePipelineSpec(*spec);
  HR_FUZZ_CHECK(valid.ok(), "accepted spec does not validate: %s", valid.ToString().c_str());

  const std::string canonical = PipelineSpecToYaml(*spec);
  Result<PipelineSpec> again = ParsePipelineConfig(canonical);
  HR_FUZZ_CHECK(again.ok(), "canonical YAML does not parse back: %s\n--- canonical:\n%s",
                again.status().ToString().c_str(), canonical.c_str());
  const std::string twice = PipelineSpecToYaml(*again);
  HR_FUZZ_CHECK(twice == canonical,
                "canonical YAML changed on a round trip\n--- first:\n%s--- second:\n%s",
                canonical.c_str(), twice.c_str());
  return 0;
}
