// Retry policy for object-storage requests: what is retried, how long to wait, and the
// storage-wide budget that turns a dead endpoint into a failed run instead of a stall.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace headrace {

// Why a transfer ended without an HTTP response (or with an incomplete one).
enum class TransportError {
  kNone,          // a complete HTTP response arrived
  kConnect,       // could not connect (refused, unreachable, DNS)
  kTimeout,       // connect, low-speed or first-byte timeout
  kReset,         // the connection broke while sending or receiving
  kTruncated,     // fewer body bytes than Content-Length announced
  kBodyTooLarge,  // more body bytes than announced (or than the destination holds)
  kOverLimit,     // the body is (or is announced) larger than HttpRequest::max_body_bytes
  kRefused,       // HttpRequest::size_gate refused the body's size
  kCancelled,     // the storage is shutting down
  kOther,         // anything else (TLS failure, bad URL, ...): not retried
};
std::string_view TransportErrorName(TransportError e);

// Whether an attempt that ended this way is worth repeating: 500, 502, 503, 504 and 429
// (throttling), an S3 "SlowDown" or "RequestTimeout" error code whatever the status,
// and transport errors other than kOther / kCancelled / kBodyTooLarge / kOverLimit /
// kRefused. 403, 404 and other 4xx are final.
bool IsRetryable(TransportError transport, long http_status, std::string_view error_code);

struct RetryPolicy {
  int max_retries = 6;  // attempts = max_retries + 1
  std::chrono::milliseconds base{50};
  std::chrono::milliseconds max{5000};

  // Delay before retry `retry` (1 = the first retry): "full jitter", uniform in
  // [0, min(max, base * 2^(retry-1))], drawn from `random` (any 64-bit value).
  std::chrono::milliseconds Backoff(int retry, uint64_t random) const;
};

// Counts retries spent without a success in between, over every request of a storage.
// Thread-safe. Once more than `limit` are spent the endpoint is dead, for good: Dead()
// stays true and every later read fails at once.
class RetryBudget {
 public:
  explicit RetryBudget(int64_t limit) : limit_(limit) {}
  void OnSuccess() { consecutive_.store(0, std::memory_order_relaxed); }
  // Takes one retry; false (and the budget is dead) when none is left.
  bool TrySpend();
  bool Dead() const { return dead_.load(std::memory_order_acquire); }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  std::atomic<int64_t> consecutive_{0};
  std::atomic<bool> dead_{false};
};

}  // namespace headrace
