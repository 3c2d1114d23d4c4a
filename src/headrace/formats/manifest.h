// The JSONL manifest: one sample per line, parsed once per run into SampleRecords.
//
//   {"id": "000123", "image": "images/000123.jpg",
//    "conversations": [{"from": "human", "value": "<image>\nWhat is this?"},
//                      {"from": "gpt", "value": "A cat."}]}
//
// Field names are configurable (SourceSpec). Per line:
// - `id`: required, a string or an integer (kept as its decimal text).
// - `image`: optional; absent or null means a text-only record (no media). When
//   present it must be a non-empty string, resolved with ResolveMediaPath.
// - `conversations`: required array (may be empty) of objects, each with a string role
//   field ("human"/"user", "gpt"/"assistant"/"model", "system") and a string text field.
// Other fields are ignored.
//
// The same records may come as one JSON array of these objects instead of lines (LLaVA's
// own files): a file whose first byte past whitespace is '[' (ManifestLayoutOf). Its
// elements are found in one streaming pass and parsed one by one as lines are; a bad
// element is its record's error, named "element N".
//
// A bad line does not fail the load: its record keeps its index and carries the reason
// in `status` (kBadRecord: not JSON, not an object, unknown role, a NUL in the media
// path; kMissingField: a required field absent or of the wrong type; kPathEscape: media
// outside the root), so the engine reports it as (epoch, index) when an epoch reaches it.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/formats/source_spec.h"
#include "headrace/io/storage.h"

namespace headrace {

// How a manifest file holds its records (ManifestLayoutOf).
enum class ManifestLayout {
  // JSONL: one object a line; a record is named "line N" (1-based, blank lines counted).
  kLines,
  // One JSON array of objects, as LLaVA's own files are (llava_v1_5_mix665k.json); a
  // record is named "element N" (0-based, as JSON indexes it).
  kArray,
};

// kArray when the first byte after a UTF-8 byte-order mark and whitespace is '[', else
// kLines.
ManifestLayout ManifestLayoutOf(std::string_view bytes);

struct Manifest {
  std::string path;  // the manifest as given
  // The normalized root media paths were resolved against: spec.root or the manifest's
  // folder, made absolute for local paths.
  std::string root;
  // One per non-empty line (an array's: per element), in file order; index = position
  // in this vector.
  std::vector<SampleRecord> records;
  // Records whose status is not ok; not counted when the records are kept as lines
  // (SourceSpec::records, formats/manifest_lines.h): those are parsed as samples reach them.
  int64_t bad_lines = 0;
};

// Parses JSONL bytes, or a JSON array's (ManifestLayoutOf: one record an element, its
// elements found by ForEachManifestElement, then each parsed as a line is). Blank
// (whitespace-only) lines are skipped but still counted for line numbers; CRLF endings
// and a leading UTF-8 byte-order mark are accepted. An array that is not closed, or has
// more after it, is kCorruptData naming the byte.
// `manifest_path` locates the default root (its folder) and appears in messages.
// Fails (kInvalidArgument) only when no line holds a record; bad lines are kept.
// Reads `jsonl_bytes` in place; a line within SIMDJSON_PADDING bytes of the end is
// copied to a small padded scratch buffer, nothing else is copied.
Result<Manifest> ParseManifest(const Buffer& jsonl_bytes, const std::string& manifest_path,
                               const SourceSpec& spec);

// The per-line half of ParseManifest, for a store that keeps a manifest's lines and
// parses each one when a sample reaches it (formats/manifest_lines.h). Cheap to copy;
// thread-safe: each calling thread parses with a simdjson parser of its own.
class ManifestLineParser {
 public:
  // For the manifest at `manifest_path` (its folder is the default root), whose records
  // are laid out as `layout` says (it names them in messages).
  static Result<ManifestLineParser> Make(const std::string& manifest_path,
                                         const SourceSpec& spec,
                                         ManifestLayout layout = ManifestLayout::kLines);
  // Fills `record` (reset first) from `line`, without its '\n' (a trailing '\r' is
  // dropped), or from an array's element, as ParseManifest does: a bad line comes back
  // with its status set, its id kept when it was read and nothing else; an empty element
  // is bad. `number`: the line's number, or the element's index (SampleRecord::line gets
  // the index + 1). `readable_after`: how many bytes past the line's end may be read
  // (simdjson reads up to SIMDJSON_PADDING of them, whatever they hold); with fewer, the
  // line is copied to a padded scratch first.
  void Parse(std::string_view line, size_t readable_after, int64_t number,
             SampleRecord& record) const;
  // The normalized root media paths are resolved against (Manifest::root).
  const std::string& root() const;
  ManifestLayout layout() const;

 private:
  struct State;
  explicit ManifestLineParser(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  std::shared_ptr<const State> state_;
};

// Whether a manifest line holds no record: only spaces, tabs and CRs.
bool IsBlankManifestLine(std::string_view line);

// Walks a JSONL manifest's lines as ParseManifest reads them: a leading UTF-8 byte-order
// mark skipped, split at '\n', blank lines skipped but counted in line numbers. Calls
// f(line, line_number, readable_after) for each other line (without its '\n';
// `readable_after`: the bytes from the line's end to the end of `bytes`) until f returns
// false. Returns the lines seen, blank ones included. Shared by ParseManifest and the
// lines store (manifest_lines.h), so both find the same records at the same numbers.
template <typename F>
int64_t ForEachManifestLine(std::string_view bytes, F&& f) {
  const char* pos = bytes.data();
  const char* const end = pos + bytes.size();
  if (bytes.starts_with("\xEF\xBB\xBF")) pos += 3;
  int64_t line_number = 0;
  while (pos < end) {
    ++line_number;
    const char* newline = static_cast<const char*>(std::memchr(pos, '\n', end - pos));
    const char* line_end = newline ? newline : end;
    const std::string_view line(pos, static_cast<size_t>(line_end - pos));
    pos = newline ? newline + 1 : end;
    if (IsBlankManifestLine(line)) continue;
    if (!f(line, line_number, static_cast<size_t>(end - line_end))) break;
  }
  return line_number;
}

// Walks a manifest that is one JSON array (ManifestLayoutOf: kArray) in one pass,
// without parsing or allocating: calls f(element, index, readable_after) for each
// top-level element (its text with the whitespace around it trimmed; empty where a value
// is missing, `[{...},,{...}]`; `readable_after`: the bytes from its end to the end of
// `bytes`) until f returns false. Only strings (with their escapes) and bracket depth are
// followed; what is inside an element is checked when the element is parsed. Returns the
// offset of the array's closing ']' (of the byte where f stopped). kCorruptData naming
// the byte when the array is not closed (a truncated file) or anything but whitespace
// follows it; kInvalidArgument when `bytes` do not start with '['.
Result<size_t> ForEachManifestElement(
    std::string_view bytes, const std::string& manifest_path,
    const std::function<bool(std::string_view element, int64_t index, size_t readable_after)>&
        f);

// The bytes `manifest` holds in memory, for the run report: the records array (its
// capacity), each record's strings, turns and error, counted from the containers'
// capacities, each heap block as glibc's malloc sizes it (an 8-byte header, rounded up
// to 16 bytes, at least 32). Strings short enough to live inside their object count
// once, in the record. O(records); does not allocate.
size_t ManifestMemoryBytes(const Manifest& manifest);

// Reads spec.manifest with storage.Read and parses it. Fails with the storage's kNotFound
// or kIoError when the file cannot be read.
Result<Manifest> LoadManifest(Storage& storage, const SourceSpec& spec);

// A conversation turn's role: "human"/"user" -> user, "gpt"/"assistant"/"model" ->
// assistant, "system" -> system; anything else is kBadRecord naming the allowed ones.
// Shared by every source that reads chat turns (manifest lines, shard .json members).
Result<Role> ParseRole(std::string_view role);

// Joins a media path from a manifest to the dataset root, lexically (no file system
// access), so that it works the same for local paths and URIs:
// - root is a local path ("/data/coco", "data/coco", "" = current directory) or a URI
//   with a scheme ("s3://bucket/prefix", "https://host/dir"); the scheme and authority
//   of a URI are never climbed out of.
// - `relative` is normalized: "." and empty segments are dropped, ".." removes the
//   previous segment. A ".." may never climb above root, even to come back
//   ("../x.jpg", "images/../../x.jpg", "../<root's name>/x.jpg"): kPathEscape.
// - An absolute `relative` ("/x.jpg", or a URI "s3://b/x.jpg") is kPathEscape unless
//   `allow_absolute`; when allowed it is normalized and must still lie inside root (use
//   root "/" to accept any local absolute path). It cannot be checked against a
//   relative root, so that is kPathEscape too.
// - Empty `relative` is kMissingField; one with a NUL byte is kBadRecord (the C library
//   would read only the part before it: another file).
// - The segments of `relative` are literal object names on every backend. Under an
//   http(s) root each is percent-encoded (RFC 3986 unreserved characters kept), so
//   "%2e%2e/x.jpg", "..%2fx.jpg", "a#b.jpg" and "a?x.jpg" request exactly those names
//   and a server that decodes the URL cannot be led out of the root. An allowed absolute
//   http(s) URL is a URL: a segment that decodes to "." or ".." or holds an encoded '/'
//   or '\' is kPathEscape. Local paths and s3:// keys are kept byte for byte (the S3
//   backend encodes every key).
Result<std::string> ResolveMediaPath(std::string_view root, std::string_view relative,
                                     bool allow_absolute);

// The root media paths of spec's manifest resolve against (Manifest::root), without
// reading anything: spec.root or the manifest's folder, normalized, local paths made
// absolute.
Result<std::string> ManifestRoot(const SourceSpec& spec);

}  // namespace headrace
