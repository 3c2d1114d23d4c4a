// Test helper (op tests, fuzz targets): one sample's run of an op as the executor does
// it, on given values and batch rows, with a scratch arena of its own and a seed.
#pragma once

#include <cstdint>
#include <span>

#include "headrace/core/status.h"
#include "headrace/ops/op.h"

namespace headrace::testing {

// Runs `op` on `values` (slots as the op was made with), writing `rows`. Values the op
// writes into scratch are gone when it returns: for ops that write batch rows.
inline Status RunOp(const Op& op, std::span<Value> values, uint8_t* const* rows,
                    uint64_t seed) {
  ScratchArena scratch;
  SampleContext ctx;
  ctx.sample_seed = seed;
  ctx.scratch = &scratch;
  ctx.values = values;
  ctx.rows = rows;
  return op.Run(ctx);
}

}  // namespace headrace::testing
