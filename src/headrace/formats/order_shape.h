// OrderShape: what the epoch order (exec/epoch_order.h) needs of a source: its shards,
// its shuffle window, and for a blend of sources (source.mix) its parts and weights
// (exec/blend_order.h says what an epoch of a blend is).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace headrace {

enum class BlendUntil { kFirstExhausted, kAllExhausted, kSamples, kEpochized };

struct BlendPart {
  int64_t first = 0;  // the part's first index in the blend's dataset
  int64_t size = 0;
  // The part's own order shape (formats/source.h, OrderShape): records per shard or row
  // group (empty: no shards), and the shards shuffled together.
  std::vector<int64_t> shard_samples;
  int64_t shuffle_window = 1;
  double weight = 1;  // > 0; not normalized
  double repeat = 1;  // epochized: reads of each sample an epoch
  uint64_t key = 0;   // seeds the part's order: its name's hash, so that adding a part
                      // changes no other part's order
};

struct BlendOptions {
  std::vector<BlendPart> parts;
  BlendUntil until = BlendUntil::kFirstExhausted;
  int64_t samples = 0;  // kSamples: the epoch's positions
  // A continuation (a resume whose weights changed): the picks each part had made in the
  // epoch already (empty: none). The sequence then starts afresh with these weights, each
  // part continuing its own order at its pick start[s], and `until` counts the picks
  // made before: the epoch still ends when a part is exhausted, or after `samples` in
  // all, or at each part's epochized reads.
  std::vector<int64_t> start;
};

// A stable 64-bit hash of a part's name (FNV-1a): BlendPart::key.
inline uint64_t BlendKey(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// What the epoch order needs of a source (exec/epoch_order.h, EpochOrderOptions).
struct OrderShape {
  // Records per shard or row group, in dataset order (empty: no shards: one permutation
  // of the whole dataset).
  std::vector<int64_t> shard_samples;
  // Shards whose samples are shuffled together (source.shuffle_window).
  int64_t shuffle_window = 1;
  // A blend (formats/source_mix.h): its parts, each with its own shards and window.
  std::optional<BlendOptions> blend;
};

}  // namespace headrace
