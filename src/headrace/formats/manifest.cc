#include "headrace/formats/manifest.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <span>
#include <utility>

#include "headrace/core/strings.h"
#include "headrace/formats/conversation_json.h"
#include "headrace/io/uri.h"

namespace headrace {
namespace {

// A path split into the part ".." never climbs out of and its segments.
struct SplitPath {
  std::string_view prefix;  // "scheme://authority", "/" or "" (relative)
  std::vector<std::string_view> segments;
  bool absolute() const { return !prefix.empty(); }
};

// Length of "scheme://authority" at the start of `path`, or 0 when it is not a URI.
// Scheme per RFC 3986: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
size_t UriPrefixLength(std::string_view path) {
  const size_t sep = path.find("://");
  if (sep == std::string_view::npos || sep == 0) return 0;
  for (size_t i = 0; i < sep; ++i) {
    const char c = path[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    const bool ok =
        alpha || (i > 0 && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'));
    if (!ok) return 0;
  }
  const size_t authority_end = path.find('/', sep + 3);
  return authority_end == std::string_view::npos ? path.size() : authority_end;
}

// Lexical normalization. ".." at the top of an absolute path stays at the top (as "/.."
// is "/"); at the top of a relative path it is kept, since it names the parent of the
// current directory.
SplitPath Split(std::string_view path) {
  SplitPath out;
  std::string_view rest = path;
  if (const size_t n = UriPrefixLength(path); n > 0) {
    out.prefix = path.substr(0, n);
    rest = path.substr(n);
  } else if (!path.empty() && path.front() == '/') {
    out.prefix = path.substr(0, 1);
    rest = path.substr(1);
  }
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    const std::string_view seg = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (seg.empty() || seg == ".") continue;
    if (seg == "..") {
      if (!out.segments.empty() && out.segments.back() != "..") {
        out.segments.pop_back();
      } else if (!out.absolute()) {
        out.segments.push_back(seg);
      }
      continue;
    }
    out.segments.push_back(seg);
  }
  return out;
}

std::string Join(const SplitPath& p) {
  std::string out(p.prefix);
  for (size_t i = 0; i < p.segments.size(); ++i) {
    if (i > 0 || (!out.empty() && out.back() != '/')) out += '/';
    out += p.segments[i];
  }
  if (out.empty()) out = ".";
  return out;
}

// Whether `path` (normalized) lies inside `root` (normalized): same prefix, root's
// segments first, and no ".." after them (a relative root cannot contain "../x").
bool Inside(const SplitPath& root, const SplitPath& path) {
  if (root.prefix != path.prefix || path.segments.size() < root.segments.size()) return false;
  for (size_t i = 0; i < root.segments.size(); ++i) {
    if (root.segments[i] != path.segments[i]) return false;
  }
  for (size_t i = root.segments.size(); i < path.segments.size(); ++i) {
    if (path.segments[i] == "..") return false;
  }
  return true;
}

// The folder of a manifest path or URI, as a root: "data/m.jsonl" -> "data",
// "m.jsonl" -> "", "s3://b/m.jsonl" -> "s3://b", "/m.jsonl" -> "/".
std::string_view ParentOf(std::string_view path) {
  const size_t prefix = UriPrefixLength(path);
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos || slash < prefix) return path.substr(0, prefix);
  if (slash == 0) return path.substr(0, 1);
  return path.substr(0, slash);
}

Result<std::string> DefaultRoot(const std::string& manifest_path, const SourceSpec& spec) {
  std::string root(spec.root.empty() ? ParentOf(manifest_path) : std::string_view(spec.root));
  if (UriPrefixLength(root) > 0 || (!root.empty() && root.front() == '/')) {
    return Join(Split(root));
  }
  // A relative local root is anchored to the current directory now, so that records
  // carry absolute paths and "inside root" is decidable for absolute media paths.
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  if (ec) {
    return Status::IoError("cannot resolve manifest root " + QuoteForMessage(root) + ": " +
                           ec.message());
  }
  return Join(Split(cwd.string() + "/" + root));
}

// Where a record is, for its messages: "line 12: " (JSONL, 1-based, blank lines
// counted) or "element 11: " (an array's, 0-based as JSON indexes it).
struct Place {
  ManifestLayout layout = ManifestLayout::kLines;
  int64_t number = 0;
};

std::string LinePrefix(Place line) {
  return (line.layout == ManifestLayout::kArray ? "element " : "line ") +
         std::to_string(line.number) + ": ";
}

Status BadRecord(Place line, std::string what) {
  return Status::BadRecord(LinePrefix(line) + std::move(what));
}
Status MissingField(Place line, std::string what) {
  return Status::MissingField(LinePrefix(line) + std::move(what));
}

// Whether a segment of an http(s) URL is a path step in disguise once a server decodes
// it: "%2e%2e", "..%2f..", "%2E", "a%5cb".
bool EncodedTraversal(std::string_view segment) {
  if (segment.find('%') == std::string_view::npos) return false;
  const std::string decoded = UriDecode(segment);
  return decoded == "." || decoded == ".." || decoded.find_first_of("/\\") != std::string::npos;
}

// ResolveMediaPath against a root already split (`base`) and joined (`base_text`), so
// that a manifest splits its root once, not once per line. One segment walk (Split)
// serves absolute and relative paths alike.
Result<std::string> Resolve(const SplitPath& base, const std::string& base_text,
                            std::string_view relative, bool allow_absolute) {
  if (relative.empty()) return Status::MissingField("empty media path");
  if (relative.find('\0') != std::string_view::npos) {
    // The C library would read the path only up to the NUL: another file.
    return Status::BadRecord("media path " + QuoteForMessage(relative) + " contains a NUL byte");
  }
  const bool http = SchemeOf(base_text) == UriScheme::kHttp;
  const bool absolute = UriPrefixLength(relative) > 0 || relative.front() == '/';
  if (absolute) {
    if (!allow_absolute) {
      return Status::PathEscape("absolute media path " + QuoteForMessage(relative) +
                                " is not allowed (set source.allow_absolute_paths: true to "
                                "accept absolute paths inside the root)");
    }
    if (!base.absolute()) {
      return Status::PathEscape("absolute media path " + QuoteForMessage(relative) +
                                " cannot be checked against the relative root " +
                                QuoteForMessage(base_text) + "; make source.root absolute");
    }
    const SplitPath path = Split(relative);
    const bool disguised =
        http && std::any_of(path.segments.begin(), path.segments.end(), EncodedTraversal);
    if (!Inside(base, path) || disguised) {
      return Status::PathEscape("absolute media path " + QuoteForMessage(relative) +
                                " is outside the root " + QuoteForMessage(base_text));
    }
    return Join(path);
  }

  // Relative: after Split, a ".." can only remain at the front, where it leaves root.
  const SplitPath path = Split(relative);
  if (!path.segments.empty() && path.segments.front() == "..") {
    return Status::PathEscape("media path " + QuoteForMessage(relative) + " leaves the root " +
                              QuoteForMessage(base_text));
  }
  // The segments are object names, never URL syntax: on http(s) each is percent-encoded,
  // so "%2e%2e", "a#b.jpg" or "a?x.jpg" request exactly that object (S3 keys are encoded
  // by the backend; local paths are used as they are).
  std::string out = base.segments.empty() && base.prefix.empty() ? std::string() : base_text;
  for (const std::string_view segment : path.segments) {
    if (!out.empty() && out.back() != '/') out += '/';
    out += http ? UriEncode(segment, false) : std::string(segment);
  }
  if (out.empty()) out = ".";
  return out;
}

// What a value of `kind` must be in JSON, for messages.
const char* ExpectedJson(FieldKind kind) {
  switch (kind) {
    case FieldKind::kInt:
      return "an integer";
    case FieldKind::kFloat:
      return "a number";
    default:
      return "a string";
  }
}

// One item of a media, text or scalar field: a MediaRef or an Attribute of `record`.
Status ReadItem(simdjson::dom::element item, Place line, const SourceSpec& spec,
                const SplitPath& root, const std::string& root_text, int field,
                const SourceFieldSpec& f, const std::string& where, SampleRecord& record) {
  const auto wrong = [&] {
    return MissingField(line, "field '" + where + "' must be " + ExpectedJson(f.kind));
  };
  if (IsMediaKind(f.kind)) {
    std::string_view path;
    if (item.get(path) != simdjson::SUCCESS) return wrong();
    if (path.empty()) return MissingField(line, "field '" + where + "' is empty");
    Result<std::string> uri = Resolve(root, root_text, path, spec.allow_absolute_paths);
    if (!uri.ok()) return uri.status().WithContext(LinePrefix(line) + where);
    record.media.push_back(MediaRef{field, std::move(uri).value()});
    return Status::Ok();
  }
  Attribute attribute{field, int64_t{0}};
  switch (f.kind) {
    case FieldKind::kInt: {
      int64_t i;
      if (item.get(i) != simdjson::SUCCESS) return wrong();
      attribute.value = i;
      break;
    }
    case FieldKind::kFloat: {
      double d;
      if (item.get(d) != simdjson::SUCCESS) return wrong();  // integers convert
      attribute.value = d;
      break;
    }
    default: {  // text, string
      std::string_view text;
      if (item.get(text) != simdjson::SUCCESS) return wrong();
      attribute.value = std::string(text);
      break;
    }
  }
  record.attributes.push_back(std::move(attribute));
  return Status::Ok();
}

// Fills `record` (id, media, turns, attributes) from one parsed line, or returns why it
// is bad. `keys[f]`: field f's JSON keys (ManifestKeysOf), one of which a record may hold.
Status FillRecord(simdjson::dom::element doc, Place line, const SourceSpec& spec,
                  std::span<const SourceFieldSpec> fields,
                  std::span<const std::vector<std::string>> keys, const SplitPath& root,
                  const std::string& root_text, SampleRecord& record) {
  simdjson::dom::object obj;
  if (doc.get(obj) != simdjson::SUCCESS) {
    return BadRecord(line, "expected a JSON object, got " +
                               std::string(doc.is_array() ? "an array" : "a scalar"));
  }

  simdjson::dom::element id;
  if (obj.at_key(spec.id_field).get(id) != simdjson::SUCCESS) {
    return MissingField(line, "missing field '" + spec.id_field + "'");
  }
  if (std::string_view s; id.get(s) == simdjson::SUCCESS) {
    record.id.assign(s);
  } else if (int64_t i; id.get(i) == simdjson::SUCCESS) {
    record.id = std::to_string(i);
  } else if (uint64_t u; id.get(u) == simdjson::SUCCESS) {
    record.id = std::to_string(u);
  } else {
    return MissingField(line, "field '" + spec.id_field + "' must be a string or an integer");
  }

  for (size_t fi = 0; fi < fields.size(); ++fi) {
    const SourceFieldSpec& f = fields[fi];
    const int field = static_cast<int>(fi);
    // The field's value under whichever of its keys the record holds (absent and null
    // alike: no value); two of them is the record's error, not a silent choice.
    simdjson::dom::element value;
    const std::string* key = nullptr;
    for (const std::string& k : keys[fi]) {
      simdjson::dom::element v;
      if (obj.at_key(k).get(v) != simdjson::SUCCESS || v.is_null()) continue;
      if (key != nullptr) {
        return BadRecord(line, "fields '" + *key + "' and '" + k + "' are both present; " +
                                   "field '" + f.name + "' reads one of them (key " +
                                   QuoteForMessage(f.key) + ")");
      }
      value = v;
      key = &k;
    }
    if (key == nullptr) {
      if (f.required) {
        std::string names;
        for (const std::string& k : keys[fi]) names += (names.empty() ? "'" : " or '") + k + "'";
        return MissingField(line, "missing field " + names);
      }
      continue;
    }
    if (f.kind == FieldKind::kConversation) {
      HR_RETURN_IF_ERROR(AppendTurns(value, spec, *key, LinePrefix(line), record.turns));
      continue;
    }
    if (f.max_items == 0) {
      HR_RETURN_IF_ERROR(ReadItem(value, line, spec, root, root_text, field, f, *key, record));
      continue;
    }
    simdjson::dom::array items;
    if (value.get(items) != simdjson::SUCCESS) {
      // One value where a list is declared is a list of one: LLaVA-style data writes
      // "image": "a.jpg" for one image and a list for several, often in one file.
      HR_RETURN_IF_ERROR(ReadItem(value, line, spec, root, root_text, field, f, *key, record));
      continue;
    }
    if (items.size() > static_cast<size_t>(f.max_items)) {
      return BadRecord(line, "field '" + *key + "' has " + std::to_string(items.size()) +
                                 " items, more than its max_items " +
                                 std::to_string(f.max_items));
    }
    size_t i = 0;
    for (simdjson::dom::element item : items) {
      HR_RETURN_IF_ERROR(ReadItem(item, line, spec, root, root_text, field, f,
                                  *key + "[" + std::to_string(i++) + "]", record));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Role> ParseRole(std::string_view role) {
  if (role == "human" || role == "user") return Role::kUser;
  if (role == "gpt" || role == "assistant" || role == "model") return Role::kAssistant;
  if (role == "system") return Role::kSystem;
  return Status::BadRecord("unknown role " + QuoteForMessage(role) +
                           " (allowed: human, user, gpt, assistant, model, system)");
}

Status AppendTurns(simdjson::dom::element conv_element, const SourceSpec& spec,
                   const std::string& key, std::string_view prefix, std::vector<Turn>& out) {
  simdjson::dom::array conv;
  if (conv_element.get(conv) != simdjson::SUCCESS) {
    return Status::MissingField(std::string(prefix) + "field '" + key + "' must be an array");
  }
  out.reserve(out.size() + conv.size());
  size_t i = 0;
  for (simdjson::dom::element turn_element : conv) {
    // Built only for messages: good records allocate nothing here.
    auto where = [&](std::string_view field) {
      std::string w = key + "[" + std::to_string(i) + "]";
      if (!field.empty()) w.append(".").append(field);
      return w;
    };
    const auto missing = [&](std::string_view field, std::string_view what) {
      return Status::MissingField(std::string(prefix) + "'" + where(field) + "' " +
                                  std::string(what));
    };
    simdjson::dom::object turn_obj;
    if (turn_element.get(turn_obj) != simdjson::SUCCESS) return missing("", "must be an object");
    std::string_view role_name;
    std::string_view text;
    if (turn_obj.at_key(spec.role_field).get(role_name) != simdjson::SUCCESS) {
      return missing(spec.role_field, "is missing or not a string");
    }
    if (turn_obj.at_key(spec.text_field).get(text) != simdjson::SUCCESS) {
      return missing(spec.text_field, "is missing or not a string");
    }
    Result<Role> role = ParseRole(role_name);
    if (!role.ok()) return role.status().WithContext(std::string(prefix) + where(spec.role_field));
    out.push_back(Turn{*role, std::string(text)});
    ++i;
  }
  return Status::Ok();
}

Result<std::string> ResolveMediaPath(std::string_view root, std::string_view relative,
                                     bool allow_absolute) {
  const SplitPath base = Split(root);
  return Resolve(base, Join(base), relative, allow_absolute);
}

Result<std::string> ManifestRoot(const SourceSpec& spec) {
  return DefaultRoot(spec.manifest, spec);
}

bool IsBlankManifestLine(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r') return false;
  }
  return true;
}

struct ManifestLineParser::State {
  SourceSpec spec;
  ManifestLayout layout = ManifestLayout::kLines;
  std::vector<SourceFieldSpec> fields;
  std::vector<std::vector<std::string>> keys;  // each field's JSON keys (ManifestKeysOf)
  std::string root_text;
  SplitPath root;  // views into root_text: a State is never moved once made
};

Result<ManifestLineParser> ManifestLineParser::Make(const std::string& manifest_path,
                                                    const SourceSpec& spec,
                                                    ManifestLayout layout) {
  auto state = std::make_shared<State>();
  state->spec = spec;
  state->layout = layout;
  state->fields = ResolvedFields(spec);
  for (const SourceFieldSpec& f : state->fields) state->keys.push_back(ManifestKeysOf(f));
  HR_ASSIGN_OR_RETURN(state->root_text, DefaultRoot(manifest_path, spec));
  state->root = Split(state->root_text);
  return ManifestLineParser(std::move(state));
}

const std::string& ManifestLineParser::root() const { return state_->root_text; }

ManifestLayout ManifestLineParser::layout() const { return state_->layout; }

void ManifestLineParser::Parse(std::string_view line, size_t readable_after, int64_t number,
                               SampleRecord& record) const {
  // One parser per thread, reused: its buffers grow to the longest line and stay.
  thread_local simdjson::dom::parser parser;
  thread_local std::vector<char> scratch;
  if (!line.empty() && line.back() == '\r') {
    line.remove_suffix(1);
    ++readable_after;
  }
  const State& s = *state_;
  const Place place{s.layout, number};
  record = SampleRecord{};
  record.line = s.layout == ManifestLayout::kArray ? number + 1 : number;
  if (line.empty()) {  // an array's missing value: `[{...},,{...}]` or a trailing comma
    record.status = BadRecord(place, "no value between two commas of the array");
    return;
  }
  // simdjson may read SIMDJSON_PADDING bytes past the line (any content): the bytes
  // after it serve, except near the end of the buffer.
  const char* data = line.data();
  if (readable_after < simdjson::SIMDJSON_PADDING) {
    scratch.assign(line.begin(), line.end());
    scratch.resize(line.size() + simdjson::SIMDJSON_PADDING, '\0');
    data = scratch.data();
  }
  simdjson::dom::element doc;
  const simdjson::error_code error = parser.parse(data, line.size(), false).get(doc);
  if (error != simdjson::SUCCESS) {
    record.status =
        BadRecord(place, std::string("invalid JSON: ") + simdjson::error_message(error));
  } else {
    record.status = FillRecord(doc, place, s.spec, s.fields, s.keys, s.root, s.root_text, record);
  }
  if (!record.status.ok()) {
    // The id, when it was read, stays for messages; nothing else is usable.
    record.media.clear();
    record.turns.clear();
    record.attributes.clear();
  }
}

ManifestLayout ManifestLayoutOf(std::string_view bytes) {
  if (bytes.starts_with("\xEF\xBB\xBF")) bytes.remove_prefix(3);
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && bytes[first] == '[' ? ManifestLayout::kArray
                                                                 : ManifestLayout::kLines;
}

namespace {

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

const char* SkipJsonSpace(const char* p, const char* end) {
  while (p < end && IsJsonSpace(*p)) ++p;
  return p;
}

// The closing quote of the string whose opening quote is at `open`, or `end` when the
// bytes end first. A quote is escaped when an odd run of backslashes precedes it; memchr
// finds the candidates (LLaVA records are mostly string bytes).
const char* StringEnd(const char* open, const char* end) {
  const char* p = open + 1;
  while (p < end) {
    const char* quote = static_cast<const char*>(std::memchr(p, '"', end - p));
    if (quote == nullptr) return end;
    const char* b = quote;
    while (b > open + 1 && b[-1] == '\\') --b;
    if ((quote - b) % 2 == 0) return quote;
    p = quote + 1;
  }
  return end;
}

}  // namespace

Result<size_t> ForEachManifestElement(
    std::string_view bytes, const std::string& manifest_path,
    const std::function<bool(std::string_view, int64_t, size_t)>& f) {
  // A hand scan of the top level, not simdjson: its DOM and On-Demand parsers both index
  // the whole document at once (a padded copy and ~4 bytes of structural index per
  // structural character: several times a multi-GB file), and iterate_many reads
  // concatenated documents, not an array's elements. Here only strings (their escapes)
  // and bracket depth are followed, so each element's span is found in one pass with no
  // memory; the elements are then parsed (validated) one by one as a JSONL line is.
  // Brackets are counted, not matched: a '}' closing a '[' inside an element leaves the
  // span right and that element's parse fails (its bad_record); a stray closer at the
  // top level ends the array early and the bytes after it are the load's error.
  const char* const begin = bytes.data();
  const char* const end = begin + bytes.size();
  const auto where = [&](const char* p) {
    return "manifest " + QuoteForMessage(manifest_path) + ": byte " +
           std::to_string(p - begin) + ": ";
  };
  const char* p = begin;
  if (bytes.starts_with("\xEF\xBB\xBF")) p += 3;
  p = SkipJsonSpace(p, end);
  if (p == end || *p != '[') {
    return Status::InvalidArgument(where(p) + "expected the '[' of a JSON array");
  }
  p = SkipJsonSpace(p + 1, end);
  const char* open = p;  // where the current element's text starts
  int64_t index = 0;
  int64_t depth = 0;
  if (p == end || *p != ']') {  // else []: no elements
    for (;;) {
      if (p >= end) {
        return Status::CorruptData(where(open) + "the JSON array is not closed: element " +
                                   std::to_string(index) +
                                   ", which starts here, runs to the end of the file "
                                   "(truncated?)");
      }
      const char c = *p;
      if (c == '"') {
        const char* close = StringEnd(p, end);
        if (close == end) {
          return Status::CorruptData(where(p) + "the JSON array is not closed: a string of "
                                     "element " + std::to_string(index) +
                                     " runs to the end of the file (truncated?)");
        }
        p = close + 1;
        continue;
      }
      if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && depth > 0) {
        --depth;
      } else if (depth == 0 && (c == ',' || c == ']')) {
        const char* last = p;
        while (last > open && IsJsonSpace(last[-1])) --last;
        if (!f(std::string_view(open, last - open), index, static_cast<size_t>(end - last))) {
          return static_cast<size_t>(p - begin);
        }
        ++index;
        if (c == ']') break;
        p = SkipJsonSpace(p + 1, end);
        open = p;
        continue;
      }
      ++p;
    }
  }
  const size_t close = static_cast<size_t>(p - begin);
  if (const char* rest = SkipJsonSpace(p + 1, end); rest != end) {
    return Status::CorruptData(where(rest) + "more after the JSON array's closing ']' (at byte " +
                               std::to_string(close) +
                               "): a manifest is one array, or one JSON object a line");
  }
  return close;
}

Result<Manifest> ParseManifest(const Buffer& jsonl_bytes, const std::string& manifest_path,
                               const SourceSpec& spec) {
  const std::string_view bytes(reinterpret_cast<const char*>(jsonl_bytes.data()),
                               jsonl_bytes.size());
  const ManifestLayout layout = ManifestLayoutOf(bytes);
  HR_ASSIGN_OR_RETURN(const ManifestLineParser parser,
                      ManifestLineParser::Make(manifest_path, spec, layout));
  Manifest manifest;
  manifest.path = manifest_path;
  manifest.root = parser.root();
  const auto parse = [&](std::string_view text, int64_t number, size_t readable_after) {
    SampleRecord& record = manifest.records.emplace_back();
    parser.Parse(text, readable_after, number, record);
    if (!record.status.ok()) ++manifest.bad_lines;
    return true;
  };

  if (layout == ManifestLayout::kArray) {
    // Counted first (the scan is cheap next to parsing), so that the records are
    // allocated once.
    int64_t elements = 0;
    HR_RETURN_IF_ERROR(ForEachManifestElement(bytes, manifest_path,
                                              [&](std::string_view, int64_t, size_t) {
                                                ++elements;
                                                return true;
                                              })
                           .status());
    manifest.records.reserve(static_cast<size_t>(elements));
    HR_RETURN_IF_ERROR(ForEachManifestElement(bytes, manifest_path, parse).status());
    if (manifest.records.empty()) {
      return Status::InvalidArgument("manifest " + QuoteForMessage(manifest_path) +
                                     " has no records (an empty JSON array)");
    }
    return manifest;
  }
  // Reserving for every line (blank ones too) saves regrowing a million records.
  manifest.records.reserve(static_cast<size_t>(std::count(bytes.begin(), bytes.end(), '\n')) + 1);
  const int64_t line_number = ForEachManifestLine(bytes, parse);
  if (manifest.records.empty()) {
    return Status::InvalidArgument("manifest " + QuoteForMessage(manifest_path) +
                                   " has no records (" + std::to_string(line_number) +
                                   " lines, all blank)");
  }
  return manifest;
}

namespace {

// What glibc's malloc takes for a request of `n` bytes.
size_t HeapBlockBytes(size_t n) {
  return n == 0 ? 0 : std::max<size_t>(32, (n + 8 + 15) / 16 * 16);
}

// The heap block behind a string; none when its characters live inside the object.
size_t StringHeapBytes(const std::string& s) {
  const auto* self = reinterpret_cast<const char*>(&s);
  const bool in_object = s.data() >= self && s.data() < self + sizeof(s);
  return in_object ? 0 : HeapBlockBytes(s.capacity() + 1);
}

}  // namespace

size_t ManifestMemoryBytes(const Manifest& manifest) {
  size_t bytes = sizeof(Manifest) + StringHeapBytes(manifest.path) +
                 StringHeapBytes(manifest.root) +
                 HeapBlockBytes(manifest.records.capacity() * sizeof(SampleRecord));
  for (const SampleRecord& r : manifest.records) {
    bytes += StringHeapBytes(r.id) + HeapBlockBytes(r.media.capacity() * sizeof(MediaRef)) +
             HeapBlockBytes(r.turns.capacity() * sizeof(Turn));
    for (const MediaRef& m : r.media) bytes += StringHeapBytes(m.uri);
    bytes += HeapBlockBytes(r.attributes.capacity() * sizeof(Attribute));
    for (const Attribute& a : r.attributes) {
      if (const auto* text = std::get_if<std::string>(&a.value)) bytes += StringHeapBytes(*text);
    }
    for (const Turn& turn : r.turns) bytes += StringHeapBytes(turn.text);
    if (!r.status.ok()) {
      // The status's shared state (control block, code, message object) and message.
      const size_t message = r.status.message().size();
      bytes += HeapBlockBytes(16 + 8 + sizeof(std::string)) +
               (message > 15 ? HeapBlockBytes(message + 1) : 0);
    }
  }
  return bytes;
}

Result<Manifest> LoadManifest(Storage& storage, const SourceSpec& spec) {
  if (spec.manifest.empty()) return Status::InvalidArgument("source.manifest is empty");
  Result<Buffer> bytes = storage.Read(spec.manifest);
  if (!bytes.ok()) return bytes.status().WithContext("reading manifest");
  return ParseManifest(*bytes, spec.manifest, spec);
}

}  // namespace headrace
