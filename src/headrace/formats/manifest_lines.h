// ManifestLines: a JSONL manifest kept as its lines, each parsed when a sample reaches it.
//
// A parsed manifest (formats/manifest.h) costs about twice its JSONL in memory (~640 B
// per LLaVA record against ~300 B of text), in every process that loads it: each Ray
// worker, each rank. This store keeps instead
// - the manifest's bytes: a local file is mapped read-only, so every process on a
//   machine shares one copy in the page cache (and the kernel may drop pages under
//   pressure and read them again); a URI is read whole into this process's memory;
// - one offset per record: 4 bytes, relative to a 64-bit base per 1024 records;
// - the runs of blank lines, for line numbers in messages.
// A manifest that is one JSON array (manifest.h, ManifestLayoutOf) is kept the same way:
// 4 bytes an element, the elements found by one scan of the file
// (ForEachManifestElement), each element's end found from the next one's start.
// A record is parsed (simdjson: 0.67 µs for a ~270-byte LLaVA line) when the engine
// starts the sample's batch, and lives as long as the batch. The records are the same as the
// parsed manifest's, field for field, bad lines and their messages included; only the
// count of bad lines is not known up front (Manifest::bad_lines stays 0).
//
// A mapped manifest must not be truncated or rewritten in place while a run reads it (a
// read of a page past the new end faults: SIGBUS). Replace it by renaming a new file over
// it: the mapping keeps the old file.
//
// SourceSpec::records picks the form: "parsed", "lines", or "auto" (lines for a manifest
// of kLinesAutoBytes or more). LoadManifestRecords is what the loader calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/record_store.h"
#include "headrace/formats/manifest.h"
#include "headrace/formats/source_spec.h"
#include "headrace/io/storage.h"

namespace headrace {

// Under records: auto, a manifest this large or larger is kept as lines.
inline constexpr int64_t kLinesAutoBytes = int64_t{64} << 20;

class ManifestLines final : public RecordStore {
 public:
  // Maps spec.manifest when it is a local file; reads it through `storage` otherwise.
  // Fails as LoadManifest does: the storage's kNotFound/kIoError, and kInvalidArgument
  // for a manifest without records.
  static Result<std::shared_ptr<const ManifestLines>> Load(Storage& storage,
                                                           const SourceSpec& spec);
  // Over bytes already read (kept alive by the store).
  static Result<std::shared_ptr<const ManifestLines>> FromBuffer(Buffer bytes,
                                                                 const std::string& manifest_path,
                                                                 const SourceSpec& spec);

  int64_t size() const override { return records_; }
  const SampleRecord& Get(int64_t index, SampleRecord& scratch) const override;
  RecordStoreMemory Memory() const override;
  // The normalized root media paths are resolved against (Manifest::root).
  const std::string& root() const { return parser_.root(); }
  bool mapped() const { return mapped_; }

 private:
  ManifestLines(ManifestLineParser parser, std::shared_ptr<const void> owner, const char* data,
                size_t size, bool mapped)
      : parser_(std::move(parser)), owner_(std::move(owner)), data_(data), size_(size),
        mapped_(mapped) {}
  // The store over `size` bytes at `data`, which `owner` keeps alive, indexed.
  static Result<std::shared_ptr<const ManifestLines>> Make(std::shared_ptr<const void> owner,
                                                           const char* data, size_t size,
                                                           bool mapped,
                                                           const std::string& manifest_path,
                                                           const SourceSpec& spec);
  // Finds every record's line (or element); fails when there is none.
  Status Index(const std::string& manifest_path);
  // Notes `offset` as the start of record `slot` (for an array, slot size() is where the
  // last element ends); false when it lies 4 GiB or more past its block's base.
  bool AddStart(uint64_t offset, int64_t slot);
  const char* Start(int64_t slot) const;
  int64_t LineNumber(int64_t index) const;

  static constexpr int kBlockShift = 10;  // 1024 records per 64-bit base

  ManifestLineParser parser_;
  std::shared_ptr<const void> owner_;  // keeps data_ alive: a Buffer or a mapping
  const char* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  int64_t records_ = 0;
  std::vector<uint64_t> block_base_;  // offset of record (b << kBlockShift)'s line
  // Each record's line (element) start, from its block's base; for an array, one more:
  // the offset of its closing ']'.
  std::vector<uint32_t> start_;
  // (first record after a run of blank lines, blank lines before it in all), by record.
  std::vector<std::pair<int64_t, int64_t>> blank_runs_;
};

// The records of a manifest source as `spec.records` asks: a ManifestLines store, or the
// manifest parsed (a VectorRecords sharing `manifest`'s records). `manifest` gets the
// path and root either way, and the records and bad-line count when parsed.
struct ManifestRecords {
  std::shared_ptr<Manifest> manifest;
  std::shared_ptr<const RecordStore> records;
  int64_t heap_bytes = 0;    // what the records hold in this process's heap
  int64_t mapped_bytes = 0;  // the manifest's bytes mapped from the page cache
};
Result<ManifestRecords> LoadManifestRecords(Storage& storage, const SourceSpec& spec);

}  // namespace headrace
