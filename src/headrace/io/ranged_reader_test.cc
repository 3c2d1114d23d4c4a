#include "headrace/io/ranged_reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <latch>
#include <thread>
#include <vector>

#include "headrace/io/loopback_server.h"
#include "headrace/io/object_storage.h"

// Its own namespace: the folder's tests compile as one unity file (CMakeLists.txt).
namespace headrace::ranged_reader_test {
namespace {

Buffer Pattern(size_t n) {
  Buffer b = *Buffer::Allocate(n);
  for (size_t i = 0; i < n; ++i) b.mutable_data()[i] = static_cast<uint8_t>(i * 7 + i / 251);
  return b;
}

bool SameAs(const Buffer& got, const Buffer& object, int64_t offset) {
  return static_cast<int64_t>(got.size()) <= static_cast<int64_t>(object.size()) - offset &&
         std::equal(got.data(), got.data() + got.size(), object.data() + offset);
}

struct Served {
  std::unique_ptr<LoopbackServer> server;
  std::unique_ptr<Storage> s3;
  Buffer object;
};

Served Serve(size_t bytes) {
  Served s;
  s.server = *LoopbackServer::Start();
  s.object = Pattern(bytes);
  s.server->Put("/bkt/clip.mp4", s.object);
  StorageSpec spec;
  spec.endpoint = s.server->origin();
  spec.anonymous = true;
  spec.retry_base_ms = 1;
  spec.retry_max_ms = 5;
  s.s3 = *MakeS3Storage(spec, [](const char*) -> std::optional<std::string> {
    return std::nullopt;
  });
  return s;
}

TEST(RangedReader, ReadsThePrefetchedRangesOnceEachAndOnlyThem) {
  Served s = Serve(1 << 20);
  auto reader = *OpenRangedReader(*s.s3, "s3://bkt/clip.mp4",
                                  {.head_bytes = 4096, .read_ahead = 8192});
  EXPECT_EQ(reader->size(), 1 << 20);
  // The head came with the size.
  auto head = reader->Read(100, 200);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->size(), 200u);
  EXPECT_TRUE(SameAs(*head, s.object, 100));
  EXPECT_EQ(reader->stats().requests, 1);

  // Two stretches, the first overlapping the head: only what is not held is read.
  const MediaReader::Range plan[] = {{2048, 10000}, {500000, 30000}};
  reader->Prefetch(plan);
  EXPECT_EQ(reader->stats().requests, 3);
  auto mid = reader->ReadExact(3000, 5000);  // spans the head and the next range: copied
  ASSERT_TRUE(mid.ok()) << mid.status().ToString();
  EXPECT_EQ(mid->size(), 5000u);
  EXPECT_TRUE(SameAs(*mid, s.object, 3000));
  auto far = reader->Read(510000, 100000);  // up to the range's end
  ASSERT_TRUE(far.ok());
  EXPECT_EQ(far->size(), 20000u);
  EXPECT_TRUE(SameAs(*far, s.object, 510000));
  EXPECT_EQ(reader->stats().unplanned, 0);
  EXPECT_EQ(reader->stats().bytes, 4096 + (12048 - 4096) + 30000);  // the three, in

  // A byte no plan covered: read then, read_ahead long, and stopped where a range starts.
  auto before = reader->Read(495000, 10);
  ASSERT_TRUE(before.ok());
  EXPECT_TRUE(SameAs(*before, s.object, 495000));
  auto stats = reader->stats();
  EXPECT_EQ(stats.unplanned, 1);
  EXPECT_EQ(stats.bytes, 4096 + 7952 + 30000 + 5000);
  // At and past the end: nothing.
  EXPECT_EQ(reader->Read(1 << 20, 10)->size(), 0u);
  // Every range was one request to the server, besides the size.
  EXPECT_EQ(s.server->stats().requests, 1 + stats.requests);
}

// Top-level ISO BMFF boxes: each `size` bytes, its type, the rest filled.
Buffer Boxes(std::initializer_list<std::pair<const char*, uint32_t>> boxes) {
  size_t total = 0;
  for (const auto& b : boxes) total += b.second;
  Buffer out = *Buffer::Allocate(total);
  uint8_t* p = out.mutable_data();
  for (const auto& [type, size] : boxes) {
    const uint8_t header[8] = {static_cast<uint8_t>(size >> 24), static_cast<uint8_t>(size >> 16),
                               static_cast<uint8_t>(size >> 8), static_cast<uint8_t>(size),
                               static_cast<uint8_t>(type[0]), static_cast<uint8_t>(type[1]),
                               static_cast<uint8_t>(type[2]), static_cast<uint8_t>(type[3])};
    std::memcpy(p, header, 8);
    std::memset(p + 8, 0x5A, size - 8);
    p += size;
  }
  return out;
}

// An MP4 written without faststart has its index after the media data: the reader reads
// it with the head, before anyone asks; with faststart (the index in the head), nothing.
TEST(RangedReader, AnIndexAfterTheMediaDataIsReadWhenTheReaderOpens) {
  auto server = *LoopbackServer::Start();
  server->Put("/bkt/end.mp4", Boxes({{"ftyp", 32}, {"mdat", 500000}, {"moov", 30000}}));
  server->Put("/bkt/fast.mp4", Boxes({{"ftyp", 32}, {"moov", 3000}, {"mdat", 500000}}));
  StorageSpec spec;
  spec.endpoint = server->origin();
  spec.anonymous = true;
  auto s3 = *MakeS3Storage(spec, [](const char*) -> std::optional<std::string> {
    return std::nullopt;
  });
  auto end = *OpenRangedReader(*s3, "s3://bkt/end.mp4", {.head_bytes = 4096});
  EXPECT_EQ(end->stats().requests, 2);  // the head; the index (and 16 KiB before it)
  EXPECT_EQ(end->stats().bytes, 4096 + 30000 + (16 << 10));
  auto moov = end->ReadExact(500032, 30000);
  ASSERT_TRUE(moov.ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(moov->data()) + 4, 4), "moov");
  EXPECT_EQ(end->stats().requests, 2);
  auto fast = *OpenRangedReader(*s3, "s3://bkt/fast.mp4", {.head_bytes = 4096});
  EXPECT_EQ(fast->stats().requests, 1);
  // Whatever follows the media data, the reader reads at most 1 MiB of it at open.
  server->Put("/bkt/junk.mp4", Boxes({{"ftyp", 32}, {"mdat", 100000}, {"free", 3u << 20}}));
  auto junk = *OpenRangedReader(*s3, "s3://bkt/junk.mp4", {.head_bytes = 4096});
  EXPECT_EQ(junk->stats().requests, 2);
  EXPECT_EQ(junk->stats().bytes, 4096 + (16 << 10) + (1 << 20));
}

TEST(RangedReader, AnObjectShorterThanItsHeadIsReadByTheHeadAlone) {
  Served s = Serve(1000);
  auto reader = *OpenRangedReader(*s.s3, "s3://bkt/clip.mp4", {.head_bytes = 4096});
  EXPECT_EQ(reader->size(), 1000);
  auto all = reader->ReadExact(0, 5000);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->size(), 1000u);
  EXPECT_TRUE(SameAs(*all, s.object, 0));
  EXPECT_EQ(reader->stats().requests, 1);
  EXPECT_EQ(reader->stats().bytes, 1000);  // what came, not the 4096 asked
}

TEST(RangedReader, AMissingObjectFailsToOpenAndAFailedRangeFailsItsRead) {
  Served s = Serve(1000);
  auto missing = OpenRangedReader(*s.s3, "s3://bkt/none.mp4");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();

  auto local = MakeLocalStorage();
  EXPECT_EQ(OpenRangedReader(*local, "/nonexistent/clip.mp4").status().code(),
            StatusCode::kNotFound);
  // The store fails after the reader opened: the reads after fail, named.
  auto reader = *OpenRangedReader(*s.s3, "s3://bkt/clip.mp4", {.head_bytes = 100});
  s.server->SetFault("/bkt/clip.mp4", LoopbackFault::kTruncate);
  auto failed = reader->Read(500, 10);
  EXPECT_EQ(failed.status().code(), StatusCode::kIoError) << failed.status().ToString();
  EXPECT_NE(failed.status().message().find("clip.mp4"), std::string::npos);
}

// The storage contract lets a read that fails before it starts complete on the caller's
// thread: the reader issues its reads with its lock released.
class FailsInline final : public Storage {
 public:
  void ReadAsync(std::string, ReadCallback done) override {
    done(Status::IoError("refused at once"));
  }
  void ReadRangeAsyncGated(std::string, int64_t, int64_t, ReadCallback done, ReadGate) override {
    done(Status::IoError("refused at once"));
  }
  void SizeAsync(std::string, SizeCallback done, ReadGate) override { done(int64_t{1000}); }
  std::string_view name() const override { return "inline"; }
};

TEST(RangedReader, AReadThatFailsOnTheCallersThreadFailsItsRead) {
  FailsInline storage;
  auto reader = *OpenRangedReader(storage, "x://clip.mp4", {.head_bytes = 100});
  EXPECT_EQ(reader->Read(0, 10).status().code(), StatusCode::kIoError);
  const MediaReader::Range plan[] = {{200, 100}};
  reader->Prefetch(plan);
  EXPECT_EQ(reader->Read(250, 10).status().code(), StatusCode::kIoError);
  EXPECT_EQ(reader->Read(700, 10).status().code(), StatusCode::kIoError);  // unplanned
  EXPECT_EQ(reader->stats().requests, 3);
}

// A run that stops gives up a reader's requests in flight, the size's too: a hung store
// does not hold the CPU thread that waits for it.
TEST(RangedReader, AStoppedRunEndsItsRequestsOnAHungStore) {
  Served s = Serve(1000);
  s.server->SetFault("/bkt/clip.mp4", LoopbackFault::kHang);
  std::stop_source stop;
  Result<std::shared_ptr<MediaReader>> reader = Status::Internal("not run");
  std::thread opener([&] {
    reader = OpenRangedReader(*s.s3, "s3://bkt/clip.mp4", {.stop = stop.get_token()});
  });
  // Both of its requests (the size, the head) reached the server, which holds them.
  while (s.server->stats().requests < 2) std::this_thread::yield();
  stop.request_stop();
  opener.join();
  EXPECT_EQ(reader.status().code(), StatusCode::kCancelled) << reader.status().ToString();
}

TEST(RangedReader, ThreadsWaitingOnOneRangeAllGetItsBytes) {
  Served s = Serve(1 << 16);
  s.server->SetLatency(std::chrono::milliseconds(20));
  auto reader = *OpenRangedReader(*s.s3, "s3://bkt/clip.mp4", {.head_bytes = 16});
  const MediaReader::Range plan[] = {{1000, 40000}};
  reader->Prefetch(plan);
  std::latch start(4);
  std::vector<std::thread> threads;
  std::vector<char> ok(4, 0);  // not vector<bool>: its bits share bytes across threads
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      auto got = reader->Read(1000 + t * 10000, 10000);
      ok[t] = got.ok() && got->size() == 10000 && SameAs(*got, s.object, 1000 + t * 10000);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(ok[t]) << t;
  EXPECT_EQ(reader->stats().requests, 2);
}

}  // namespace
}  // namespace headrace::ranged_reader_test
