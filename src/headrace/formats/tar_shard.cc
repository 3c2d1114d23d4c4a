#include "headrace/formats/tar_shard.h"

#include <archive.h>
#include <archive_entry.h>
#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "headrace/core/json_writer.h"
#include "headrace/core/strings.h"

namespace headrace {
namespace {

struct ArchiveReadDeleter {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchiveReader = std::unique_ptr<archive, ArchiveReadDeleter>;

std::string ArchiveError(archive* a) {
  const char* message = archive_error_string(a);
  return message != nullptr ? message : "unknown libarchive error";
}

std::string Where(std::string_view name, int64_t header_offset) {
  std::string where = "member '";
  where.append(name).append("' (header at offset ").append(std::to_string(header_offset));
  return where.append(")");
}

// The name a damaged ustar header at `offset` still holds (prefix "/" name), when both
// fields are NUL-terminated printable text; else "". Only for naming the damage: a
// header that fails its checksum may still say whose member it was.
std::string RawHeaderName(std::span<const uint8_t> bytes, int64_t offset) {
  if (offset < 0 || static_cast<uint64_t>(offset) + 512 > bytes.size()) return "";
  const auto* header = reinterpret_cast<const char*>(bytes.data() + offset);
  const auto field = [&](size_t at, size_t size) -> std::optional<std::string> {
    const std::string_view raw(header + at, size);
    const std::string_view text = raw.substr(0, raw.find('\0'));
    for (const char c : text) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return std::nullopt;
    }
    return std::string(text);
  };
  const std::optional<std::string> name = field(0, 100);
  if (!name || name->empty()) return "";
  if (std::memcmp(header + 257, "ustar", 5) == 0) {
    const std::optional<std::string> prefix = field(345, 155);
    if (!prefix) return "";
    if (!prefix->empty()) return *prefix + "/" + *name;
  }
  return *name;
}

}  // namespace

TarListing ListTarMembers(std::span<const uint8_t> bytes) {
  TarListing listing;
  ArchiveReader reader(archive_read_new());
  if (reader == nullptr) {
    listing.status = Status::Internal("archive_read_new failed");
    return listing;
  }
  archive* a = reader.get();
  // Only uncompressed tar: offsets into a compressed stream would not be byte ranges of
  // the shard. No filter is enabled, so a .tar.gz is "not a tar archive".
  archive_read_support_format_tar(a);
  // libarchive's memory reader takes a non-const pointer but only reads through it.
  if (archive_read_open_memory(a, const_cast<uint8_t*>(bytes.data()), bytes.size()) != ARCHIVE_OK) {
    listing.status = Status::UnsupportedFormat("not a tar archive: " + ArchiveError(a));
    return listing;
  }
  const int64_t total = static_cast<int64_t>(bytes.size());
  // Where the next header should start: after the previous entry's data, padded to a
  // 512-byte block. For messages only; libarchive does the reading.
  int64_t next_header = 0;
  std::string previous_name;
  for (;;) {
    archive_entry* entry = nullptr;
    const int rc = archive_read_next_header(a, &entry);
    if (rc == ARCHIVE_EOF) break;
    // ARCHIVE_RETRY is a header that fails its checksum: the entry is not filled in, so
    // going on would list the previous member again (and fail the sample before it).
    if (rc == ARCHIVE_RETRY || rc < ARCHIVE_WARN) {
      const std::string message = ArchiveError(a);
      // A first header with ustar's magic is a damaged tar, anything else not one.
      const bool ustar_magic =
          bytes.size() >= 262 && std::memcmp(bytes.data() + 257, "ustar", 5) == 0;
      if (previous_name.empty() && !ustar_magic) {
        listing.status = Status::UnsupportedFormat("not a tar archive: " + message);
        return listing;
      }
      listing.damaged_member = RawHeaderName(bytes, next_header);
      listing.damaged_offset = next_header;
      const std::string named =
          listing.damaged_member.empty() ? "" : " (member '" + listing.damaged_member + "')";
      if (previous_name.empty()) {
        listing.status =
            Status::CorruptData("the first tar header (offset 0)" + named + ": " + message);
      } else {
        listing.status = Status::CorruptData("the tar header at offset " +
                                             std::to_string(next_header) + named +
                                             ", after member '" + previous_name + "': " + message);
      }
      return listing;
    }
    const int64_t header_offset = archive_read_header_position(a);
    const int64_t data_offset = archive_filter_bytes(a, 0);
    // Clamped: a pax header may declare any size up to INT64_MAX.
    const int64_t padded =
        (std::clamp<int64_t>(archive_entry_size(entry), 0, total) + 511) / 512 * 512;
    next_header = data_offset + padded;
    const char* raw_name = archive_entry_pathname(entry);
    const std::string name = raw_name != nullptr ? raw_name : "";
    previous_name = name.empty() ? "(no name)" : name;
    if (archive_entry_filetype(entry) != AE_IFREG || archive_entry_hardlink(entry) != nullptr) {
      continue;  // archive_read_next_header skips the data of the previous entry
    }
    if (name.empty()) {
      listing.damaged_offset = header_offset;
      listing.status =
          Status::CorruptData("a file member without a name: " + Where(name, header_offset));
      return listing;
    }
    if (archive_entry_sparse_count(entry) > 0) {
      listing.damaged_member = name;
      listing.damaged_offset = header_offset;
      listing.status = Status::UnsupportedFormat(
          "sparse member (its data is not one byte range): " + Where(name, header_offset));
      return listing;
    }
    // After the headers, everything up to the data has been consumed from the input.
    TarMember member{name, data_offset, archive_entry_size(entry)};
    if (member.size < 0 || member.offset > total || member.size > total - member.offset) {
      listing.damaged_member = name;
      listing.damaged_offset = header_offset;
      listing.status = Status::CorruptData("truncated archive: " + Where(name, header_offset) +
                                           " needs " + std::to_string(member.size) +
                                           " bytes at offset " + std::to_string(member.offset) +
                                           ", the archive has " + std::to_string(total));
      return listing;
    }
    listing.members.push_back(std::move(member));
  }
  return listing;
}

std::string TarSampleKey(std::string_view member_name) {
  const size_t slash = member_name.rfind('/');
  const size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  return std::string(member_name.substr(0, member_name.find('.', base)));
}

std::vector<TarSample> GroupSamples(std::span<const TarMember> members,
                                    std::span<const std::string> required_fields) {
  std::vector<TarSample> samples;
  std::set<std::string> seen_keys;  // keys of samples before the current one
  for (const TarMember& m : members) {
    const size_t slash = m.name.rfind('/');
    const size_t base = slash == std::string::npos ? 0 : slash + 1;
    const size_t dot = m.name.find('.', base);
    const std::string key = m.name.substr(0, dot);
    const std::string field = dot == std::string::npos ? "" : m.name.substr(dot + 1);
    if (samples.empty() || samples.back().key != key) {
      if (!samples.empty()) seen_keys.insert(samples.back().key);
      TarSample& s = samples.emplace_back();
      s.key = key;
      if (seen_keys.contains(key)) {
        s.status = Status::BadRecord("sample '" + key + "': member '" + m.name + "' at offset " +
                                     std::to_string(m.offset) +
                                     " repeats a key seen earlier, not next to its members");
      }
    }
    TarSample& s = samples.back();
    // Keys and field names go to the shard index (JSON) and to Python as text: a name
    // that is not UTF-8 (tar names are bytes) is the sample's error, as a malformed one.
    if (s.status.ok() && !simdjson::validate_utf8(m.name.data(), m.name.size())) {
      s.status = Status::BadRecord("sample at offset " + std::to_string(m.offset) +
                                   ": a member's name is not UTF-8");
    }
    if (s.status.ok() && (dot == base || field.empty())) {
      s.status =
          Status::BadRecord("sample '" + key + "': member '" + m.name + "' at offset " +
                            std::to_string(m.offset) + " has no key or no field (want KEY.FIELD)");
    }
    for (const TarField& f : s.fields) {
      if (s.status.ok() && f.name == field) {
        s.status = Status::BadRecord("sample '" + key + "': field '" + field +
                                     "' appears twice (member '" + m.name + "' at offset " +
                                     std::to_string(m.offset) + ")");
      }
    }
    s.fields.push_back({field, m.offset, m.size});
  }
  for (TarSample& s : samples) {
    // A key that is not UTF-8 (its sample failed above) names the sample in its error's
    // URI, the report and Python: its bytes are replaced as Python's "replace" does.
    if (std::string key; SanitizeUtf8(s.key, &key)) s.key = std::move(key);
    for (const std::string& required : required_fields) {
      bool found = false;
      for (const TarField& f : s.fields) found |= f.name == required;
      if (s.status.ok() && !found) {
        s.status =
            Status::MissingField("sample '" + s.key + "' has no '" + required +
                                 "' member (fields: " + std::to_string(s.fields.size()) + ")");
      }
    }
  }
  return samples;
}

Result<std::unique_ptr<TarWriter>> TarWriter::Open(const std::string& path) {
  archive* a = archive_write_new();
  if (a == nullptr) return Status::Internal("archive_write_new failed");
  // pax_restricted writes plain ustar unless a member needs more (a long name); it never
  // adds times, so the bytes depend only on the names and data.
  if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
      archive_write_open_filename(a, path.c_str()) != ARCHIVE_OK) {
    Status status = Status::IoError(path + ": cannot open for writing: " + ArchiveError(a));
    archive_write_free(a);
    return status;
  }
  return std::unique_ptr<TarWriter>(new TarWriter(a, path));
}

TarWriter::~TarWriter() {
  if (archive_ != nullptr) archive_write_free(archive_);
}

Status TarWriter::Add(const std::string& name, std::span<const uint8_t> data) {
  if (archive_ == nullptr) return Status::Internal(path_ + ": Add after Close");
  if (name.empty()) return Status::InvalidArgument(path_ + ": a tar member needs a name");
  std::unique_ptr<archive_entry, void (*)(archive_entry*)> entry(archive_entry_new(),
                                                                 archive_entry_free);
  archive_entry_set_pathname(entry.get(), name.c_str());
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  archive_entry_set_size(entry.get(), static_cast<int64_t>(data.size()));
  archive_entry_set_mtime(entry.get(), 0, 0);
  archive_entry_set_uid(entry.get(), 0);
  archive_entry_set_gid(entry.get(), 0);
  if (archive_write_header(archive_, entry.get()) != ARCHIVE_OK) {
    return Status::IoError(path_ + ": member '" + name + "': " + ArchiveError(archive_));
  }
  if (!data.empty() && archive_write_data(archive_, data.data(), data.size()) !=
                           static_cast<la_ssize_t>(data.size())) {
    return Status::IoError(path_ + ": member '" + name + "': " + ArchiveError(archive_));
  }
  return Status::Ok();
}

Result<int64_t> TarWriter::Close() {
  if (archive_ == nullptr) return Status::Internal(path_ + ": Close twice");
  const int rc = archive_write_close(archive_);
  const std::string error = rc == ARCHIVE_OK ? "" : ArchiveError(archive_);
  const int64_t bytes = archive_filter_bytes(archive_, -1);
  archive_write_free(archive_);
  archive_ = nullptr;
  if (rc != ARCHIVE_OK) return Status::IoError(path_ + ": " + error);
  return bytes;
}

ShardIndex MakeShardIndex(std::string shard, int64_t bytes, std::span<const TarSample> samples) {
  ShardIndex index;
  index.shard = std::move(shard);
  index.bytes = bytes;
  for (const TarSample& s : samples) {
    if (s.status.ok()) index.samples.push_back({s.key, s.fields});
  }
  return index;
}

std::string ShardIndexToJson(const ShardIndex& index) {
  JsonWriter w(/*pretty=*/false);
  w.BeginObject();
  w.Key("format").String("headrace.shard_index");
  w.Key("version").Int(1);
  w.Key("shard").String(index.shard);
  w.Key("bytes").Int(index.bytes);
  w.Key("samples").BeginArray();
  for (const ShardIndex::Sample& s : index.samples) {
    w.BeginObject();
    w.Key("key").String(s.key);
    w.Key("fields").BeginObject();
    for (const TarField& f : s.fields) {
      w.Key(f.name).BeginArray().Int(f.offset).Int(f.size).EndArray();
    }
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.str() + "\n";
}

int64_t MaxShardIndexBytes(int64_t shard_bytes) {
  constexpr int64_t kSlack = 64 * 1024;
  return shard_bytes > (std::numeric_limits<int64_t>::max() - kSlack) / 2
             ? std::numeric_limits<int64_t>::max()
             : 2 * shard_bytes + kSlack;
}

Result<ShardIndex> ParseShardIndex(std::string_view json, int64_t shard_bytes) {
  const auto bad = [](const std::string& why) { return Status::BadRecord("shard index: " + why); };
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(json);
  simdjson::dom::object root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS) return bad("not a JSON object");
  std::string_view format;
  int64_t version = 0;
  if (root["format"].get(format) != simdjson::SUCCESS || format != "headrace.shard_index") {
    return bad("format is not \"headrace.shard_index\"");
  }
  if (root["version"].get(version) != simdjson::SUCCESS || version != 1) {
    return bad("version is not 1");
  }
  ShardIndex index;
  std::string_view shard;
  if (root["shard"].get(shard) != simdjson::SUCCESS) return bad("no string 'shard'");
  index.shard = shard;
  if (root["bytes"].get(index.bytes) != simdjson::SUCCESS || index.bytes < 0) {
    return bad("no non-negative integer 'bytes'");
  }
  if (shard_bytes >= 0 && index.bytes != shard_bytes) {
    return bad("'bytes' is " + std::to_string(index.bytes) + " but the shard has " +
               std::to_string(shard_bytes) + " bytes (a stale or foreign index)");
  }
  // Where the next member's data may start at the earliest: after the previous one's
  // data (padded to its block) and one 512-byte header.
  int64_t next_data = 512;
  simdjson::dom::array samples;
  if (root["samples"].get(samples) != simdjson::SUCCESS) return bad("no array 'samples'");
  for (simdjson::dom::element element : samples) {
    const std::string where = "sample " + std::to_string(index.samples.size());
    simdjson::dom::object sample;
    std::string_view key;
    simdjson::dom::object fields;
    if (element.get(sample) != simdjson::SUCCESS || sample["key"].get(key) != simdjson::SUCCESS ||
        sample["fields"].get(fields) != simdjson::SUCCESS) {
      return bad(where + ": want {\"key\": string, \"fields\": object}");
    }
    if (shard_bytes >= 0 && fields.size() == 0) {
      return bad(where + " ('" + std::string(key) + "') has no fields (a sample is members)");
    }
    ShardIndex::Sample& out = index.samples.emplace_back();
    out.key = key;
    for (auto [name, range_element] : fields) {
      simdjson::dom::array range;
      TarField f{std::string(name), -1, -1};
      if (range_element.get(range) != simdjson::SUCCESS || range.size() != 2 ||
          range.at(0).get(f.offset) != simdjson::SUCCESS ||
          range.at(1).get(f.size) != simdjson::SUCCESS || f.offset < 0 || f.size < 0 ||
          f.offset > index.bytes || f.size > index.bytes - f.offset) {
        return bad(where + " ('" + out.key + "'), field '" + f.name +
                   "': want [offset, size] inside the shard's " + std::to_string(index.bytes) +
                   " bytes");
      }
      if (shard_bytes >= 0 && (f.offset % 512 != 0 || f.offset < next_data)) {
        return bad(where + " ('" + out.key + "'), field '" + f.name + "': offset " +
                   std::to_string(f.offset) +
                   " is not where a tar member's data can be (a 512-byte block at or after " +
                   std::to_string(next_data) + ", in archive order)");
      }
      next_data = f.offset + (f.size + 511) / 512 * 512 + 512;
      out.fields.push_back(std::move(f));
    }
  }
  // A tar of no members is its end-of-archive blocks, padded to one record at most
  // (GNU tar's 20 blocks): an index listing no sample for a larger shard would hide
  // every member in it, never read and never counted.
  constexpr int64_t kLargestEmptyTar = 20 * 512;
  if (shard_bytes > kLargestEmptyTar && index.samples.empty()) {
    return bad("lists no samples, but its shard holds " + std::to_string(shard_bytes) +
               " bytes (a tar of no members has at most " + std::to_string(kLargestEmptyTar) +
               ")");
  }
  return index;
}

}  // namespace headrace
