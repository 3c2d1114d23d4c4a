#include "headrace/io/block_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <latch>
#include <mutex>
#include <vector>

namespace headrace {
namespace {

std::filesystem::path TestDir() {
  const char* tmp = std::getenv("HEADRACE_TEST_TMP");
  auto dir = std::filesystem::path(tmp ? tmp : "/tmp") /
             ("block_cache_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// A file of `n` bytes where byte i is (i * 7 + seed) % 251, and its path.
std::string MakeFile(const std::string& name, size_t n, int seed = 0) {
  const auto path = (TestDir() / name).string();
  std::string bytes(n, '\0');
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>((i * 7 + seed) % 251);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

bool HoldsRange(const Buffer& b, int64_t offset, int64_t length, int seed = 0) {
  if (static_cast<int64_t>(b.size()) != length) return false;
  for (int64_t i = 0; i < length; ++i) {
    if (b.data()[i] != static_cast<uint8_t>(((offset + i) * 7 + seed) % 251)) return false;
  }
  return true;
}

Result<Buffer> Read(Storage& s, const std::string& uri, int64_t offset, int64_t length,
                    ReadGate gate = nullptr) {
  std::promise<Result<Buffer>> promise;
  s.ReadRangeAsyncGated(
      uri, offset, length, [&promise](Result<Buffer> r) { promise.set_value(std::move(r)); },
      std::move(gate));
  return promise.get_future().get();
}

int64_t BaseReads(const BlockCache& cache) { return cache.base()->Stats()[0].requests; }

TEST(BlockCache, MembersOfOneBlockShareOneRead) {
  const std::string path = MakeFile("one.tar", 10000);
  BlockCache cache(MakeLocalStorage(), {.block_bytes = 4096, .capacity_bytes = 1 << 20});
  cache.SetObjectSize(path, 10000);
  for (int64_t offset : {0, 512, 1024, 3000}) {
    auto r = Read(cache, path, offset, 500);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(HoldsRange(*r, offset, 500));
  }
  EXPECT_EQ(BaseReads(cache), 1);
  const BlockCacheStats stats = cache.CacheStats();
  EXPECT_EQ(stats.block_reads, 1);
  EXPECT_EQ(stats.block_hits, 3);
  EXPECT_EQ(stats.bytes_copied, 2000);
  EXPECT_EQ(stats.bytes_held, 4096);
}

TEST(BlockCache, AMemberThatStraddlesBlocksIsCopiedFromEach) {
  const std::string path = MakeFile("straddle.tar", 10000, 3);
  BlockCache cache(MakeLocalStorage(), {.block_bytes = 4096, .capacity_bytes = 1 << 20});
  cache.SetObjectSize(path, 10000);
  auto r = Read(cache, path, 4000, 5000);  // blocks 0, 1 and 2
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(HoldsRange(*r, 4000, 5000, 3));
  EXPECT_EQ(cache.CacheStats().block_reads, 3);
  // The last block is read at the object's size, not the block's.
  EXPECT_EQ(cache.CacheStats().bytes_held, 10000);
}

TEST(BlockCache, AnObjectLaidOutInBlocksOfItsOwnDropsEachAfterItsUses) {
  const std::string path = MakeFile("spans.tar", 10000, 5);
  BlockCache cache(MakeLocalStorage(), {.block_bytes = 4096, .capacity_bytes = 1 << 20});
  // Given out of order, with a start at 0, one twice and one past the end: blocks
  // [0, 1000) for 1 read, [1000, 1700) for 3, [1700, 6000) for 1 + 1, [6000, 10000) for
  // 2 + the 1 past the end.
  cache.SetObjectBlocks(path, 10000,
                        {{6000, 2}, {1000, 3}, {1700, 1}, {1700, 1}, {0, 1}, {12000, 1}});
  struct Member {
    int64_t offset, length, block_reads, drops, bytes_held;
  };
  for (const Member m : {
           Member{1000, 300, 1, 0, 700},     // block 1 read: 2 uses left
           Member{1400, 250, 1, 0, 700},     // a hit: 1 left
           Member{10, 900, 2, 1, 700},       // block 0 read, and dropped after its one use
           Member{500, 100, 3, 2, 700},      // so read again
           Member{1500, 1000, 4, 3, 4300},   // across blocks 1 (its last use) and 2
           Member{1700, 4300, 4, 4, 0},      // block 2's last use
           Member{6000, 3900, 5, 4, 4000},   // block 3, cut at the object's end
       }) {
    auto r = Read(cache, path, m.offset, m.length);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(HoldsRange(*r, m.offset, m.length, 5)) << m.offset;
    const BlockCacheStats stats = cache.CacheStats();
    EXPECT_EQ(stats.block_reads, m.block_reads) << m.offset;
    EXPECT_EQ(stats.drops, m.drops) << m.offset;
    EXPECT_EQ(stats.bytes_held, m.bytes_held) << m.offset;
  }
  EXPECT_EQ(BaseReads(cache), 5);
  EXPECT_EQ(cache.CacheStats().block_hits, 3);
  EXPECT_EQ(cache.CacheStats().evictions, 0);
  // Bytes past the object's end are the truncation error, not bytes of nothing.
  auto past = Read(cache, path, 9000, 2000);
  EXPECT_EQ(past.status().code(), StatusCode::kCorruptData) << past.status().ToString();
}

TEST(BlockCache, HeldBytesStayWithinCapacityEvictingTheLeastRecentlyUsed) {
  const std::string path = MakeFile("lru.tar", 40960);
  BlockCache cache(MakeLocalStorage(), {.block_bytes = 4096, .capacity_bytes = 3 * 4096});
  for (int64_t block = 0; block < 10; ++block) {
    auto r = Read(cache, path, block * 4096 + 10, 100);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(HoldsRange(*r, block * 4096 + 10, 100));
  }
  BlockCacheStats stats = cache.CacheStats();
  EXPECT_EQ(stats.block_reads, 10);
  EXPECT_EQ(stats.evictions, 7);
  EXPECT_LE(stats.peak_bytes, 3 * 4096);
  // Blocks 7..9 are held; touching 7 makes 8 the oldest.
  ASSERT_TRUE(Read(cache, path, 7 * 4096, 10).ok());
  ASSERT_TRUE(Read(cache, path, 0, 10).ok());  // evicts 8
  ASSERT_TRUE(Read(cache, path, 7 * 4096 + 1, 10).ok());
  stats = cache.CacheStats();
  EXPECT_EQ(stats.block_reads, 11);
  EXPECT_EQ(stats.block_hits, 2);
}

TEST(BlockCache, ConcurrentReadersOfABlockWaitOnOneRead) {
  const std::string path = MakeFile("many.tar", 1 << 20);
  BlockCache cache(MakeLocalStorage({.threads = 4}),
                   {.block_bytes = 1 << 20, .capacity_bytes = 1 << 20});
  constexpr int kReaders = 64;
  std::latch done(kReaders);
  std::mutex mu;
  int good = 0;
  for (int i = 0; i < kReaders; ++i) {
    const int64_t offset = i * 16000;
    cache.ReadRangeAsyncGated(
        path, offset, 1000,
        [&, offset](Result<Buffer> r) {
          {
            std::lock_guard lock(mu);
            if (r.ok() && HoldsRange(*r, offset, 1000)) ++good;
          }
          done.count_down();
        },
        nullptr);
  }
  done.wait();
  EXPECT_EQ(good, kReaders);
  const BlockCacheStats stats = cache.CacheStats();
  EXPECT_EQ(stats.block_reads, 1);
  EXPECT_EQ(stats.block_hits + stats.block_waits, kReaders - 1);
}

// Samples read concurrently in a small cache: each sample's block awaits its second
// member instead of being evicted for the next sample's, so each is read once and
// dropped after its members, and the cache never holds more than its capacity.
TEST(BlockCache, ConcurrentSamplesOfALaidOutObjectAreEachReadOnce) {
  constexpr int kSamples = 64;
  constexpr int64_t kSpan = 4000;
  const std::string path = MakeFile("laid_out.tar", kSamples * kSpan, 9);
  BlockCache cache(MakeLocalStorage({.threads = 4}),
                   {.block_bytes = 1 << 20, .capacity_bytes = 4 * kSpan});
  std::vector<std::pair<int64_t, int>> blocks;
  for (int i = 1; i < kSamples; ++i) blocks.emplace_back(i * kSpan, 2);
  blocks.emplace_back(0, 2);
  cache.SetObjectBlocks(path, kSamples * kSpan, blocks);
  std::latch done(kSamples);
  std::mutex mu;
  int good = 0;
  // Each sample reads its first member, then (from the completion, as the read stage
  // does) its second.
  for (int i = 0; i < kSamples; ++i) {
    const int64_t first = i * kSpan;
    cache.ReadRangeAsyncGated(
        path, first, 1000,
        [&, first](Result<Buffer> r) {
          const bool ok = r.ok() && HoldsRange(*r, first, 1000, 9);
          cache.ReadRangeAsyncGated(
              path, first + 1000, 3000,
              [&, first, ok](Result<Buffer> second) {
                {
                  std::lock_guard lock(mu);
                  if (ok && second.ok() && HoldsRange(*second, first + 1000, 3000, 9)) ++good;
                }
                done.count_down();
              },
              nullptr);
        },
        nullptr);
  }
  done.wait();
  EXPECT_EQ(good, kSamples);
  const BlockCacheStats stats = cache.CacheStats();
  EXPECT_EQ(stats.block_reads, kSamples);
  EXPECT_EQ(stats.evictions, 0);
  EXPECT_EQ(stats.drops, kSamples);
  EXPECT_EQ(stats.bytes_held, 0);
  EXPECT_LE(stats.peak_bytes, 4 * kSpan);
}

TEST(BlockCache, TheGateSeesTheMemberAndARefusalReadsNothing) {
  const std::string path = MakeFile("gate.tar", 8192);
  BlockCache cache(MakeLocalStorage(), {.block_bytes = 4096, .capacity_bytes = 1 << 20});
  int64_t asked = -1;
  auto refused = Read(cache, path, 100, 300, [&asked](int64_t bytes) {
    asked = bytes;
    return false;
  });
  EXPECT_EQ(refused.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(asked, 300);
  EXPECT_EQ(cache.CacheStats().block_reads, 0);
}

TEST(BlockCache, AFailedBlockFailsEveryWaiterAndIsNotKept) {
  BlockCache cache(MakeLocalStorage(), {.block_bytes = 4096, .capacity_bytes = 1 << 20});
  const std::string path = (TestDir() / "missing.tar").string();
  EXPECT_EQ(Read(cache, path, 0, 10).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Read(cache, path, 0, 10).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cache.CacheStats().block_reads, 2);
  EXPECT_EQ(cache.CacheStats().bytes_held, 0);
}

TEST(BlockCache, AMemberPastATruncatedObjectIsCorruptData) {
  const std::string path = MakeFile("short.tar", 5000);
  BlockCache cache(MakeLocalStorage(), {.block_bytes = 4096, .capacity_bytes = 1 << 20});
  cache.SetObjectSize(path, 9000);  // what its index says; the file was cut
  auto r = Read(cache, path, 4500, 1000);
  EXPECT_EQ(r.status().code(), StatusCode::kCorruptData) << r.status().ToString();
  EXPECT_NE(r.status().message().find("5000"), std::string::npos) << r.status().ToString();
}

TEST(BlockCache, WholeObjectReadsPassThrough) {
  const std::string path = MakeFile("whole.bin", 3000);
  BlockCache cache(MakeLocalStorage(), {.block_bytes = 4096, .capacity_bytes = 1 << 20});
  auto r = cache.Read(path);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(HoldsRange(*r, 0, 3000));
  EXPECT_EQ(cache.CacheStats().block_reads, 0);
}

}  // namespace
}  // namespace headrace
