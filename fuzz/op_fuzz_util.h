// Helpers shared by the fuzz targets that run media operators (video, audio).
#pragma once

#include "headrace/core/status.h"
#include "headrace/ops/op_test_util.h"

namespace headrace::fuzz {

using testing::RunOp;

// The errors bad media may give: a data error, or a limit. Never kInternal, which would
// skip the sample for a programming error.
inline bool IsMediaDataError(const Status& s) {
  return s.code() == StatusCode::kCorruptData || s.code() == StatusCode::kUnsupportedFormat ||
         s.code() == StatusCode::kResourceExhausted;
}

}  // namespace headrace::fuzz
