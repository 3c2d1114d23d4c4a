#include "headrace/io/object_storage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <thread>
#include <vector>

#include "headrace/io/loopback_server.h"

// Its own namespace: the folder's tests compile as one unity file (CMakeLists.txt).
namespace headrace::object_storage_test {
namespace {

Buffer Bytes(size_t n, uint8_t seed) {
  Buffer b = *Buffer::Allocate(n);
  for (size_t i = 0; i < n; ++i) b.mutable_data()[i] = static_cast<uint8_t>(seed + i * 13);
  return b;
}

bool Same(const Buffer& a, const Buffer& b) {
  return a.size() == b.size() && std::equal(a.data(), a.data() + a.size(), b.data());
}

EnvLookup NoEnv() {
  return [](const char*) -> std::optional<std::string> { return std::nullopt; };
}

StorageSpec Spec(const LoopbackServer& server) {
  StorageSpec spec;
  spec.endpoint = server.origin();
  spec.anonymous = true;
  spec.retry_base_ms = 1;
  spec.retry_max_ms = 5;
  return spec;
}

TEST(S3Storage, ReadsAnObjectPathStyle) {
  auto server = *LoopbackServer::Start();
  const Buffer object = Bytes(70000, 1);
  server->Put("/bkt/images/a%20b.jpg", object);
  auto s3 = *MakeS3Storage(Spec(*server), NoEnv());
  auto r = s3->Read("s3://bkt/images/a b.jpg");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(Same(*r, object));
  EXPECT_EQ(s3->stats().bytes_copied, 0);
}

TEST(S3Storage, LargeObjectIsReadAsParallelRangesIntoOneBuffer) {
  auto server = *LoopbackServer::Start();
  const Buffer object = Bytes(10500, 2);
  server->Put("/bkt/big", object);
  StorageSpec spec = Spec(*server);
  spec.part_bytes = 1000;
  auto s3 = *MakeS3Storage(spec, NoEnv());
  auto r = s3->Read("s3://bkt/big");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(Same(*r, object));
  EXPECT_EQ(server->stats().requests, 11);
  EXPECT_EQ(s3->stats().bytes_copied, 0);
}

TEST(S3Storage, EmptyObjectReadsAsAnEmptyBuffer) {
  auto server = *LoopbackServer::Start();
  server->Put("/bkt/empty", Buffer());
  auto s3 = *MakeS3Storage(Spec(*server), NoEnv());
  auto r = s3->Read("s3://bkt/empty");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), 0u);
}

TEST(S3Storage, MissingObjectIsNotFoundAndNotRetried) {
  auto server = *LoopbackServer::Start();
  auto s3 = *MakeS3Storage(Spec(*server), NoEnv());
  auto r = s3->Read("s3://bkt/nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("NoSuchKey"), std::string::npos);
  EXPECT_EQ(server->stats().requests, 1);
}

TEST(S3Storage, SlowDownIsRetriedUntilItPasses) {
  auto server = *LoopbackServer::Start();
  const Buffer object = Bytes(500, 3);
  server->Put("/bkt/o", object);
  server->SetFault("/bkt/o", LoopbackFault::kSlowDown, 3);
  auto s3 = *MakeS3Storage(Spec(*server), NoEnv());
  auto r = s3->Read("s3://bkt/o");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(Same(*r, object));
  const ObjectStoreStats stats = s3->stats();
  EXPECT_EQ(stats.retries, 3);
  EXPECT_EQ(stats.requests, 4);
  EXPECT_EQ(stats.throttles, 3);
  EXPECT_EQ(stats.retries_by_reason, (std::map<std::string, int64_t>{{"SlowDown", 3}}));
  EXPECT_EQ(stats.failed_reads, 0);
}

TEST(S3Storage, ExhaustedRetriesNameTheEndpointAndLastError) {
  auto server = *LoopbackServer::Start();
  server->Put("/bkt/o", Bytes(500, 3));
  server->SetFault("/bkt/o", LoopbackFault::kSlowDown);
  StorageSpec spec = Spec(*server);
  spec.max_retries = 2;
  auto s3 = *MakeS3Storage(spec, NoEnv());
  auto r = s3->Read("s3://bkt/o");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find(server->origin()), std::string::npos) << m;
  EXPECT_NE(m.find("3 attempts"), std::string::npos) << m;
  EXPECT_NE(m.find("SlowDown"), std::string::npos) << m;
}

TEST(S3Storage, TruncatedBodyIsANamedErrorAfterRetries) {
  auto server = *LoopbackServer::Start();
  server->Put("/bkt/o", Bytes(5000, 3));
  server->SetFault("/bkt/o", LoopbackFault::kTruncate);
  StorageSpec spec = Spec(*server);
  spec.max_retries = 1;
  auto s3 = *MakeS3Storage(spec, NoEnv());
  auto r = s3->Read("s3://bkt/o");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("truncated body"), std::string::npos)
      << r.status().ToString();
  const ObjectStoreStats stats = s3->stats();
  EXPECT_EQ(stats.retries_by_reason, (std::map<std::string, int64_t>{{"truncated", 1}}));
  EXPECT_EQ(stats.throttles, 0);
  EXPECT_EQ(stats.failed_reads, 1);
}

TEST(S3Storage, DeadEndpointSpendsTheBudgetThenFailsFast) {
  int port = 0;
  {
    auto server = *LoopbackServer::Start();
    port = server->port();
  }
  StorageSpec spec;
  spec.endpoint = "http://127.0.0.1:" + std::to_string(port);
  spec.anonymous = true;
  spec.retry_base_ms = 1;
  spec.retry_max_ms = 2;
  spec.max_retries = 100;
  spec.retry_budget = 5;
  auto s3 = *MakeS3Storage(spec, NoEnv());
  auto first = s3->Read("s3://bkt/o");
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(first.status().message().find(spec.endpoint), std::string::npos);
  EXPECT_NE(first.status().message().find("connect"), std::string::npos)
      << first.status().message();
  const int64_t requests = s3->stats().requests;
  auto second = s3->Read("s3://bkt/other");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s3->stats().requests, requests);  // failed at once
}

TEST(S3Storage, ManyConcurrentReadsEachCompleteOnce) {
  auto server = *LoopbackServer::Start(std::chrono::milliseconds(1));
  for (int i = 0; i < 50; ++i) server->Put("/bkt/o" + std::to_string(i), Bytes(3000 + i, i));
  server->SetFault("/bkt/o7", LoopbackFault::kSlowDown, 4);
  auto s3 = *MakeS3Storage(Spec(*server), NoEnv());
  constexpr int kN = 300;
  std::vector<std::atomic<int>> calls(kN);
  std::atomic<int> ok{0};
  std::atomic<int> left{kN};
  std::promise<void> all;
  for (int i = 0; i < kN; ++i) {
    s3->ReadAsync("s3://bkt/o" + std::to_string(i % 50), [&, i](Result<Buffer> r) {
      calls[i].fetch_add(1);
      if (r.ok() && r->size() == static_cast<size_t>(3000 + i % 50)) ok.fetch_add(1);
      if (left.fetch_sub(1) == 1) all.set_value();
    });
  }
  all.get_future().wait();
  EXPECT_EQ(ok.load(), kN);
  for (auto& c : calls) EXPECT_EQ(c.load(), 1);
}

TEST(S3Storage, DestructorCancelsPendingReads) {
  auto server = *LoopbackServer::Start();
  server->Put("/bkt/o", Bytes(10, 3));
  server->SetFault("/bkt/o", LoopbackFault::kHang);
  std::atomic<int> cancelled{0};
  {
    auto s3 = *MakeS3Storage(Spec(*server), NoEnv());
    for (int i = 0; i < 4; ++i) {
      s3->ReadAsync("s3://bkt/o", [&](Result<Buffer> r) {
        if (!r.ok() && r.status().code() == StatusCode::kCancelled) cancelled.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(cancelled.load(), 4);
}

// A reader that stops (its gate says the read is no longer wanted) ends a hung read and a
// read waiting out retry backoffs at once, while the storage lives on: a closing engine
// does not wait out first-byte timeouts and retries. Without it the hung read would end
// only by the 10-minute timeout (a timeout, not a cancellation), the throttled one by
// succeeding after its backoffs.
TEST(S3Storage, AReadNoLongerWantedEndsWithoutWaitingOutTimeoutsOrRetries) {
  auto server = *LoopbackServer::Start();
  server->Put("/bkt/hung", Bytes(10, 3));
  server->SetFault("/bkt/hung", LoopbackFault::kHang);
  server->Put("/bkt/throttled", Bytes(10, 4));
  server->SetFault("/bkt/throttled", LoopbackFault::kSlowDown, 3);
  StorageSpec spec = Spec(*server);
  spec.first_byte_timeout_ms = 600'000;
  spec.retry_base_ms = 600'000;
  spec.retry_max_ms = 600'000;
  auto s3 = *MakeS3Storage(spec, NoEnv());
  std::atomic<bool> wanted{true};
  std::atomic<int> asked{0};
  const ReadGate gate = [&](int64_t bytes) {
    if (bytes == kReadStillWanted) {
      asked.fetch_add(1);
      return wanted.load();
    }
    return true;
  };
  std::promise<Result<Buffer>> hung, throttled;
  s3->ReadAsyncGated("s3://bkt/hung", [&](Result<Buffer> r) { hung.set_value(std::move(r)); },
                     gate);
  s3->ReadAsyncGated("s3://bkt/throttled",
                     [&](Result<Buffer> r) { throttled.set_value(std::move(r)); }, gate);
  // Both requests sent, and the throttled one waiting out its first backoff (10 minutes):
  // its retry is counted when the 503 is in and the retry is scheduled.
  while (server->stats().requests < 2 || s3->stats().retries < 1) std::this_thread::yield();
  wanted = false;
  for (auto* p : {&hung, &throttled}) {
    Result<Buffer> r = p->get_future().get();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr("gave the read up"));
  }
  EXPECT_GT(asked.load(), 0);
  EXPECT_EQ(s3->stats().failed_reads, 0);  // a cancellation is not a failed read
  // The storage goes on serving.
  server->SetFault("/bkt/hung", LoopbackFault::kNone);
  EXPECT_TRUE(s3->Read("s3://bkt/hung").ok());
}

TEST(S3Storage, WritesAndReadsBack) {
  auto server = *LoopbackServer::Start();
  auto s3 = *MakeS3Storage(Spec(*server), NoEnv());
  const Buffer object = Bytes(4096, 5);
  std::promise<Status> p;
  s3->WriteAsync("s3://bkt/w/x.bin", object, [&p](Status s) { p.set_value(s); });
  ASSERT_TRUE(p.get_future().get().ok());
  auto r = s3->Read("s3://bkt/w/x.bin");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(Same(*r, object));
}

TEST(HttpStorage, ReadsTheUrlAsGiven) {
  auto server = *LoopbackServer::Start();
  const Buffer object = Bytes(1234, 6);
  server->Put("/data/x%20y.jpg", object);
  auto http = *MakeHttpStorage(Spec(*server));
  auto r = http->Read(server->origin() + "/data/x y.jpg");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(Same(*r, object));
  EXPECT_FALSE(http->List("s3://bkt/x").ok());
}

TEST(HttpStorage, ObjectOverMaxObjectBytesFailsBeforeItsBodyIsRead) {
  auto server = *LoopbackServer::Start();
  server->Put("/set/big.jpg", Bytes(5000, 1));
  StorageSpec spec = Spec(*server);
  spec.max_object_bytes = 4096;
  spec.part_bytes = 1000;  // the first part's Content-Range gives the size
  auto http = *MakeHttpStorage(spec);
  Result<Buffer> r = http->Read(server->origin() + "/set/big.jpg");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  for (const char* part : {"storage.max_object_bytes", "5000", "4096", "/set/big.jpg"}) {
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().ToString();
  }
  EXPECT_EQ(http->stats().bytes_received, 0);  // aborted at the headers
  EXPECT_EQ(http->stats().retries, 0);
}

TEST(HttpStorage, BodyWithoutLengthIsCutAsSoonAsItPassesMaxObjectBytes) {
  auto server = *LoopbackServer::Start();
  const Buffer small = Bytes(3000, 2);
  server->Put("/small", small);
  server->Put("/stream", Bytes(4 << 20, 3));
  server->SetFault("/small", LoopbackFault::kNoLength);
  server->SetFault("/stream", LoopbackFault::kNoLength);
  StorageSpec spec = Spec(*server);
  spec.max_object_bytes = 100000;
  auto http = *MakeHttpStorage(spec);
  Result<Buffer> ok = http->Read(server->origin() + "/small");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(Same(*ok, small));
  Result<Buffer> r = http->Read(server->origin() + "/stream");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find("storage.max_object_bytes"), std::string::npos);
  EXPECT_NE(r.status().message().find("not announced"), std::string::npos);
  EXPECT_LE(http->stats().bytes_received, 3000 + 100000);
  EXPECT_EQ(http->stats().retries, 0);
}

TEST(HttpStorage, SizeGateSeesTheSizeBeforeTheBodyAndMayRefuseIt) {
  auto server = *LoopbackServer::Start();
  const Buffer object = Bytes(70000, 4);
  server->Put("/o", object);
  auto http = *MakeHttpStorage(Spec(*server));
  std::vector<int64_t> asked;
  auto read = [&](bool admit) {
    std::promise<Result<Buffer>> promise;
    http->ReadAsyncGated(
        server->origin() + "/o",
        [&promise](Result<Buffer> r) { promise.set_value(std::move(r)); },
        [&asked, admit](int64_t bytes) {
          if (bytes == kReadStillWanted) return true;  // not a size: still wanted
          asked.push_back(bytes);
          return admit;
        });
    return promise.get_future().get();
  };
  Result<Buffer> admitted = read(true);
  ASSERT_TRUE(admitted.ok()) << admitted.status().ToString();
  EXPECT_TRUE(Same(*admitted, object));
  const int64_t received = http->stats().bytes_received;
  Result<Buffer> refused = read(false);
  EXPECT_EQ(refused.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(http->stats().failed_reads, 0);  // given up by the reader, not failed
  EXPECT_EQ(http->stats().bytes_received, received);  // nothing of the refused body
  EXPECT_EQ(asked, (std::vector<int64_t>{70000, 70000}));
}

TEST(OpenStorage, RoutesLocalAndObjectUrisThroughOneStorage) {
  auto server = *LoopbackServer::Start();
  const Buffer object = Bytes(100, 7);
  server->Put("/bkt/k", object);
  server->Put("/h/k", object);
  auto storage = OpenStorage(Spec(*server));
  auto s3 = storage->Read("s3://bkt/k");
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_TRUE(Same(*s3, object));
  auto http = storage->Read(server->origin() + "/h/k");
  ASSERT_TRUE(http.ok());
  auto local = storage->Read("/nonexistent/file");
  EXPECT_EQ(local.status().code(), StatusCode::kNotFound);

  // Stats: one entry per backend used, in scheme order; no URI, only the endpoint.
  const std::vector<StorageStats> stats = storage->Stats();
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].backend, "local");
  EXPECT_EQ(stats[0].requests, 1);
  EXPECT_EQ(stats[0].errors, 1);
  EXPECT_EQ(stats[1].backend, "s3");
  EXPECT_EQ(stats[1].endpoint, server->origin());
  EXPECT_EQ(stats[1].requests, 1);
  EXPECT_EQ(stats[1].bytes, 100);
  EXPECT_EQ(stats[1].errors, 0);
  EXPECT_EQ(stats[2].backend, "http");
  EXPECT_EQ(stats[2].requests, 1);
}

TEST(OpenStorage, ListsNoBackendBeforeItsFirstRead) {
  EXPECT_TRUE(OpenStorage(StorageSpec{})->Stats().empty());
}

TEST(OpenStorage, MissingCredentialsFailTheReadsThatNeedThem) {
  StorageSpec spec;
  spec.endpoint = "http://127.0.0.1:1";
  auto storage = OpenStorage(spec);
  // Only meaningful when the test environment holds no AWS credentials.
  if (std::getenv("AWS_ACCESS_KEY_ID") == nullptr && std::getenv("AWS_PROFILE") == nullptr &&
      std::getenv("AWS_SHARED_CREDENTIALS_FILE") == nullptr) {
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    auto r = storage->Read("s3://bkt/k");
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("no AWS credentials"), std::string::npos);
  }
}

// Blocks of a shard are fetched as ranges: one request per range, whatever part_bytes,
// into a buffer of the range's size, and the gate sees that size.
Result<Buffer> ReadRange(Storage& storage, const std::string& uri, int64_t offset,
                         int64_t length, int64_t* gated = nullptr) {
  std::promise<Result<Buffer>> promise;
  storage.ReadRangeAsyncGated(
      uri, offset, length, [&promise](Result<Buffer> r) { promise.set_value(std::move(r)); },
      [gated](int64_t bytes) {
        if (bytes == kReadStillWanted) return true;
        if (gated != nullptr) *gated = bytes;
        return true;
      });
  return promise.get_future().get();
}

TEST(S3Storage, RangedReadIsOneRequestOfTheRangeOnly) {
  auto server = *LoopbackServer::Start();
  const Buffer object = Bytes(10500, 3);
  server->Put("/bkt/shard.tar", object);
  StorageSpec spec = Spec(*server);
  spec.part_bytes = 1000;  // a whole-object read would take 11 requests
  auto s3 = *MakeS3Storage(spec, NoEnv());
  int64_t gated = -1;
  auto r = ReadRange(*s3, "s3://bkt/shard.tar", 3000, 2500, &gated);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(Same(*r, object.Slice(3000, 2500)));
  EXPECT_EQ(gated, 2500);
  EXPECT_EQ(server->stats().requests, 1);
  EXPECT_EQ(s3->stats().requests, 1);

  // Past the end: cut short; starting past it: kInvalidArgument.
  auto tail = ReadRange(*s3, "s3://bkt/shard.tar", 10000, 1000);
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  EXPECT_TRUE(Same(*tail, object.Slice(10000, 500)));
  auto rest = ReadRange(*s3, "s3://bkt/shard.tar", 9000, -1);
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  EXPECT_TRUE(Same(*rest, object.Slice(9000, 1500)));
  auto past = ReadRange(*s3, "s3://bkt/shard.tar", 20000, 10);
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument) << past.status().ToString();
  auto missing = ReadRange(*s3, "s3://bkt/none.tar", 0, 10);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(S3Storage, SizeIsOneRequestOfOneByte) {
  auto server = *LoopbackServer::Start();
  server->Put("/bkt/clip.mp4", Bytes(10500, 3));
  server->Put("/bkt/empty.mp4", Buffer());
  auto s3 = *MakeS3Storage(Spec(*server), NoEnv());
  auto size = s3->Size("s3://bkt/clip.mp4");
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, 10500);
  EXPECT_EQ(server->stats().requests, 1);
  EXPECT_LE(s3->Stats()[0].bytes, 1);
  auto empty = s3->Size("s3://bkt/empty.mp4");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(*empty, 0);
  EXPECT_EQ(s3->Size("s3://bkt/none.mp4").status().code(), StatusCode::kNotFound);
}

TEST(HttpStorage, SizeOfAServerThatIgnoresRangeIsItsBodys) {
  auto server = *LoopbackServer::Start();
  server->Put("/data/norange.mp4", Bytes(3000, 5));
  server->SetFault("/data/norange.mp4", LoopbackFault::kNoLength);
  auto http = *MakeHttpStorage(Spec(*server));
  auto size = http->Size(server->origin() + "/data/norange.mp4");
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, 3000);
}

TEST(HttpStorage, RangedReadSendsARangeHeader) {
  auto server = *LoopbackServer::Start();
  const Buffer object = Bytes(5000, 4);
  server->Put("/data/shard.tar", object);
  auto http = *MakeHttpStorage(Spec(*server));
  auto r = ReadRange(*http, server->origin() + "/data/shard.tar", 100, 400);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(Same(*r, object.Slice(100, 400)));
  EXPECT_EQ(server->stats().requests, 1);
}

TEST(HttpStorage, RangedReadOfAServerThatIgnoresRangeSlicesTheWholeObject) {
  auto server = *LoopbackServer::Start();
  const Buffer object = Bytes(3000, 5);
  server->Put("/data/norange.tar", object);
  server->SetFault("/data/norange.tar", LoopbackFault::kNoLength);
  auto http = *MakeHttpStorage(Spec(*server));
  auto r = ReadRange(*http, server->origin() + "/data/norange.tar", 1000, 200);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(Same(*r, object.Slice(1000, 200)));
}

TEST(OpenStorage, RouterForwardsRangedReads) {
  auto server = *LoopbackServer::Start();
  const Buffer object = Bytes(4000, 6);
  server->Put("/bkt/s.tar", object);
  auto storage = OpenStorage(Spec(*server));
  auto r = ReadRange(*storage, "s3://bkt/s.tar", 10, 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(Same(*r, object.Slice(10, 20)));
  EXPECT_EQ(server->stats().requests, 1);
  EXPECT_EQ(*storage->Size("s3://bkt/s.tar"), 4000);
  EXPECT_EQ(server->stats().requests, 2);
}

}  // namespace
}  // namespace headrace::object_storage_test
