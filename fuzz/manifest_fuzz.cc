// Fuzz target: the JSONL manifest parser (ParseManifest) on arbitrary bytes.
//
// Each input is parsed twice: against a local root with absolute media paths refused,
// and against an object-storage root with them allowed. Properties checked besides "no
// crash, no leak, no UB":
//   - the only whole-file failure is kInvalidArgument (no record at all);
//   - every non-blank line is one record, numbered by its line, and bad_lines counts
//     exactly the records whose status is not ok;
//   - a good record's media lies inside the root: the root followed by '/' and
//     segments none of which is "." or "..".
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "headrace/formats/manifest.h"

namespace headrace::fuzz {
namespace {

bool InsideRoot(std::string_view root, std::string_view uri) {
  if (uri == root) return true;
  if (!uri.starts_with(root)) return false;
  std::string_view rest = uri.substr(root.size());
  if (root.back() != '/') {
    if (!rest.starts_with('/')) return false;
    rest.remove_prefix(1);
  }
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    const std::string_view seg = rest.substr(0, slash);
    if (seg.empty() || seg == "." || seg == "..") return false;
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  }
  return true;
}

void ParseAndCheck(const Buffer& bytes, const std::string& path, const SourceSpec& spec) {
  Result<Manifest> manifest = ParseManifest(bytes, path, spec);
  if (!manifest.ok()) {
    HR_FUZZ_CHECK(manifest.status().code() == StatusCode::kInvalidArgument, "%s",
                  manifest.status().ToString().c_str());
    return;
  }
  int64_t bad = 0, previous_line = 0;
  for (const SampleRecord& r : manifest->records) {
    HR_FUZZ_CHECK(r.line > previous_line, "line numbers not increasing: %lld after %lld",
                  static_cast<long long>(r.line), static_cast<long long>(previous_line));
    previous_line = r.line;
    if (!r.status.ok()) {
      ++bad;
      HR_FUZZ_CHECK(r.media.empty() && r.turns.empty(), "bad record keeps its fields");
      continue;
    }
    for (const MediaRef& m : r.media) {
      HR_FUZZ_CHECK(InsideRoot(manifest->root, m.uri), "media '%s' escapes the root '%s'",
                    m.uri.c_str(), manifest->root.c_str());
    }
  }
  HR_FUZZ_CHECK(bad == manifest->bad_lines, "bad_lines %lld, counted %lld",
                static_cast<long long>(manifest->bad_lines), static_cast<long long>(bad));
}

}  // namespace
}  // namespace headrace::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headrace;
  const Buffer bytes = fuzz::ExactCopy(data, size);

  SourceSpec local;
  local.manifest = "/data/set/manifest.jsonl";
  fuzz::ParseAndCheck(bytes, local.manifest, local);

  SourceSpec remote;
  remote.manifest = "s3://bucket/set/manifest.jsonl";
  remote.root = "s3://bucket/set/";
  remote.allow_absolute_paths = true;
  fuzz::ParseAndCheck(bytes, remote.manifest, remote);
  return 0;
}
