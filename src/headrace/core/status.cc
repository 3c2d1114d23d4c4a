#include "headrace/core/status.h"

namespace headrace {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kIoError: return "io_error";
    case StatusCode::kCorruptData: return "corrupt_data";
    case StatusCode::kUnsupportedFormat: return "unsupported_format";
    case StatusCode::kPathEscape: return "path_escape";
    case StatusCode::kPixelLimit: return "pixel_limit";
    case StatusCode::kBadRecord: return "bad_record";
    case StatusCode::kMissingField: return "missing_field";
    case StatusCode::kTokenizeError: return "tokenize_error";
    case StatusCode::kUserFunctionError: return "user_function_error";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kShardError: return "shard_error";
    case StatusCode::kPackSkipped: return "pack_skipped";
    case StatusCode::kPackTruncated: return "pack_truncated";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::optional<StatusCode> StatusCodeNamed(std::string_view name) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    if (StatusCodeName(static_cast<StatusCode>(c)) == name) return static_cast<StatusCode>(c);
  }
  return std::nullopt;
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) {
    state_ = std::make_shared<const State>(State{code, std::move(message)});
  }
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(code()));
  out += ": ";
  out += message();
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message();
  return Status(code(), std::move(m));
}

}  // namespace headrace
