#include "headrace/formats/shard_set.h"

#include <glob.h>
#include <simdjson.h>

#include <algorithm>
#include <numeric>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

#include "headrace/core/strings.h"
#include "headrace/formats/conversation_json.h"
#include "headrace/formats/manifest.h"
#include "headrace/io/uri.h"

namespace headrace {
namespace {

constexpr size_t kMaxShardNames = 10'000'000;

FieldKind KindOfName(std::string_view name) {
  if (name == "image") return FieldKind::kImage;
  if (name == "video") return FieldKind::kVideo;
  if (name == "audio") return FieldKind::kAudio;
  if (name == "pointcloud") return FieldKind::kPointCloud;
  if (name == "text") return FieldKind::kText;
  if (name == "conversation") return FieldKind::kConversation;
  return FieldKind::kBytes;
}

std::vector<std::string_view> SplitOn(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    const size_t at = text.find(sep);
    const std::string_view part = text.substr(0, at);
    if (!part.empty()) out.push_back(part);
    if (at == std::string_view::npos) break;
    text.remove_prefix(at + 1);
  }
  return out;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A part of a shard pattern: literal text (one item), a list group's items, or a range.
struct PatternPart {
  std::vector<std::string> items;  // literal text or a list; empty for a range
  long long first = 0;             // a range: first, size, the first bound's width
  uint64_t range_size = 0;
  int width = 0;

  uint64_t size() const { return items.empty() ? range_size : items.size(); }
  void AppendItem(uint64_t i, std::string& out) const {
    if (!items.empty()) {
      out += items[i];
      return;
    }
    char digits[32];
    std::snprintf(digits, sizeof digits, "%0*lld", width, first + static_cast<long long>(i));
    out += digits;
  }
};

// Brace groups expand left to right, the leftmost slowest. The pattern is cut into its
// parts and the names counted as the product of the parts' sizes before any name is
// made: expanding first and counting after took {0..99999}{0..99999} to 2.6 GiB and 4 s
// before the refusal. Groups do not nest.
Result<std::vector<std::string>> ExpandBraces(std::string_view pattern) {
  std::vector<PatternPart> parts;
  uint64_t names = 1;
  size_t at = 0;
  while (true) {
    const size_t open = pattern.find('{', at);
    const std::string_view literal = pattern.substr(at, open == std::string_view::npos
                                                            ? std::string_view::npos
                                                            : open - at);
    if (literal.find('}') != std::string_view::npos) {
      return Status::InvalidArgument("source.shards: a '}' without its '{' in " +
                                     QuoteForMessage(pattern));
    }
    parts.push_back(PatternPart{.items = {std::string(literal)}});
    if (open == std::string_view::npos) break;
    const size_t close = pattern.find('}', open);
    if (close == std::string_view::npos) {
      return Status::InvalidArgument("source.shards: a '{' without its '}' in " +
                                     QuoteForMessage(pattern));
    }
    const std::string_view body = pattern.substr(open + 1, close - open - 1);
    if (body.find('{') != std::string_view::npos) {
      return Status::InvalidArgument("source.shards: a '{' inside the brace group {" +
                                     std::string(body) + "} in " + QuoteForMessage(pattern) +
                                     " (groups do not nest; write them one after another)");
    }
    at = close + 1;
    PatternPart& part = parts.emplace_back();
    if (const size_t dots = body.find(".."); dots != std::string_view::npos) {
      const std::string_view a = body.substr(0, dots);
      const std::string_view b = body.substr(dots + 2);
      if (!AllDigits(a) || !AllDigits(b) || a.size() > 18 || b.size() > 18) {
        return Status::InvalidArgument("source.shards: brace range {" + std::string(body) +
                                       "} in " + QuoteForMessage(pattern) +
                                       " must be {FIRST..LAST} with decimal numbers");
      }
      part.first = std::stoll(std::string(a));
      const long long last = std::stoll(std::string(b));
      if (last < part.first) {
        return Status::InvalidArgument("source.shards: brace range {" + std::string(body) +
                                       "} in " + QuoteForMessage(pattern) + " runs backwards");
      }
      part.range_size = static_cast<uint64_t>(last - part.first) + 1;
      part.width = static_cast<int>(a.size());
    } else {
      for (std::string_view item : SplitOn(body, ',')) part.items.emplace_back(item);
      if (part.items.empty()) {
        return Status::InvalidArgument("source.shards: an empty brace group in " +
                                       QuoteForMessage(pattern));
      }
    }
    if (part.size() > kMaxShardNames / names) {
      return Status::InvalidArgument("source.shards: " + QuoteForMessage(pattern) +
                                     " names more than 10,000,000 shards (the most a source "
                                     "may have; counted before expanding)");
    }
    names *= part.size();
  }
  // An odometer over the parts, the last one turning fastest.
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(names));
  std::vector<uint64_t> digit(parts.size(), 0);
  for (uint64_t n = 0; n < names; ++n) {
    std::string& name = out.emplace_back();
    for (size_t p = 0; p < parts.size(); ++p) parts[p].AppendItem(digit[p], name);
    for (size_t p = parts.size(); p-- > 0;) {
      if (++digit[p] < parts[p].size()) break;
      digit[p] = 0;
    }
  }
  return out;
}

std::string IndexUri(const std::string& shard) { return shard + ".idx.json"; }

}  // namespace

int ShardFieldMap::FieldOf(std::string_view extension) const {
  for (size_t f = 0; f < extensions.size(); ++f) {
    if (fields[f].max_items > 0) continue;
    for (const std::string& e : extensions[f]) {
      if (e == extension) return static_cast<int>(f);
    }
  }
  return -1;
}

ShardFieldMap::Item ShardFieldMap::ItemOf(std::string_view extension) const {
  if (const int field = FieldOf(extension); field >= 0) return Item{field, -1};
  const size_t dot = extension.find('.');
  if (dot == std::string_view::npos || dot > 9) return Item{};  // at most 9 digits
  const std::string_view number = extension.substr(0, dot);
  const std::string_view rest = extension.substr(dot + 1);
  if (!AllDigits(number)) return Item{};
  for (size_t f = 0; f < extensions.size(); ++f) {
    if (fields[f].max_items == 0) continue;
    for (const std::string& e : extensions[f]) {
      if (e == rest) return Item{static_cast<int>(f), std::stoll(std::string(number))};
    }
  }
  return Item{};
}

Result<ShardFieldMap> ShardFieldsOf(const SourceSpec& spec) {
  if (spec.fields.empty()) return ParseShardFields(spec.shard_fields);
  if (spec.shard_fields != SourceSpec().shard_fields) {
    return Status::InvalidArgument(
        "source.shard_fields: source.fields and source.shard_fields are exclusive (both "
        "say which members feed which field): give one; in source.fields a field's key is "
        "its extension list, e.g. {name: image, kind: image, key: \"jpg,png\"}");
  }
  ShardFieldMap map;
  const std::vector<SourceFieldSpec> fields = ResolvedFields(spec);
  for (size_t i = 0; i < fields.size(); ++i) {
    const SourceFieldSpec& f = fields[i];
    const std::string where = "source.fields[" + std::to_string(i) + "] (" + f.name + ")";
    const std::vector<std::string_view> exts = SplitOn(f.key, ',');
    if (exts.empty()) {
      return Status::InvalidArgument(where + ".key: no member extension in " +
                                     QuoteForMessage(f.key));
    }
    map.fields.push_back(SourceField{f.name, f.kind, f.max_items});
    map.required.push_back(f.required);
    map.extensions.emplace_back();
    if (f.kind == FieldKind::kConversation) map.conversation = static_cast<int>(i);
    for (std::string_view e : exts) {
      for (size_t other = 0; other < i; ++other) {
        if ((fields[other].max_items > 0) != (f.max_items > 0)) continue;
        for (const std::string& taken : map.extensions[other]) {
          if (taken == e) {
            return Status::InvalidArgument(where + ".key: extension '" + std::string(e) +
                                           "' also feeds field '" + fields[other].name + "'");
          }
        }
      }
      map.extensions.back().emplace_back(e);
    }
  }
  return map;
}

Result<ShardFieldMap> ParseShardFields(std::string_view text) {
  ShardFieldMap map;
  map.fields = {SourceField{"image", FieldKind::kImage, 0},
                SourceField{"conversation", FieldKind::kConversation, 0}};
  map.extensions.resize(2);
  map.required = {false, false};
  map.conversation = kConversationField;
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("source.shard_fields: " + why + " in " + QuoteForMessage(text) +
                                   " (want NAME[?]=EXT[,EXT...] separated by spaces, e.g. "
                                   "\"image?=jpg,png conversation=json\")");
  };
  for (std::string_view entry : SplitOn(text, ' ')) {
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) return bad("an entry without NAME=");
    std::string_view name = entry.substr(0, eq);
    const bool optional = name.back() == '?';
    if (optional) name.remove_suffix(1);
    if (name.empty()) return bad("an empty field name");
    if (name == "index") return bad("'index' is the engine's own field");
    const std::vector<std::string_view> exts = SplitOn(entry.substr(eq + 1), ',');
    if (exts.empty()) return bad("field '" + std::string(name) + "' has no extension");
    int field = -1;
    for (size_t f = 0; f < map.fields.size(); ++f) {
      if (map.fields[f].name == name) field = static_cast<int>(f);
    }
    if (field >= 2 || (field >= 0 && !map.extensions[field].empty())) {
      return bad("field '" + std::string(name) + "' appears twice");
    }
    if (field < 0) {
      field = static_cast<int>(map.fields.size());
      map.fields.push_back(SourceField{std::string(name), KindOfName(name), 0});
      map.extensions.emplace_back();
      map.required.push_back(false);
    }
    for (std::string_view e : exts) {
      if (map.FieldOf(e) >= 0) return bad("extension '" + std::string(e) + "' feeds two fields");
      map.extensions[field].emplace_back(e);
    }
    map.required[field] = !optional;
  }
  return map;
}

Result<std::vector<std::string>> ExpandShardPattern(std::string_view pattern) {
  if (pattern.empty()) return Status::InvalidArgument("source.shards is empty");
  HR_ASSIGN_OR_RETURN(std::vector<std::string> names, ExpandBraces(pattern));
  std::vector<std::string> out;
  for (std::string& name : names) {
    if (name.find_first_of("*?[") == std::string::npos) {
      out.push_back(std::move(name));
      continue;
    }
    if (SchemeOf(name) != UriScheme::kLocal || name.rfind("file://", 0) == 0) {
      return Status::InvalidArgument(
          "source.shards: " + QuoteForMessage(name) +
          ": globs ('*', '?', '[') match local files only (object stores are not listed "
          "here); name the shards with a brace range, e.g. shard-{000000..000999}.tar");
    }
    glob_t g{};
    const int rc = ::glob(name.c_str(), 0, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);  // sorted
    }
    ::globfree(&g);
    if (rc == GLOB_NOMATCH) {
      return Status::NotFound("source.shards: no file matches " + QuoteForMessage(name));
    }
    if (rc != 0) return Status::IoError("source.shards: cannot list " + QuoteForMessage(name));
    if (out.size() > kMaxShardNames) {
      return Status::InvalidArgument("source.shards: more than 10,000,000 shards");
    }
  }
  return out;
}

namespace {

// The record's MediaRefs from a sample's members: fields in the source's order, a list's
// items in their number's order, whatever the members' order in the tar.
Status FillShardRecord(const std::string& shard_uri, const TarSample& s, const ShardFieldMap& map,
                       SampleRecord& record) {
  struct Member {
    int64_t item = -1;
    const TarField* field = nullptr;
  };
  std::vector<std::vector<Member>> by_field(map.fields.size());
  for (const TarField& f : s.fields) {
    const ShardFieldMap::Item at = map.ItemOf(f.name);
    if (at.field < 0) continue;  // a member no field asks for
    std::vector<Member>& members = by_field[static_cast<size_t>(at.field)];
    if (at.item < 0 && !members.empty()) {
      return Status::BadRecord("sample '" + s.key + "': members '" + members[0].field->name +
                               "' and '" + f.name + "' both feed field '" +
                               map.fields[at.field].name + "'");
    }
    members.push_back(Member{at.item, &f});
  }
  for (size_t field = 0; field < by_field.size(); ++field) {
    std::vector<Member>& members = by_field[field];
    const SourceField& info = map.fields[field];
    if (members.empty()) {
      if (map.required[field]) {
        std::string exts;
        for (const std::string& e : map.extensions[field]) {
          exts += (exts.empty() ? "." : "/.") + std::string(info.max_items > 0 ? "N." : "") + e;
        }
        return Status::MissingField("sample '" + s.key + "' has no " + exts +
                                    " member (field '" + info.name + "' is required)");
      }
      continue;
    }
    if (info.max_items > 0) {
      std::stable_sort(members.begin(), members.end(),
                       [](const Member& a, const Member& b) { return a.item < b.item; });
      for (size_t i = 1; i < members.size(); ++i) {
        if (members[i].item == members[i - 1].item) {
          return Status::BadRecord("sample '" + s.key + "': members '" +
                                   members[i - 1].field->name + "' and '" +
                                   members[i].field->name + "' are both item " +
                                   std::to_string(members[i].item) + " of field '" + info.name +
                                   "'");
        }
      }
      if (members.size() > static_cast<size_t>(info.max_items)) {
        return Status::BadRecord("sample '" + s.key + "': field '" + info.name + "' has " +
                                 std::to_string(members.size()) +
                                 " items, more than its max_items " +
                                 std::to_string(info.max_items));
      }
    }
    for (const Member& m : members) {
      record.media.push_back(
          MediaRef{static_cast<int>(field), shard_uri, m.field->offset, m.field->size});
    }
  }
  return Status::Ok();
}

}  // namespace

void AppendShardRecords(const std::string& shard_uri, std::span<const TarSample> samples,
                        const ShardFieldMap& map, ShardSet& out) {
  for (const TarSample& s : samples) {
    SampleRecord& record = out.records.emplace_back();
    record.id = s.key;
    record.location = shard_uri + "#" + s.key;
    record.line = static_cast<int64_t>(out.records.size());
    record.status = s.status;
    if (record.status.ok()) record.status = FillShardRecord(shard_uri, s, map, record);
    if (!record.status.ok()) {
      // The record's location (its uri() in messages) names the shard and key already.
      record.media.clear();
      ++out.bad_samples;
    }
  }
}

std::vector<Result<Buffer>> ReadConcurrently(
    size_t n, size_t window, const std::function<void(size_t, ReadCallback)>& start) {
  std::vector<Result<Buffer>> out(n, Status::Internal("not read"));
  std::mutex mu;
  std::condition_variable cv;
  size_t issued = 0;
  size_t finished = 0;
  std::unique_lock lock(mu);
  while (finished < n) {
    while (issued < n && issued - finished < window) {
      const size_t i = issued++;
      lock.unlock();
      start(i, [&, i](Result<Buffer> bytes) {
        std::lock_guard inner(mu);
        out[i] = std::move(bytes);
        ++finished;
        cv.notify_all();
      });
      lock.lock();
    }
    // Until a read completes that lets another start (or the last one completes).
    cv.wait(lock, [&] { return finished == n || (issued < n && issued - finished < window); });
  }
  return out;
}

namespace {

// The records of one shard read whole and listed (it has no index). Damage keeps the
// samples before it: the sample the damaged member belongs to is the bad one (the last
// listed when the member is its, else a record of its own), never a complete sample
// before it.
std::vector<TarSample> ScanShard(const Buffer& tar, Status& shard_error) {
  const TarListing listing = ListTarMembers(std::span<const uint8_t>(tar.data(), tar.size()));
  const std::vector<std::string> required;  // checked per field, in AppendShardRecords
  std::vector<TarSample> samples = GroupSamples(listing.members, required);
  if (listing.status.ok()) return samples;
  if (listing.members.empty() && listing.status.code() != StatusCode::kCorruptData) {
    shard_error = listing.status;  // not a tar at all: nothing in it is a sample
    return {};
  }
  const std::string key = TarSampleKey(listing.damaged_member);
  if (!samples.empty() && !listing.damaged_member.empty() && samples.back().key == key) {
    samples.back().status = listing.status;  // its members may be cut off
  } else {
    TarSample& damaged = samples.emplace_back();
    damaged.key = !key.empty() ? key
                               : "(damaged at offset " + std::to_string(listing.damaged_offset) + ")";
    damaged.status = listing.status;
  }
  return samples;
}

// A shard's samples from its index, checked against the shard's size.
Result<std::vector<TarSample>> IndexedSamples(const Buffer& bytes, int64_t shard_bytes) {
  HR_ASSIGN_OR_RETURN(
      ShardIndex index,
      ParseShardIndex(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                      shard_bytes));
  std::vector<TarSample> samples;
  samples.reserve(index.samples.size());
  std::set<std::string_view> keys;
  for (ShardIndex::Sample& s : index.samples) {
    TarSample& t = samples.emplace_back();
    t.key = std::move(s.key);
    t.fields = std::move(s.fields);
  }
  for (TarSample& t : samples) {
    if (!keys.insert(t.key).second) {
      t.status = Status::BadRecord("sample '" + t.key + "' appears twice in the index");
    }
  }
  return samples;
}

// Opens every shard: first each tar's size (a gated read refused at the size; the
// shard's existence too), then every index at once (they are small, and each is refused
// before it is read when it is larger than its shard can need), then the shards without
// one, read whole, one at a time. A shard that cannot be read is skipped whole
// (out.bad_shards); a missing one fails the load (a pattern naming shards that are not
// there is a configuration error).
Status LoadShards(Storage& storage, const std::vector<std::string>& shards,
                  const ShardFieldMap& map, ShardSet& out, ShardRecords* compact) {
  const size_t n = shards.size();
  // At most 256 reads in flight: an object store's connections, not a million.
  constexpr size_t kWindow = 256;
  std::vector<int64_t> sizes(n, -1);
  std::vector<Result<Buffer>> probes = ReadConcurrently(n, kWindow, [&](size_t i, ReadCallback done) {
    storage.ReadAsyncGated(shards[i], std::move(done), [&sizes, i](int64_t bytes) {
      if (bytes == kReadStillWanted) return true;
      sizes[i] = bytes;
      return false;  // the size is all this read is for
    });
  });
  std::vector<Status> shard_errors(n);
  for (size_t i = 0; i < n; ++i) {
    if (probes[i].ok()) {
      sizes[i] = static_cast<int64_t>(probes[i]->size());  // a storage that ignores gates
    } else if (probes[i].status().code() == StatusCode::kNotFound) {
      return Status::NotFound("source.shards: shard " + QuoteForMessage(shards[i]) +
                              " does not exist");
    } else if (sizes[i] < 0) {
      shard_errors[i] = probes[i].status().WithContext("reading the shard");
    }
    probes[i] = Status::Cancelled("probed");
  }
  std::vector<int64_t> refused(n, -1);  // an index's size, when it was too large to read
  std::vector<Result<Buffer>> indexes = ReadConcurrently(n, kWindow, [&](size_t i, ReadCallback done) {
    if (!shard_errors[i].ok()) {
      done(Status::Cancelled("the shard is unreadable"));
      return;
    }
    storage.ReadAsyncGated(IndexUri(shards[i]), std::move(done),
                           [&refused, i, limit = MaxShardIndexBytes(sizes[i])](int64_t bytes) {
                             if (bytes <= limit) return true;
                             refused[i] = bytes;
                             return false;
                           });
  });
  for (size_t i = 0; i < n; ++i) {
    const std::string& shard = shards[i];
    const size_t before = out.records.size();
    Status shard_error = shard_errors[i];
    int64_t shard_bytes = sizes[i];
    if (!shard_error.ok()) {
      // Unreadable already.
    } else if (indexes[i].ok()) {
      Result<std::vector<TarSample>> samples = IndexedSamples(*indexes[i], sizes[i]);
      indexes[i] = Status::Cancelled("parsed");  // its bytes go now, not after every shard
      if (samples.ok()) {
        AppendShardRecords(shard, *samples, map, out);
        ++out.indexed_shards;
      } else {
        shard_error = samples.status().WithContext(QuoteForMessage(IndexUri(shard)));
      }
    } else if (refused[i] >= 0) {
      shard_error = Status::BadRecord(
          QuoteForMessage(IndexUri(shard)) + ": the index is " + std::to_string(refused[i]) +
          " bytes, more than the index of a shard of " + std::to_string(sizes[i]) +
          " bytes can need (" + std::to_string(MaxShardIndexBytes(sizes[i])) + ")");
    } else if (indexes[i].status().code() == StatusCode::kNotFound) {
      Result<Buffer> tar = storage.Read(shard);
      if (!tar.ok()) {
        shard_error = tar.status().WithContext("reading the shard");
      } else {
        shard_bytes = static_cast<int64_t>(tar->size());
        const std::vector<TarSample> samples = ScanShard(*tar, shard_error);
        if (shard_error.ok()) {
          AppendShardRecords(shard, samples, map, out);
          ++out.scanned_shards;
        }
      }
    } else {
      shard_error =
          indexes[i].status().WithContext("reading " + QuoteForMessage(IndexUri(shard)));
    }
    if (!shard_error.ok()) {
      out.bad_shards.push_back(BadShard{
          static_cast<int64_t>(i), shard,
          Status::ShardError("shard " + std::to_string(i) + " " + QuoteForMessage(shard) +
                             " skipped: " + shard_error.ToString())});
    }
    out.shard_bytes.push_back(std::max<int64_t>(shard_bytes, 0));
    out.shard_samples.push_back(static_cast<int64_t>(out.records.size() - before));
    if (compact != nullptr) {  // each shard's records compacted as soon as they are made
      compact->AppendShard(shard, out.records);
      out.records.clear();
    }
  }
  if (compact != nullptr) {
    compact->ShrinkToFit();
    std::vector<SampleRecord>().swap(out.records);  // the largest shard's capacity
  }
  return Status::Ok();
}

}  // namespace

Result<ShardSet> LoadShardSet(Storage& storage, const SourceSpec& spec,
                                    ShardRecords* compact) {
  HR_ASSIGN_OR_RETURN(const ShardFieldMap map, ShardFieldsOf(spec));
  ShardSet out;
  out.map = map;
  HR_ASSIGN_OR_RETURN(out.shards, ExpandShardPattern(spec.shards));
  out.fields = map.fields;
  HR_RETURN_IF_ERROR(LoadShards(storage, out.shards, map, out, compact));
  if (std::accumulate(out.shard_samples.begin(), out.shard_samples.end(), int64_t{0}) == 0) {
    std::string why;
    if (!out.bad_shards.empty()) {
      why = " (" + std::to_string(out.bad_shards.size()) +
            " unreadable; the first: " + out.bad_shards.front().status.message() + ")";
    }
    return Status::InvalidArgument("source.shards: the " + std::to_string(out.shards.size()) +
                                   " shards of " + QuoteForMessage(spec.shards) +
                                   " hold no samples" + why);
  }
  return out;
}

Result<std::vector<Turn>> ParseConversationJson(std::span<const uint8_t> json,
                                                const SourceSpec& spec) {
  // One parser per thread: it keeps its buffers from one sample to the next.
  thread_local simdjson::dom::parser parser;
  const simdjson::padded_string padded(reinterpret_cast<const char*>(json.data()), json.size());
  simdjson::dom::object obj;
  if (const auto error = parser.parse(padded).get(obj); error != simdjson::SUCCESS) {
    return Status::BadRecord(std::string("conversation member: not a JSON object (") +
                             simdjson::error_message(error) + ")");
  }
  simdjson::dom::element conv;
  if (obj.at_key(spec.conversations_field).get(conv) != simdjson::SUCCESS) {
    return Status::MissingField("conversation member: no array '" + spec.conversations_field +
                                "'");
  }
  std::vector<Turn> turns;
  HR_RETURN_IF_ERROR(AppendTurns(conv, spec, spec.conversations_field, "conversation member: ",
                                 turns));
  return turns;
}

namespace {

// A text or scalar member's value: its bytes as text; a number with the ASCII
// whitespace around it (a `.cls` member is "3\n") trimmed.
Result<Attribute> ParseMemberValue(const Buffer& bytes, int field, const SourceField& info) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (info.kind == FieldKind::kText || info.kind == FieldKind::kString) {
    return Attribute{field, std::string(text)};
  }
  const size_t begin = text.find_first_not_of(" \t\r\n");
  const size_t end = text.find_last_not_of(" \t\r\n");
  const std::string_view number =
      begin == std::string_view::npos ? std::string_view() : text.substr(begin, end - begin + 1);
  const auto bad = [&](const char* what) {
    return Status::BadRecord("field '" + info.name + "': member is not " + what + ": " +
                             QuoteForMessage(text.substr(0, 64)));
  };
  if (info.kind == FieldKind::kInt) {
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
    if (number.empty() || ec != std::errc() || ptr != number.data() + number.size()) {
      return bad("an integer");
    }
    return Attribute{field, v};
  }
  double v = 0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  if (number.empty() || ec != std::errc() || ptr != number.data() + number.size()) {
    return bad("a number");
  }
  return Attribute{field, v};
}

}  // namespace

Status PrepareShardSample(Sample& sample, const SourceSpec& spec, const ShardFieldMap& map) {
  sample.parsed.attributes.clear();
  sample.parsed.turns.clear();
  sample.attributes = {};
  sample.turns = {};
  Status status;
  for (size_t f = 0; f < map.fields.size() && status.ok(); ++f) {
    const SourceField& info = map.fields[f];
    if (info.kind != FieldKind::kText && info.kind != FieldKind::kString &&
        info.kind != FieldKind::kInt && info.kind != FieldKind::kFloat) {
      continue;
    }
    sample.ForEachMedia(static_cast<int>(f), [&](const Buffer& bytes, std::string_view) {
      if (!status.ok()) return;
      Result<Attribute> value = ParseMemberValue(bytes, static_cast<int>(f), info);
      if (!value.ok()) {
        status = value.status();
        return;
      }
      sample.parsed.attributes.push_back(*std::move(value));
    });
  }
  if (!status.ok()) return status;  // the sample's error names its location
  sample.attributes = sample.parsed.attributes;
  if (map.conversation < 0) return Status::Ok();
  const Buffer* json = sample.MediaOf(map.conversation);
  if (json == nullptr) return Status::Ok();
  Result<std::vector<Turn>> turns =
      ParseConversationJson(std::span<const uint8_t>(json->data(), json->size()), spec);
  if (!turns.ok()) return turns.status();
  sample.parsed.turns = std::move(turns).value();
  sample.turns = sample.parsed.turns;
  return Status::Ok();
}

size_t RecordHeapBytes(const SampleRecord& r) {
  size_t bytes = r.id.capacity() + r.location.capacity() + r.media.capacity() * sizeof(MediaRef);
  for (const MediaRef& m : r.media) bytes += m.uri.capacity();
  if (!r.status.ok()) bytes += 64 + r.status.message().size();
  return bytes;
}

size_t RecordsHeapBytes(const std::vector<SampleRecord>& records) {
  size_t bytes = 0;
  for (const SampleRecord& r : records) bytes += RecordHeapBytes(r);
  return bytes;
}

size_t ShardSetMemoryBytes(const ShardSet& source) {
  size_t bytes = sizeof(ShardSet) + source.records.capacity() * sizeof(SampleRecord);
  for (const std::string& s : source.shards) bytes += s.capacity() + 1;
  return bytes + RecordsHeapBytes(source.records);
}

}  // namespace headrace
