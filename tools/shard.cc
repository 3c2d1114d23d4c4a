#include "shard.h"

#include <cctype>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string_view>

#include "headrace/core/json_writer.h"
#include "headrace/core/strings.h"
#include "headrace/formats/manifest.h"
#include "headrace/formats/tar_shard.h"
#include "headrace/io/storage.h"

namespace headrace {
namespace {

namespace fs = std::filesystem;

// The manifest's lines as written, indexed by 1-based line number - 1, without the line
// end or a leading byte-order mark (what ParseManifest parsed).
// Each record's JSON text, by record index: the manifest's non-blank lines, or its
// array's elements (formats/manifest.h: the same walks ParseManifest makes).
Result<std::vector<std::string_view>> RecordTexts(const Buffer& bytes, const std::string& path) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::vector<std::string_view> out;
  const auto add = [&](std::string_view record, int64_t, size_t) {
    if (record.ends_with('\r')) record.remove_suffix(1);
    out.push_back(record);
    return true;
  };
  if (ManifestLayoutOf(text) == ManifestLayout::kArray) {
    HR_RETURN_IF_ERROR(ForEachManifestElement(text, path, add).status());
  } else {
    ForEachManifestLine(text, add);
  }
  return out;
}

// A record's place in the manifest, for messages: "line 12" or "element 11".
std::string Where(const SampleRecord& record, ManifestLayout layout) {
  return layout == ManifestLayout::kArray ? "element " + std::to_string(record.line - 1)
                                          : "line " + std::to_string(record.line);
}

// The media's extension, lowercased, without a dot: "jpg" for ".../000017.JPG"; "bin"
// when the name has none (a key's field must not be empty).
std::string Extension(std::string_view uri) {
  const size_t slash = uri.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? uri : uri.substr(slash + 1);
  const size_t dot = base.rfind('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == base.size()) return "bin";
  std::string ext(base.substr(dot + 1));
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}


Result<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  if (!in && !in.eof()) return Status::IoError(path.string() + ": cannot read back");
  return out.str();
}

// The source fields `--media` names: "image" or "views:4" (a list of up to 4), each
// media of no particular kind (the bytes are copied, never decoded). Empty: none, i.e.
// the manifest's LLaVA form (its "image").
Result<std::vector<SourceFieldSpec>> MediaFields(const std::vector<std::string>& media) {
  std::vector<SourceFieldSpec> fields;
  if (media.empty()) return fields;
  for (const std::string& entry : media) {
    SourceFieldSpec& field = fields.emplace_back();
    field.kind = FieldKind::kBytes;
    field.name = entry;
    const size_t colon = entry.find(':');
    if (colon != std::string::npos) {
      field.name = entry.substr(0, colon);
      const std::string count = entry.substr(colon + 1);
      char* end = nullptr;
      const long n = std::strtol(count.c_str(), &end, 10);
      if (count.empty() || *end != '\0' || n < 1 || n > 1024) {
        return Status::InvalidArgument("shard: media '" + entry +
                                       "': a list is KEY:N with N in [1, 1024]");
      }
      field.max_items = static_cast<int>(n);
    }
    if (field.name.empty() || field.name == "json") {
      return Status::InvalidArgument("shard: media '" + entry + "': a manifest key is needed "
                                     "(and 'json' is the record's own member)");
    }
    for (size_t f = 0; f + 1 < fields.size(); ++f) {
      if (fields[f].name == field.name) {
        return Status::InvalidArgument("shard: media key '" + field.name + "' given twice");
      }
    }
  }
  // The conversation stays in the .json member; parsing it here only checks the record.
  fields.push_back(SourceFieldSpec{.name = "conversations", .kind = FieldKind::kConversation});
  return fields;
}

// The member name of each of the record's media items: <key>.<ext>, or <key>.<n>.<ext>
// for item n of a list field. kInvalidArgument when two items would share a name.
Result<std::vector<std::string>> MemberNames(const std::string& key, const SampleRecord& record,
                                             const std::vector<SourceFieldSpec>& fields,
                                             ManifestLayout layout) {
  std::vector<std::string> names;
  std::vector<int> items(fields.size() + 1, 0);
  for (const MediaRef& ref : record.media) {
    const bool list = ref.field < static_cast<int>(fields.size()) && fields[ref.field].max_items > 0;
    std::string name = key + ".";
    if (list) name += std::to_string(items[ref.field]++) + ".";
    name += Extension(ref.uri);
    for (size_t other = 0; other < names.size(); ++other) {
      if (names[other] == name) {
        const auto field_name = [&](int f) {
          return f < static_cast<int>(fields.size()) ? fields[f].name : std::string("image");
        };
        return Status::InvalidArgument(
            Where(record, layout) + ": '" + field_name(record.media[other].field) +
            "' and '" + field_name(ref.field) + "' would both be member " + name +
            ": give one of them another file extension");
      }
    }
    names.push_back(std::move(name));
  }
  return names;
}

struct ShardEntry {
  std::string name;
  int64_t bytes = 0;
  int64_t first_sample = 0;
  int64_t samples = 0;
};

}  // namespace

int64_t TarMemberBytes(int64_t size) { return 512 + (size + 511) / 512 * 512; }

Status WriteFileText(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Status::IoError(path + ": cannot write");
  return Status::Ok();
}

std::string ShardName(int64_t n) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%06lld.tar", static_cast<long long>(n));
  return name;
}

std::string SampleKey(int64_t index) {
  char key[32];
  std::snprintf(key, sizeof key, "%09lld", static_cast<long long>(index));
  return key;
}

Status IndexShard(const std::string& dir, const std::string& name, int64_t samples_written) {
  HR_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(fs::path(dir) / name));
  const TarListing listing = ListTarMembers(AsBytes(bytes));
  if (!listing.status.ok()) {
    return Status::Internal(name + " does not read back: " + listing.status.ToString());
  }
  const std::vector<std::string> required = {"json"};
  const std::vector<TarSample> samples = GroupSamples(listing.members, required);
  for (const TarSample& s : samples) {
    if (!s.status.ok()) return Status::Internal(name + ": " + s.status.ToString());
  }
  if (static_cast<int64_t>(samples.size()) != samples_written) {
    return Status::Internal(name + ": wrote " + std::to_string(samples_written) +
                            " samples, read back " + std::to_string(samples.size()));
  }
  const ShardIndex index = MakeShardIndex(name, static_cast<int64_t>(bytes.size()), samples);
  return WriteFileText((fs::path(dir) / (name + ".idx.json")).string(), ShardIndexToJson(index));
}

Result<ShardStats> WriteShards(const ShardOptions& options) {
  if (options.manifest.empty() || options.out_dir.empty() || options.target_bytes < 1) {
    return Status::InvalidArgument(
        "shard: a manifest and an output folder are required and the target size must be > 0");
  }
  const fs::path out_dir = options.out_dir;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::IoError(out_dir.string() + ": " + ec.message());

  const std::unique_ptr<Storage> storage = MakeLocalStorage();
  SourceSpec spec;
  spec.manifest = options.manifest;
  HR_ASSIGN_OR_RETURN(spec.fields, MediaFields(options.media));
  HR_ASSIGN_OR_RETURN(const Buffer manifest_bytes, storage->Read(options.manifest));
  HR_ASSIGN_OR_RETURN(const Manifest manifest,
                      ParseManifest(manifest_bytes, options.manifest, spec));
  HR_ASSIGN_OR_RETURN(const std::vector<std::string_view> texts,
                      RecordTexts(manifest_bytes, options.manifest));
  const ManifestLayout layout = ManifestLayoutOf(
      std::string_view(reinterpret_cast<const char*>(manifest_bytes.data()), manifest_bytes.size()));

  ShardStats stats;
  std::vector<ShardEntry> shards;
  std::unique_ptr<TarWriter> writer;
  int64_t open_bytes = 0;  // of the open shard, end-of-archive blocks included
  const auto close_shard = [&]() -> Status {
    HR_ASSIGN_OR_RETURN(shards.back().bytes, writer->Close());
    writer.reset();
    stats.bytes += shards.back().bytes;
    return IndexShard(out_dir.string(), shards.back().name, shards.back().samples);
  };

  for (size_t i = 0; i < manifest.records.size(); ++i) {
    const SampleRecord& record = manifest.records[i];
    if (!record.status.ok()) {
      stats.skipped.push_back(Where(record, layout) + ": " +
                              record.status.ToString());
      continue;
    }
    const std::string key = SampleKey(static_cast<int64_t>(i));
    HR_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                        MemberNames(key, record, spec.fields, layout));
    std::vector<Buffer> media;
    const std::string_view json = texts[i];
    int64_t sample_bytes = TarMemberBytes(static_cast<int64_t>(json.size()));
    for (const MediaRef& ref : record.media) {
      auto read = storage->Read(ref.uri);
      if (!read.ok()) {
        return Status(read.status().code(),
                      Where(record, layout) + ": " + read.status().message());
      }
      sample_bytes += TarMemberBytes(static_cast<int64_t>(read->size()));
      media.push_back(*std::move(read));
    }
    if (writer != nullptr && open_bytes + sample_bytes > options.target_bytes) {
      HR_RETURN_IF_ERROR(close_shard());
    }
    if (writer == nullptr) {
      ShardEntry& entry = shards.emplace_back();
      entry.name = ShardName(static_cast<int64_t>(shards.size()) - 1);
      entry.first_sample = stats.samples;
      HR_ASSIGN_OR_RETURN(writer, TarWriter::Open((out_dir / entry.name).string()));
      open_bytes = 1024;  // the two zero blocks that end an archive
    }
    for (size_t m = 0; m < media.size(); ++m) {
      HR_RETURN_IF_ERROR(
          writer->Add(names[m], std::span<const uint8_t>(media[m].data(), media[m].size())));
    }
    HR_RETURN_IF_ERROR(writer->Add(key + ".json", AsBytes(json)));
    open_bytes += sample_bytes;
    ++shards.back().samples;
    ++stats.samples;
  }
  if (writer != nullptr) HR_RETURN_IF_ERROR(close_shard());
  stats.shards = static_cast<int64_t>(shards.size());

  JsonWriter w;
  w.BeginObject();
  w.Key("format").String("headrace.shards");
  w.Key("version").Int(1);
  w.Key("samples").Int(stats.samples);
  w.Key("skipped").Int(static_cast<int64_t>(stats.skipped.size()));
  w.Key("shards").BeginArray();
  for (const ShardEntry& s : shards) {
    w.BeginObject();
    w.Key("shard").String(s.name);
    w.Key("index").String(s.name + ".idx.json");
    w.Key("bytes").Int(s.bytes);
    w.Key("first_sample").Int(s.first_sample);
    w.Key("samples").Int(s.samples);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  HR_RETURN_IF_ERROR(WriteFileText((out_dir / "shards.json").string(), w.str() + "\n"));
  return stats;
}

}  // namespace headrace
