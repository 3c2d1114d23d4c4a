#include "headrace/exec/trace.h"

#include <gtest/gtest.h>

#include <thread>

namespace headrace {
namespace {

TEST(TraceRecorder, WritesSpansAsyncEventsAndThreadNames) {
  TraceRecorder trace;
  const auto t0 = Clock::now();
  trace.NameThread("consumer");
  trace.Span("wait", "consumer", t0, t0 + std::chrono::microseconds(1500));
  trace.AsyncBegin("read", 7, t0);
  std::thread([&] {
    trace.Span("image.decode", "cpu", t0, t0 + std::chrono::milliseconds(2), 7);
  }).join();
  trace.AsyncEnd("read", 7, t0 + std::chrono::microseconds(300));
  const std::string json = trace.ToJson();
  EXPECT_NE(json.find(R"("ph":"M","name":"thread_name")"), std::string::npos);
  EXPECT_NE(json.find(R"("args":{"name":"consumer"})"), std::string::npos);
  EXPECT_NE(json.find(R"("name":"wait")"), std::string::npos);
  EXPECT_NE(json.find(R"("dur":1500)"), std::string::npos);
  EXPECT_NE(json.find(R"("ph":"b","name":"read")"), std::string::npos);
  EXPECT_NE(json.find(R"("args":{"sample":7})"), std::string::npos);
  EXPECT_EQ(trace.dropped(), 0u);
}

TEST(TraceRecorder, DropsEventsPastItsCapacityAndCountsThem) {
  TraceRecorder trace(/*max_events=*/2);
  const auto t = Clock::now();
  for (int i = 0; i < 5; ++i) trace.Span("x", "cpu", t, t);
  EXPECT_EQ(trace.dropped(), 3u);
  EXPECT_NE(trace.ToJson().find(R"("dropped_events":3)"), std::string::npos);
}

}  // namespace
}  // namespace headrace
