// The sizes a planned batch.pack packs by (exec/pack_planner.h): each sample's token
// count as the chain's size pass tells it (ops/op.h TellRows: image.decode from the
// header, smart_resize, patchify's grid, text.tokenize's tokens), from its record and
// its media read whole through the source's storage. Nothing is decoded. On the caller's
// thread (the engine's driver), a batch's reads issued at once and waited for together.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "headrace/exec/engine.h"
#include "headrace/exec/pack_planner.h"

namespace headrace {

// Whether a planned pack can size the samples of `inputs`: one chain, whose ops up to its
// text.tokenize all tell (Op::Tells), text.tokenize among them.
bool ChainTellsTokens(const EngineInputs& inputs);

// The media the sizer read, kept for the engine to run the samples on instead of reading
// them again (EngineOptions::media_of): at most `max_bytes`, the oldest dropped first
// (their samples are read again), and those of samples a plan leaves out too.
class ReadMedia {
 public:
  explicit ReadMedia(int64_t max_bytes) : max_bytes_(max_bytes) {}
  void Put(int64_t epoch, int64_t index, std::vector<Buffer> media);
  std::optional<std::vector<Buffer>> Take(int64_t epoch, int64_t index);
  int64_t bytes() const;

 private:
  mutable std::mutex mu_;
  const int64_t max_bytes_;
  int64_t bytes_ = 0;
  std::map<std::pair<int64_t, int64_t>, std::vector<Buffer>> media_;
  std::deque<std::pair<int64_t, int64_t>> order_;  // oldest first
};

// The sizer over `inputs` (kept alive by it): the rows of batch field `token_field` told
// for each sample, and where `pack`'s vision token ids lie among them (past
// pack.seq_len); nullopt for a sample whose record, reads or size pass fail. The media
// it read go to `keep` (null: dropped). An object over `max_object_bytes` is not read
// (the engine fails its sample as it would: it can never fit the I/O budget), nor is
// anything once the run stops.
PackPlanner::Sizer SizeByTheSizePass(std::shared_ptr<const EngineInputs> inputs,
                                     int token_field, const PackOptions& pack,
                                     std::shared_ptr<ReadMedia> keep = nullptr,
                                     int64_t max_object_bytes = INT64_MAX);

}  // namespace headrace
