#include "headrace/exec/trace.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
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

TEST(TraceRecorder, SpanNamesOutliveTheStringsTheyCameFrom) {
  // An op's name can be a member string (a list's ops: "images[*]: image.decode, ..."),
  // and the trace is written after the ops are gone; a view need not end in a NUL.
  TraceRecorder trace;
  const auto t = Clock::now();
  {
    auto name = std::make_unique<std::string>("images[*]: image.decode, image.smart_resize");
    trace.Span(*name, "cpu", t, t, 1);
    trace.Span(std::string_view(*name).substr(0, 9), "cpu", t, t, 2);
    name->assign(name->size(), '\x8c');  // what a freed or reused string may hold
  }
  const std::string json = trace.ToJson();
  EXPECT_NE(json.find(R"("name":"images[*]: image.decode, image.smart_resize")"),
            std::string::npos) << json;
  EXPECT_NE(json.find(R"("name":"images[*]")"), std::string::npos) << json;
  EXPECT_EQ(json.find('\x8c'), std::string::npos);
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
