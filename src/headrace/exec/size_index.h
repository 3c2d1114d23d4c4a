// SizeIndex: every sample's sizes (its tokens, each image's and video's patches), built
// once per dataset and pipeline (`headrace index sizes CONFIG`) so that a balanced run
// (batch.balance.index) deals its steps without sizing a sample: O(1) a sample to read.
//
// The file, little-endian:
//   "HRSIZES2"  u32 fingerprint length, the fingerprint (what changes sizes: the
//   pipeline's, pipeline/prepared.h SizeFingerprint), u64 samples n, u64 patches p,
//   i64 tokens[n] (-1: not told when built), u32 modalities[n], u64 first patch[n + 1],
//   i64 patches[p].
// 20 bytes a sample plus 8 an image: linear in the dataset.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/exec/pack_planner.h"
#include "headrace/exec/step_cost.h"

namespace headrace {

class SizeIndex {
 public:
  // Every sample's sizes, by dataset index (nullopt: not told).
  static SizeIndex Of(std::string fingerprint, std::span<const std::optional<SampleSize>> sizes);
  // kNotFound when `path` does not exist; kCorruptData for a file that is not an index or
  // is cut short (each naming the path).
  static Result<SizeIndex> Read(const std::string& path);
  Status Write(const std::string& path) const;
  // The file's bytes, and back (kCorruptData naming `name`): how an index built in parts
  // (a range of samples each, on Ray workers) travels to the process that joins them.
  std::string Serialize() const;
  static Result<SizeIndex> Parse(std::string_view bytes, const std::string& name);
  // The indexes of consecutive ranges of samples, in order, as one; kInvalidArgument when
  // their fingerprints differ.
  static Result<SizeIndex> Join(std::span<const SizeIndex> parts);

  const std::string& fingerprint() const { return fingerprint_; }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // Sample `index`'s sizes; nullopt when not told, or out of range.
  std::optional<SampleSize> At(int64_t index) const;
  // ... its tokens alone (no copy of its patches: a check per sample as it runs).
  std::optional<int64_t> TokensAt(int64_t index) const;
  // Samples whose sizes were not told when it was built.
  int64_t untold() const;

 private:
  std::string fingerprint_;
  std::vector<int64_t> tokens_;
  std::vector<uint32_t> modalities_;
  std::vector<uint64_t> first_patch_;  // size() + 1
  std::vector<int64_t> patches_;
};

// A sample's sizes as its size pass told them (exec/pack_sizer.h); nullopt: not told.
std::optional<SampleSize> SizeOf(const std::optional<PackPlanner::Told>& told);

// A planned pack's sizer that reads `index` (batch.pack.index): a sample whose entry fits
// `seq_len` is told from it, O(1), nothing read; one longer (whose cut the planner checks
// against where its vision tokens lie, and whose error names its record) or without an
// entry is sized by `exact` (the size pass), as a run without the index sizes it. A
// sample whose bytes changed since the index was built runs as it is: the packer gives
// it a row of its own where it no longer fits the one planned (Packer::LayPlanned).
PackPlanner::Sizer SizeByTheIndex(std::shared_ptr<const SizeIndex> index, int64_t seq_len,
                                  PackPlanner::Sizer exact);

struct EngineInputs;
// The bytes of an image the index build reads first, for its header: a PNG's or WebP's
// is in its first 40 bytes, a JPEG's frame header follows its APP segments (well under
// 16 KiB unless an EXIF thumbnail precedes it: such an image is read again whole).
inline constexpr int64_t kIndexHeaderBytes = int64_t{16} << 10;

// Samples [begin, end) of `inputs`' source (end < 0: to its last) sized by its chain's
// size pass (exec/pack_sizer.h, nothing decoded), the tokens those of batch field
// `token_field`, in chunks taken in turn by `threads` threads; element i is sample
// begin + i. Each image's first `image_header_bytes` are read (0: whole objects), then
// the samples they could not size from whole reads: the sizes are those of whole reads,
// for a fraction of the bytes. kInvalidArgument when the chain cannot tell them before
// it runs (BalanceTokenField, exec/batch_formers.h), or for a range outside the source.
Result<std::vector<std::optional<SampleSize>>> SizeEverySample(
    std::shared_ptr<const EngineInputs> inputs, const std::string& token_field, int threads,
    int64_t begin = 0, int64_t end = -1, int64_t image_header_bytes = kIndexHeaderBytes);

}  // namespace headrace
