// Helpers shared by the fuzz targets that run media operators (video, audio) as the
// executor does: one sample's values and batch rows, a scratch arena, a seed.
#pragma once

#include <cstdint>
#include <span>

#include "headrace/core/status.h"
#include "headrace/ops/op.h"

namespace headrace::fuzz {

// Runs `op` on `values` (slots as the op was made with), writing `rows`.
inline Status RunOp(const Op& op, std::span<Value> values, uint8_t* const* rows, uint64_t seed) {
  ScratchArena scratch;
  SampleContext ctx;
  ctx.sample_seed = seed;
  ctx.scratch = &scratch;
  ctx.values = values;
  ctx.rows = rows;
  return op.Run(ctx);
}

// The errors bad media may give: a data error, or a limit. Never kInternal, which would
// skip the sample for a programming error.
inline bool IsMediaDataError(const Status& s) {
  return s.code() == StatusCode::kCorruptData || s.code() == StatusCode::kUnsupportedFormat ||
         s.code() == StatusCode::kResourceExhausted;
}

}  // namespace headrace::fuzz
