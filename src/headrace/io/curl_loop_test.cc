#include "headrace/io/curl_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include "headrace/io/loopback_server.h"

namespace headrace {
namespace {

Buffer Bytes(size_t n, uint8_t seed) {
  Buffer b = *Buffer::Allocate(n);
  for (size_t i = 0; i < n; ++i) b.mutable_data()[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

bool Same(const Buffer& a, const Buffer& b) {
  return a.size() == b.size() && std::equal(a.data(), a.data() + a.size(), b.data());
}

HttpResponse Fetch(CurlLoop& loop, HttpRequest req) {
  std::promise<HttpResponse> p;
  auto f = p.get_future();
  loop.Submit(std::move(req), [&p](HttpResponse r) { p.set_value(std::move(r)); });
  return f.get();
}

TEST(CurlLoop, GetAllocatesTheBodyFromContentLength) {
  auto server = *LoopbackServer::Start();
  const Buffer object = Bytes(100000, 3);
  server->Put("/o", object);
  auto loop = *CurlLoop::Start({});
  HttpRequest req;
  req.url = server->origin() + "/o";
  HttpResponse r = Fetch(*loop, req);
  EXPECT_EQ(r.error, TransportError::kNone) << r.error_text;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_length, 100000);
  EXPECT_TRUE(Same(r.body, object));
  EXPECT_EQ(r.bytes_copied, 0);
}

TEST(CurlLoop, RangedResponseLandsAtItsOffsetInABufferOfTheTotalSize) {
  auto server = *LoopbackServer::Start();
  const Buffer object = Bytes(5000, 1);
  server->Put("/o", object);
  auto loop = *CurlLoop::Start({});
  HttpRequest req;
  req.url = server->origin() + "/o";
  req.headers = {"Range: bytes=1000-1999"};
  HttpResponse r = Fetch(*loop, req);
  ASSERT_EQ(r.status, 206);
  EXPECT_EQ(r.range_total, 5000);
  EXPECT_EQ(r.body.size(), 5000u);
  EXPECT_EQ(r.body_offset, 1000u);
  EXPECT_EQ(r.received, 1000u);
  EXPECT_TRUE(std::equal(object.data() + 1000, object.data() + 2000, r.body.data() + 1000));
}

TEST(CurlLoop, ManyTransfersInFlightCompleteExactlyOnceOverReusedConnections) {
  auto server = *LoopbackServer::Start(std::chrono::milliseconds(2));
  for (int i = 0; i < 16; ++i) server->Put("/o" + std::to_string(i), Bytes(2000 + i, i));
  CurlLoopOptions options;
  options.max_host_connections = 8;
  auto loop = *CurlLoop::Start(options);
  constexpr int kN = 400;
  std::vector<std::atomic<int>> calls(kN);
  std::atomic<int> ok{0};
  std::promise<void> all;
  std::atomic<int> left{kN};
  for (int i = 0; i < kN; ++i) {
    HttpRequest req;
    req.url = server->origin() + "/o" + std::to_string(i % 16);
    loop->Submit(std::move(req), [&, i](HttpResponse r) {
      calls[i].fetch_add(1);
      if (r.status == 200 && r.body.size() == static_cast<size_t>(2000 + i % 16)) ok.fetch_add(1);
      if (left.fetch_sub(1) == 1) all.set_value();
    });
  }
  all.get_future().wait();
  EXPECT_EQ(ok.load(), kN);
  for (auto& c : calls) EXPECT_EQ(c.load(), 1);
  // 400 requests over at most 8 kept-alive connections.
  EXPECT_LE(server->stats().connections, 8);
  EXPECT_LE(loop->stats().connections, 8);
}

TEST(CurlLoop, TruncatedBodyIsReportedAsSuch) {
  auto server = *LoopbackServer::Start();
  server->Put("/o", Bytes(10000, 2));
  server->SetFault("/o", LoopbackFault::kTruncate);
  auto loop = *CurlLoop::Start({});
  HttpRequest req;
  req.url = server->origin() + "/o";
  HttpResponse r = Fetch(*loop, req);
  EXPECT_EQ(r.error, TransportError::kTruncated);
  EXPECT_NE(r.error_text.find("of 10000 bytes"), std::string::npos) << r.error_text;
}

TEST(CurlLoop, FirstByteTimeoutEndsAHungRequest) {
  auto server = *LoopbackServer::Start();
  server->Put("/o", Bytes(10, 2));
  server->SetFault("/o", LoopbackFault::kHang);
  CurlLoopOptions o;
  o.first_byte_timeout_ms = 100;
  auto loop = *CurlLoop::Start(o);
  HttpRequest req;
  req.url = server->origin() + "/o";
  HttpResponse r = Fetch(*loop, req);
  EXPECT_EQ(r.error, TransportError::kTimeout);
  EXPECT_NE(r.error_text.find("first-byte"), std::string::npos);
}

TEST(CurlLoop, ConnectionRefusedIsAConnectError) {
  int port = 0;
  {
    auto server = *LoopbackServer::Start();
    port = server->port();
  }
  auto loop = *CurlLoop::Start({});
  HttpRequest req;
  req.url = "http://127.0.0.1:" + std::to_string(port) + "/o";
  EXPECT_EQ(Fetch(*loop, req).error, TransportError::kConnect);
}

TEST(CurlLoop, ErrorBodiesAreKeptForTheCaller) {
  auto server = *LoopbackServer::Start();
  auto loop = *CurlLoop::Start({});
  HttpRequest req;
  req.url = server->origin() + "/missing";
  HttpResponse r = Fetch(*loop, req);
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.error_body.find("NoSuchKey"), std::string::npos);
  EXPECT_TRUE(r.body.empty());
}

TEST(CurlLoop, PutSendsTheBody) {
  auto server = *LoopbackServer::Start();
  auto loop = *CurlLoop::Start({});
  HttpRequest put;
  put.method = "PUT";
  put.url = server->origin() + "/new";
  put.body = Bytes(3000, 9);
  EXPECT_EQ(Fetch(*loop, put).status, 200);
  HttpRequest get;
  get.url = server->origin() + "/new";
  EXPECT_TRUE(Same(Fetch(*loop, get).body, put.body));
}

TEST(CurlLoop, DestructorCancelsRunningAndDelayedTransfers) {
  auto server = *LoopbackServer::Start();
  server->Put("/o", Bytes(10, 2));
  server->SetFault("/o", LoopbackFault::kHang);
  std::atomic<int> cancelled{0};
  std::promise<void> started;
  {
    auto loop = *CurlLoop::Start({});
    for (int i = 0; i < 8; ++i) {
      HttpRequest req;
      req.url = server->origin() + "/o";
      loop->Submit(
          std::move(req),
          [&](HttpResponse r) {
            if (r.error == TransportError::kCancelled) cancelled.fetch_add(1);
          },
          std::chrono::milliseconds(i % 2 == 0 ? 0 : 60000));
    }
  }
  EXPECT_EQ(cancelled.load(), 8);
}

TEST(CurlLoop, ARequestNoLongerWantedEndsWhileTheLoopGoesOn) {
  auto server = *LoopbackServer::Start();
  server->Put("/hung", Bytes(10, 2));
  server->SetFault("/hung", LoopbackFault::kHang);
  server->Put("/ok", Bytes(10, 3));
  CurlLoopOptions o;
  o.first_byte_timeout_ms = 600'000;  // without `wanted`, the hung one would end by this
  auto loop = *CurlLoop::Start(o);
  std::atomic<bool> wanted{true};
  std::promise<HttpResponse> running, delayed;
  for (auto [promise, delay] : {std::pair{&running, std::chrono::milliseconds(0)},
                                std::pair{&delayed, std::chrono::milliseconds(600'000)}}) {
    HttpRequest req;
    req.url = server->origin() + "/hung";
    req.wanted = [&wanted] { return wanted.load(); };
    loop->Submit(
        std::move(req), [promise](HttpResponse r) { promise->set_value(std::move(r)); }, delay);
  }
  while (server->stats().requests < 1) std::this_thread::yield();  // the first one runs
  wanted = false;
  for (auto* p : {&running, &delayed}) {
    HttpResponse r = p->get_future().get();
    EXPECT_EQ(r.error, TransportError::kCancelled);
    EXPECT_EQ(r.error_text, "the reader gave the read up");
  }
  EXPECT_EQ(server->stats().requests, 1);  // the delayed one never started
  // The loop goes on: a request without `wanted` is served.
  HttpRequest ok;
  ok.url = server->origin() + "/ok";
  EXPECT_EQ(Fetch(*loop, ok).status, 200);
}

}  // namespace
}  // namespace headrace
