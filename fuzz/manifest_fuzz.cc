// Fuzz target: the manifest parser (ParseManifest) on arbitrary bytes, JSONL or (first
// byte '[') one JSON array.
//
// Each input is parsed twice: against a local root with absolute media paths refused,
// and against an object-storage root with them allowed. Properties checked besides "no
// crash, no leak, no UB":
//   - the only whole-file failure is kInvalidArgument (no record at all), and for an
//     array kCorruptData (not closed, or more after it);
//   - every non-blank line is one record, numbered by its line, and bad_lines counts
//     exactly the records whose status is not ok;
//   - a good record's media lies inside the root: the root followed by '/' and
//     segments none of which is "." or "..";
//   - the manifest kept as lines (ManifestLines, each line parsed on request from the
//     same exact-size buffer) fails alike or yields the same records, message for message.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "headrace/formats/manifest.h"
#include "headrace/formats/manifest_lines.h"

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

// The lines store over the same bytes against the parsed manifest.
void CheckLines(const Buffer& bytes, const std::string& path, const SourceSpec& spec,
                const Result<Manifest>& manifest) {
  Result<std::shared_ptr<const ManifestLines>> lines = ManifestLines::FromBuffer(bytes, path, spec);
  HR_FUZZ_CHECK(lines.ok() == manifest.ok(), "lines %s, parsed %s",
                lines.status().ToString().c_str(), manifest.status().ToString().c_str());
  if (!lines.ok()) {
    HR_FUZZ_CHECK(lines.status().ToString() == manifest.status().ToString(), "%s vs %s",
                  lines.status().ToString().c_str(), manifest.status().ToString().c_str());
    return;
  }
  const ManifestLines& store = **lines;
  HR_FUZZ_CHECK(store.size() == static_cast<int64_t>(manifest->records.size()),
                "lines %lld records, parsed %zu", static_cast<long long>(store.size()),
                manifest->records.size());
  HR_FUZZ_CHECK(store.root() == manifest->root, "root '%s' vs '%s'", store.root().c_str(),
                manifest->root.c_str());
  SampleRecord scratch;
  for (int64_t i = store.size() - 1; i >= 0; --i) {  // backwards: each Get stands alone
    const SampleRecord& a = store.Get(i, scratch);
    const SampleRecord& b = manifest->records[static_cast<size_t>(i)];
    HR_FUZZ_CHECK(a.id == b.id && a.line == b.line && a.status.ToString() == b.status.ToString() &&
                      a.media.size() == b.media.size() && a.turns.size() == b.turns.size() &&
                      a.attributes.size() == b.attributes.size(),
                  "record %lld differs: line %lld vs %lld, '%s' vs '%s'",
                  static_cast<long long>(i), static_cast<long long>(a.line),
                  static_cast<long long>(b.line), a.status.ToString().c_str(),
                  b.status.ToString().c_str());
    for (size_t m = 0; m < a.media.size(); ++m) {
      HR_FUZZ_CHECK(a.media[m].uri == b.media[m].uri, "media '%s' vs '%s'",
                    a.media[m].uri.c_str(), b.media[m].uri.c_str());
    }
    for (size_t t = 0; t < a.turns.size(); ++t) {
      HR_FUZZ_CHECK(a.turns[t].text == b.turns[t].text && a.turns[t].role == b.turns[t].role,
                    "turn %zu differs", t);
    }
  }
}

void ParseAndCheck(const Buffer& bytes, const std::string& path, const SourceSpec& spec) {
  Result<Manifest> manifest = ParseManifest(bytes, path, spec);
  CheckLines(bytes, path, spec, manifest);
  if (!manifest.ok()) {
    const bool array = ManifestLayoutOf(std::string_view(
                           reinterpret_cast<const char*>(bytes.data()), bytes.size())) ==
                       ManifestLayout::kArray;
    HR_FUZZ_CHECK(manifest.status().code() == StatusCode::kInvalidArgument ||
                      (array && manifest.status().code() == StatusCode::kCorruptData),
                  "%s", manifest.status().ToString().c_str());
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
