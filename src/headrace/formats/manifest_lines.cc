#include "headrace/formats/manifest_lines.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string_view>

#include "headrace/core/strings.h"
#include "headrace/io/uri.h"

namespace headrace {
namespace {

// Whether `path` names a file of this machine by its path (not a URI, not file://).
bool IsLocalPath(const std::string& path) {
  return SchemeOf(path) == UriScheme::kLocal && !path.starts_with("file://");
}

// The manifest file at `path` mapped read-only, or null when it cannot be (not a local
// regular file, empty, or mmap refused): the caller then reads it through the storage,
// which names what is wrong. `size` gets the file's size.
std::shared_ptr<const void> MapFile(const std::string& path, size_t& size) {
  if (!IsLocalPath(path)) return nullptr;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* data = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    size = static_cast<size_t>(st.st_size);
    data = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  }
  ::close(fd);  // the mapping keeps the file
  if (data == MAP_FAILED) return nullptr;
  return std::shared_ptr<const void>(data, [size](const void* p) {
    ::munmap(const_cast<void*>(p), size);
  });
}

// The size of a local manifest file, or -1 when it is not one (a URI, or not there).
int64_t LocalFileSize(const std::string& path) {
  if (!IsLocalPath(path)) return -1;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  return st.st_size;
}

}  // namespace

Result<std::shared_ptr<const ManifestLines>> ManifestLines::Load(Storage& storage,
                                                                 const SourceSpec& spec) {
  if (spec.manifest.empty()) return Status::InvalidArgument("source.manifest is empty");
  size_t size = 0;
  if (std::shared_ptr<const void> map = MapFile(spec.manifest, size)) {
    const char* data = static_cast<const char*>(map.get());
    HR_ASSIGN_OR_RETURN(std::shared_ptr<const ManifestLines> lines,
                        Make(std::move(map), data, size, /*mapped=*/true, spec.manifest, spec));
    // Samples reach lines in shuffled order: read-ahead around each would be waste.
    ::madvise(const_cast<char*>(data), size, MADV_RANDOM);
    return lines;
  }
  Result<Buffer> bytes = storage.Read(spec.manifest);
  if (!bytes.ok()) return bytes.status().WithContext("reading manifest");
  return FromBuffer(*std::move(bytes), spec.manifest, spec);
}

Result<std::shared_ptr<const ManifestLines>> ManifestLines::FromBuffer(
    Buffer bytes, const std::string& manifest_path, const SourceSpec& spec) {
  auto owner = std::make_shared<const Buffer>(std::move(bytes));
  const char* data = reinterpret_cast<const char*>(owner->data());
  const size_t size = owner->size();
  return Make(std::move(owner), data, size, /*mapped=*/false, manifest_path, spec);
}

Result<std::shared_ptr<const ManifestLines>> ManifestLines::Make(
    std::shared_ptr<const void> owner, const char* data, size_t size, bool mapped,
    const std::string& manifest_path, const SourceSpec& spec) {
  HR_ASSIGN_OR_RETURN(ManifestLineParser parser,
                      ManifestLineParser::Make(manifest_path, spec,
                                               ManifestLayoutOf(std::string_view(data, size))));
  std::shared_ptr<ManifestLines> lines(
      new ManifestLines(std::move(parser), std::move(owner), data, size, mapped));
  HR_RETURN_IF_ERROR(lines->Index(manifest_path));
  return std::shared_ptr<const ManifestLines>(std::move(lines));
}

bool ManifestLines::AddStart(uint64_t offset, int64_t slot) {
  if ((slot & ((int64_t{1} << kBlockShift) - 1)) == 0) block_base_.push_back(offset);
  const uint64_t relative = offset - block_base_.back();
  if (relative > std::numeric_limits<uint32_t>::max()) return false;
  start_.push_back(static_cast<uint32_t>(relative));
  return true;
}

const char* ManifestLines::Start(int64_t slot) const {
  const auto i = static_cast<size_t>(slot);
  return data_ + block_base_[i >> kBlockShift] + start_[i];
}

Status ManifestLines::Index(const std::string& manifest_path) {
  const std::string_view bytes(data_, size_);
  // 1024 records over 4 GiB: ~4 MiB a record, not a manifest's.
  const auto too_long = [&](std::string_view unit, int64_t number) {
    return Status::InvalidArgument("manifest " + QuoteForMessage(manifest_path) + ": " +
                                   std::string(unit) + "s around " + std::string(unit) + " " +
                                   std::to_string(number) +
                                   " average over 4 MiB; keep its records parsed "
                                   "(source.records: parsed)");
  };
  if (parser_.layout() == ManifestLayout::kArray) {
    Status status;
    HR_ASSIGN_OR_RETURN(const size_t close,
                        ForEachManifestElement(bytes, manifest_path,
                                               [&](std::string_view element, int64_t index,
                                                   size_t) {
                                                 if (!AddStart(element.data() - data_, index)) {
                                                   status = too_long("element", index);
                                                   return false;
                                                 }
                                                 ++records_;
                                                 return true;
                                               }));
    HR_RETURN_IF_ERROR(status);
    if (records_ == 0) {
      return Status::InvalidArgument("manifest " + QuoteForMessage(manifest_path) +
                                     " has no records (an empty JSON array)");
    }
    // Where the last element ends: Get finds each element's end from the next start.
    if (!AddStart(close, records_)) return too_long("element", records_ - 1);
  } else {
    int64_t blank_noted = 0;  // blank lines before the last run noted
    Status status;
    const int64_t lines = ForEachManifestLine(
        bytes, [&](std::string_view line, int64_t number, size_t) {
          if (!AddStart(static_cast<uint64_t>(line.data() - data_), records_)) {
            status = too_long("line", number);
            return false;
          }
          // Line numbers count blank lines: note each change of the count before a record.
          if (const int64_t blank = number - 1 - records_; blank != blank_noted) {
            blank_runs_.emplace_back(records_, blank);
            blank_noted = blank;
          }
          ++records_;
          return true;
        });
    HR_RETURN_IF_ERROR(status);
    if (records_ == 0) {
      return Status::InvalidArgument("manifest " + QuoteForMessage(manifest_path) +
                                     " has no records (" + std::to_string(lines) +
                                     " lines, all blank)");
    }
  }
  start_.shrink_to_fit();
  block_base_.shrink_to_fit();
  blank_runs_.shrink_to_fit();
  return Status::Ok();
}

int64_t ManifestLines::LineNumber(int64_t index) const {
  // The last run of blank lines that starts at or before `index`.
  auto it = std::upper_bound(blank_runs_.begin(), blank_runs_.end(), index,
                             [](int64_t i, const auto& run) { return i < run.first; });
  const int64_t blank_before = it == blank_runs_.begin() ? 0 : std::prev(it)->second;
  return index + 1 + blank_before;
}

const SampleRecord& ManifestLines::Get(int64_t index, SampleRecord& scratch) const {
  const char* start = Start(index);
  const char* const end = data_ + size_;
  if (parser_.layout() == ManifestLayout::kArray) {
    // The element ends before the next one's start (or the closing ']'): back over the
    // whitespace, the ',' between them and the whitespace before it, as the index scan
    // trimmed it. Only a ',' and whitespace lie between two elements' spans.
    const bool last = index + 1 == records_;
    const char* stop = Start(index + 1);
    const auto back_over_space = [&] {
      while (stop > start && (stop[-1] == ' ' || stop[-1] == '\t' || stop[-1] == '\n' ||
                              stop[-1] == '\r')) {
        --stop;
      }
    };
    back_over_space();
    if (!last && stop > start && stop[-1] == ',') {
      --stop;
      back_over_space();
    }
    parser_.Parse(std::string_view(start, stop - start), static_cast<size_t>(end - stop), index,
                  scratch);
    return scratch;
  }
  const char* newline = static_cast<const char*>(std::memchr(start, '\n', end - start));
  const char* line_end = newline ? newline : end;
  parser_.Parse(std::string_view(start, line_end - start), static_cast<size_t>(end - line_end),
                LineNumber(index), scratch);
  return scratch;
}

RecordStoreMemory ManifestLines::Memory() const {
  const size_t index = sizeof(*this) + start_.capacity() * sizeof(uint32_t) +
                       block_base_.capacity() * sizeof(uint64_t) +
                       blank_runs_.capacity() * sizeof(blank_runs_[0]);
  const auto bytes = static_cast<int64_t>(size_);
  return {static_cast<int64_t>(index) + (mapped_ ? 0 : bytes), mapped_ ? bytes : 0};
}

Result<ManifestRecords> LoadManifestRecords(Storage& storage, const SourceSpec& spec) {
  ManifestRecords out;
  out.manifest = std::make_shared<Manifest>();
  out.manifest->path = spec.manifest;
  const int64_t local_size = LocalFileSize(spec.manifest);
  Buffer bytes;  // a URI's bytes, read once whichever form keeps them
  bool have_bytes = false;
  bool lines = spec.records == ManifestRecordsForm::kLines;
  if (spec.records == ManifestRecordsForm::kAuto) {
    if (local_size >= 0) {
      lines = local_size >= kLinesAutoBytes;
    } else if (!spec.manifest.empty()) {
      Result<Buffer> read = storage.Read(spec.manifest);
      if (!read.ok()) return read.status().WithContext("reading manifest");
      bytes = *std::move(read);
      have_bytes = true;
      lines = static_cast<int64_t>(bytes.size()) >= kLinesAutoBytes;
    }
  }
  if (lines) {
    std::shared_ptr<const ManifestLines> store;
    if (have_bytes) {
      HR_ASSIGN_OR_RETURN(store, ManifestLines::FromBuffer(std::move(bytes), spec.manifest, spec));
    } else {
      HR_ASSIGN_OR_RETURN(store, ManifestLines::Load(storage, spec));
    }
    out.manifest->root = store->root();
    const RecordStoreMemory memory = store->Memory();
    out.heap_bytes = memory.heap_bytes;
    out.mapped_bytes = memory.mapped_bytes;
    out.records = std::move(store);
    return out;
  }
  if (!have_bytes) {
    HR_ASSIGN_OR_RETURN(Manifest parsed, LoadManifest(storage, spec));
    *out.manifest = std::move(parsed);
  } else {
    HR_ASSIGN_OR_RETURN(Manifest parsed, ParseManifest(bytes, spec.manifest, spec));
    *out.manifest = std::move(parsed);
  }
  out.heap_bytes = static_cast<int64_t>(ManifestMemoryBytes(*out.manifest));
  // The records live as long as the manifest; the store shares its ownership.
  out.records = std::make_shared<VectorRecords>(
      std::shared_ptr<const std::vector<SampleRecord>>(out.manifest, &out.manifest->records),
      out.heap_bytes);
  return out;
}

}  // namespace headrace
