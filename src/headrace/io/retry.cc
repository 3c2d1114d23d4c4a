#include "headrace/io/retry.h"

#include <algorithm>

namespace headrace {

std::string_view TransportErrorName(TransportError e) {
  switch (e) {
    case TransportError::kNone: return "none";
    case TransportError::kConnect: return "connect failed";
    case TransportError::kTimeout: return "timeout";
    case TransportError::kReset: return "connection reset";
    case TransportError::kTruncated: return "truncated body";
    case TransportError::kBodyTooLarge: return "body larger than announced";
    case TransportError::kOverLimit: return "body over the size limit";
    case TransportError::kRefused: return "body size refused";
    case TransportError::kCancelled: return "cancelled";
    case TransportError::kOther: return "transfer failed";
  }
  return "unknown";
}

bool IsRetryable(TransportError transport, long http_status, std::string_view error_code) {
  switch (transport) {
    case TransportError::kConnect:
    case TransportError::kTimeout:
    case TransportError::kReset:
    case TransportError::kTruncated: return true;
    case TransportError::kBodyTooLarge:
    case TransportError::kOverLimit:
    case TransportError::kRefused:
    case TransportError::kCancelled:
    case TransportError::kOther: return false;
    case TransportError::kNone: break;
  }
  if (error_code == "SlowDown" || error_code == "RequestTimeout" || error_code == "InternalError" ||
      error_code == "ServiceUnavailable") {
    return true;
  }
  return http_status == 500 || http_status == 502 || http_status == 503 || http_status == 504 ||
         http_status == 429;
}

std::chrono::milliseconds RetryPolicy::Backoff(int retry, uint64_t random) const {
  const int shift = std::clamp(retry - 1, 0, 30);
  const int64_t cap = std::min<int64_t>(max.count(), base.count() << shift);
  if (cap <= 0) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(static_cast<int64_t>(random % static_cast<uint64_t>(cap + 1)));
}

bool RetryBudget::TrySpend() {
  if (dead_.load(std::memory_order_acquire)) return false;
  if (consecutive_.fetch_add(1, std::memory_order_relaxed) + 1 > limit_) {
    dead_.store(true, std::memory_order_release);
    return false;
  }
  return true;
}

}  // namespace headrace
