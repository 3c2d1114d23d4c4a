#include "shard.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string_view>

#include "headrace/core/json_writer.h"
#include "headrace/formats/manifest.h"
#include "headrace/formats/tar_shard.h"
#include "headrace/io/storage.h"

namespace headrace {
namespace {

namespace fs = std::filesystem;

// Tar bytes of one member: its ustar header and its data padded to 512-byte blocks.
int64_t TarBytes(int64_t size) { return 512 + (size + 511) / 512 * 512; }

std::span<const uint8_t> Span(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// The manifest's lines as written, indexed by 1-based line number - 1, without the line
// end or a leading byte-order mark (what ParseManifest parsed).
std::vector<std::string_view> Lines(const Buffer& bytes) {
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    if (line.ends_with('\r')) line.remove_suffix(1);
    lines.push_back(line);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
  }
  return lines;
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

std::string ShardName(int64_t n) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%06lld.tar", static_cast<long long>(n));
  return name;
}

std::string Key(int64_t index) {
  char key[32];
  std::snprintf(key, sizeof key, "%09lld", static_cast<long long>(index));
  return key;
}

Result<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  if (!in && !in.eof()) return Status::IoError(path.string() + ": cannot read back");
  return out.str();
}

Status WriteFile(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Status::IoError(path.string() + ": cannot write");
  return Status::Ok();
}

struct ShardEntry {
  std::string name;
  int64_t bytes = 0;
  int64_t first_sample = 0;
  int64_t samples = 0;
};

// Reads a closed shard back, checks it holds `samples` good samples, each with a json
// field, and writes its index beside it.
Status IndexShard(const fs::path& dir, const ShardEntry& shard) {
  HR_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(dir / shard.name));
  const TarListing listing = ListTarMembers(Span(bytes));
  if (!listing.status.ok()) {
    return Status::Internal(shard.name + " does not read back: " + listing.status.ToString());
  }
  const std::vector<std::string> required = {"json"};
  const std::vector<TarSample> samples = GroupSamples(listing.members, required);
  for (const TarSample& s : samples) {
    if (!s.status.ok()) return Status::Internal(shard.name + ": " + s.status.ToString());
  }
  if (static_cast<int64_t>(samples.size()) != shard.samples) {
    return Status::Internal(shard.name + ": wrote " + std::to_string(shard.samples) +
                            " samples, read back " + std::to_string(samples.size()));
  }
  const ShardIndex index = MakeShardIndex(shard.name, static_cast<int64_t>(bytes.size()), samples);
  return WriteFile(dir / (shard.name + ".idx.json"), ShardIndexToJson(index));
}

}  // namespace

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
  HR_ASSIGN_OR_RETURN(const Buffer manifest_bytes, storage->Read(options.manifest));
  HR_ASSIGN_OR_RETURN(const Manifest manifest,
                      ParseManifest(manifest_bytes, options.manifest, spec));
  const std::vector<std::string_view> lines = Lines(manifest_bytes);

  ShardStats stats;
  std::vector<ShardEntry> shards;
  std::unique_ptr<TarWriter> writer;
  int64_t open_bytes = 0;  // of the open shard, end-of-archive blocks included
  const auto close_shard = [&]() -> Status {
    HR_ASSIGN_OR_RETURN(shards.back().bytes, writer->Close());
    writer.reset();
    stats.bytes += shards.back().bytes;
    return IndexShard(out_dir, shards.back());
  };

  for (size_t i = 0; i < manifest.records.size(); ++i) {
    const SampleRecord& record = manifest.records[i];
    if (!record.status.ok()) {
      stats.skipped.push_back("line " + std::to_string(record.line) + ": " +
                              record.status.ToString());
      continue;
    }
    Buffer media;
    if (!record.uri().empty()) {
      auto read = storage->Read(record.uri());
      if (!read.ok()) {
        return Status(read.status().code(),
                      "line " + std::to_string(record.line) + ": " + read.status().message());
      }
      media = *std::move(read);
    }
    const std::string_view json = lines[record.line - 1];
    const int64_t sample_bytes =
        TarBytes(static_cast<int64_t>(json.size())) +
        (record.uri().empty() ? 0 : TarBytes(static_cast<int64_t>(media.size())));
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
    const std::string key = Key(static_cast<int64_t>(i));
    if (!record.uri().empty()) {
      HR_RETURN_IF_ERROR(writer->Add(key + "." + Extension(record.uri()),
                                     std::span<const uint8_t>(media.data(), media.size())));
    }
    HR_RETURN_IF_ERROR(writer->Add(key + ".json", Span(json)));
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
  HR_RETURN_IF_ERROR(WriteFile(out_dir / "shards.json", w.str() + "\n"));
  return stats;
}

}  // namespace headrace
