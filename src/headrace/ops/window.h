// Where a fixed-length window (a video clip, an audio crop) starts in a longer stream:
// shared by the media operators' `clip_start` / `start` parameters.
#pragma once

#include <cstdint>

#include "headrace/core/rng.h"
#include "headrace/ops/schema.h"

namespace headrace {

enum class ClipStart {
  kRandom,  // uniformly at random, seeded per sample and epoch (the op's random stream)
  kStart,   // at the beginning
  kCenter,  // in the middle
};
// "random", "start", "center".
EnumTable<ClipStart> TableOf(ClipStart);

// The first sample of a window of `length` samples in a stream of `total` (0 when the
// stream is not longer: the window is then zero-padded at the end). kRandom draws one
// Uniform() from `rng`, and only when there is a choice.
int64_t WindowBegin(ClipStart start, int64_t total, int64_t length, Rng rng);

}  // namespace headrace
