// BlendOrder: an epoch of a weighted blend of datasets (source.mix,
// formats/source_mix.h), as the sequence of dataset indices its positions read.
//
// A blend's dataset is its parts' records one after another (part s holds the indices
// [first_s, first_s + size_s)). An epoch is made in two steps, both pure functions of
// (seed, epoch):
//
// 1. Which part each position draws from. The unshuffled sequence is the smooth
//    weighted round-robin: position n goes to the part with the largest deficit
//    (n + 1)·w_s − c_s (c_s: the part's picks before n; ties: the earlier part), so that
//    after every n positions |c_s(n) − n·w_s| < 1 for every part (w: the weights
//    normalized to sum 1). With shuffle on, each block of kBlendBlock consecutive
//    positions is then shuffled with a generator seeded by (seed, epoch, block): the
//    counts of a block stay the same, only their places in it move. So at any n,
//    |c_s(n) − n·w_s| < 2 + kBlendBlock·w_s: a batch of 64 from a 0.6 / 0.3 / 0.1 blend
//    holds 38–39 / 19 / 6–7 samples of each part, and the proportions converge as
//    1/n. (A sequence drawn independently per position, as a weighted random sampler
//    does, strays by about √(n·w·(1 − w)) instead.)
// 2. Which sample of its part a pick is. Each part keeps its own order: the k-th pick
//    of part s is sample k mod size_s of the part's permutation for pass k / size_s
//    (the part's records shuffled as a single source would be, shards and shuffle
//    window included, seeded by (seed, the part's key, pass) and the epoch). A part
//    that runs out before the epoch ends starts its next pass, a new permutation.
//
// The epoch's length (`until`):
// - first_exhausted: the positions before the first pick that would need a part's
//   sample size_s + 1: every sample is read at most once per epoch.
// - all_exhausted: until every part has given each of its samples once (the parts that
//   run out first repeat, in their next pass).
// - samples: `samples` positions, the parts repeating as needed.
// - epochized: each part read `repeat` times its size (rounded), the weights being those
//   counts: every sample of a part with repeat 1 exactly once an epoch, of one with
//   repeat 2 exactly twice, and the parts interleaved as above (Megatron-Energon's
//   epochized blend).
// The length depends on the sizes, the weights and `until`, never on the seed: every
// epoch has the same.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/formats/order_shape.h"

namespace headrace {

inline constexpr int64_t kBlendBlock = 64;

// Checks `blend` (at least one part, sizes >= 1, weights finite and > 0, ...) and
// returns the positions of one epoch; kInvalidArgument naming the source.mix key
// otherwise, and for an epoch of 2^36 positions or more. An epoch of `limit` positions or
// more returns `limit` ("at least"): an exhausted epoch's length is walked position by
// position, so a caller that can hold at most limit - 1 positions (the memory budget)
// waits for no longer a walk; one whose bound from the weights reaches `limit` is not
// walked at all.
Result<int64_t> BlendEpochLength(const BlendOptions& blend,
                                 int64_t limit = int64_t{1} << 36);

// The part (its position in blend.parts) that each of an epoch's positions draws from,
// before the block shuffle (step 1 without shuffle). `length` positions.
std::vector<int32_t> BlendChoices(const BlendOptions& blend, int64_t length);

// One epoch: the dataset index of every position (length: BlendEpochLength), as T.
template <typename T>
std::vector<T> BlendSequence(const BlendOptions& blend, int64_t length, bool shuffle,
                             uint64_t seed, int64_t epoch);

// The picks of each part among an epoch's first `positions` positions.
std::vector<int64_t> BlendCounts(const BlendOptions& blend, int64_t length, bool shuffle,
                                 uint64_t seed, int64_t epoch, int64_t positions);

}  // namespace headrace
