// Where a fixed-length window (a video clip, an audio crop) starts in a longer stream:
// shared by the media operators' `clip_start` / `start` parameters.
#pragma once

#include "headrace/ops/schema.h"

namespace headrace {

enum class ClipStart {
  kRandom,  // uniformly at random, seeded per sample and epoch (the op's random stream)
  kStart,   // at the beginning
  kCenter,  // in the middle
};
// "random", "start", "center".
EnumTable<ClipStart> TableOf(ClipStart);

}  // namespace headrace
