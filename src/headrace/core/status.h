// Status and Result<T>: the engine's only error channel.
//
// Third-party exceptions and C error codes are converted to a Status once, at the
// wrapper that calls the library. A Status is cheap when ok (no allocation).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace headrace {

// What went wrong. Per-sample codes double as the error "kind" in reports
// (see StatusCodeName), so each names one cause a user can act on.
enum class StatusCode {
  kOk = 0,
  kCancelled,          // the run was stopped; not an error of the data
  kInvalidArgument,    // a configuration or API argument is wrong
  kNotFound,           // a file or object does not exist
  kIoError,            // a read failed for another reason (permissions, device, network)
  kCorruptData,        // bytes that do not decode: truncated, bad checksum, zero-byte
  kUnsupportedFormat,  // bytes of a format no decoder here handles
  kPathEscape,         // a media path that leaves the dataset root
  kPixelLimit,         // an image whose header declares more pixels than max_pixels
  kBadRecord,          // a manifest line that is not valid JSON or has the wrong shape
  kMissingField,       // a manifest record without a required field
  kTokenizeError,      // the tokenizer rejected the text
  kUserFunctionError,  // a user-supplied (e.g. Python) function raised
  kResourceExhausted,  // a budget (memory, errors, retries) was exceeded
  kShardError,         // a whole shard or file of the source that cannot be read (its
                       // index or footer is damaged or lies): skipped, counted once
  kPackSkipped,        // a sample longer than batch.pack.seq_len (or batch.max_tokens) left
                       // out by the packer (pack.overflow: skip): data lost, counted
  kPackTruncated,      // a sample cut to batch.pack.seq_len (or batch.max_tokens) by the
                       // packer (pack.overflow: truncate): delivered, its tail lost, counted
  kInternal,           // a bug: an invariant of the engine does not hold
};

// snake_case name of a code, used as the error kind in reports ("corrupt_data").
std::string_view StatusCodeName(StatusCode code);
// The code StatusCodeName names `name`; nullopt for a name it gives no code.
std::optional<StatusCode> StatusCodeNamed(std::string_view name);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status CorruptData(std::string m) { return {StatusCode::kCorruptData, std::move(m)}; }
  static Status UnsupportedFormat(std::string m) {
    return {StatusCode::kUnsupportedFormat, std::move(m)};
  }
  static Status PathEscape(std::string m) { return {StatusCode::kPathEscape, std::move(m)}; }
  static Status PixelLimit(std::string m) { return {StatusCode::kPixelLimit, std::move(m)}; }
  static Status BadRecord(std::string m) { return {StatusCode::kBadRecord, std::move(m)}; }
  static Status MissingField(std::string m) { return {StatusCode::kMissingField, std::move(m)}; }
  static Status TokenizeError(std::string m) { return {StatusCode::kTokenizeError, std::move(m)}; }
  static Status UserFunctionError(std::string m) {
    return {StatusCode::kUserFunctionError, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status ShardError(std::string m) { return {StatusCode::kShardError, std::move(m)}; }
  static Status PackSkipped(std::string m) { return {StatusCode::kPackSkipped, std::move(m)}; }
  static Status PackTruncated(std::string m) {
    return {StatusCode::kPackTruncated, std::move(m)};
  }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;
  // "corrupt_data: JPEG header truncated"
  std::string ToString() const;
  // The same status with "context: " before its message.
  Status WithContext(std::string_view context) const;

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  // shared so copies are cheap; never mutated after construction.
  std::shared_ptr<const State> state_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status::Internal("Result constructed from an ok Status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // Precondition for the accessors: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace headrace

#define HR_CONCAT_INNER_(a, b) a##b
#define HR_CONCAT_(a, b) HR_CONCAT_INNER_(a, b)

#define HR_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::headrace::Status hr_status_ = (expr);  \
    if (!hr_status_.ok()) return hr_status_; \
  } while (false)

#define HR_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#define HR_ASSIGN_OR_RETURN(lhs, expr) \
  HR_ASSIGN_OR_RETURN_IMPL_(HR_CONCAT_(hr_result_, __LINE__), lhs, expr)
