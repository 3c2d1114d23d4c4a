#include "headrace/io/retry.h"

#include <gtest/gtest.h>

namespace headrace {
namespace {

TEST(RetryPolicy, RetriesServerErrorsThrottlingAndTransportFailures) {
  for (long status : {500L, 502L, 503L, 504L, 429L}) {
    EXPECT_TRUE(IsRetryable(TransportError::kNone, status, "")) << status;
  }
  EXPECT_TRUE(IsRetryable(TransportError::kNone, 503, "SlowDown"));
  EXPECT_TRUE(IsRetryable(TransportError::kNone, 400, "RequestTimeout"));
  for (auto e : {TransportError::kConnect, TransportError::kTimeout, TransportError::kReset,
                 TransportError::kTruncated}) {
    EXPECT_TRUE(IsRetryable(e, 0, "")) << TransportErrorName(e);
  }
}

TEST(RetryPolicy, NeverRetriesClientErrors) {
  for (long status : {200L, 206L, 400L, 401L, 403L, 404L, 409L, 412L, 416L}) {
    EXPECT_FALSE(IsRetryable(TransportError::kNone, status, "")) << status;
  }
  EXPECT_FALSE(IsRetryable(TransportError::kNone, 403, "SignatureDoesNotMatch"));
  EXPECT_FALSE(IsRetryable(TransportError::kNone, 404, "NoSuchKey"));
  EXPECT_FALSE(IsRetryable(TransportError::kOther, 0, ""));
  EXPECT_FALSE(IsRetryable(TransportError::kCancelled, 0, ""));
  EXPECT_FALSE(IsRetryable(TransportError::kBodyTooLarge, 0, ""));
  EXPECT_FALSE(IsRetryable(TransportError::kOverLimit, 0, ""));
  EXPECT_FALSE(IsRetryable(TransportError::kRefused, 0, ""));
}

TEST(RetryPolicy, BackoffIsJitteredBelowAnExponentialCap) {
  RetryPolicy p{6, std::chrono::milliseconds(50), std::chrono::milliseconds(1000)};
  for (uint64_t r = 0; r < 2000; r += 7) {
    EXPECT_LE(p.Backoff(1, r).count(), 50);
    EXPECT_LE(p.Backoff(3, r).count(), 200);
    EXPECT_LE(p.Backoff(10, r).count(), 1000);
  }
  // Full jitter spans the range: both ends are reachable.
  EXPECT_EQ(p.Backoff(3, 0).count(), 0);
  EXPECT_EQ(p.Backoff(3, 200).count(), 200);
  EXPECT_EQ(p.Backoff(40, 1000).count(), 1000);  // no overflow at large retry numbers
}

TEST(RetryBudget, SuccessRefillsAndExhaustionIsSticky) {
  RetryBudget b(3);
  EXPECT_TRUE(b.TrySpend());
  EXPECT_TRUE(b.TrySpend());
  b.OnSuccess();
  EXPECT_TRUE(b.TrySpend());
  EXPECT_TRUE(b.TrySpend());
  EXPECT_TRUE(b.TrySpend());
  EXPECT_FALSE(b.TrySpend());
  EXPECT_TRUE(b.Dead());
  b.OnSuccess();
  EXPECT_FALSE(b.TrySpend());
}

}  // namespace
}  // namespace headrace
