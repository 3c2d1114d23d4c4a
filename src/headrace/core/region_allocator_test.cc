#include "headrace/core/region_allocator.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstring>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

namespace headrace {
namespace region_allocator_test {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Writes `bytes` of a pattern keyed by `seed`, and checks them back.
void Fill(void* p, size_t bytes, uint8_t seed) {
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < bytes; i += 4096) b[i] = static_cast<uint8_t>(seed + i / 4096);
  b[bytes - 1] = seed;
}
bool Holds(const void* p, size_t bytes, uint8_t seed) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < bytes; i += 4096) {
    if (b[i] != static_cast<uint8_t>(seed + i / 4096)) return false;
  }
  return b[bytes - 1] == seed;
}

TEST(RegionAllocator, AFreedRegionServesTheNextRequestItHoldsWhole) {
  RegionAllocator pool(64 * kMiB);
  void* a = pool.Allocate(8 * kMiB, 64);
  ASSERT_NE(a, nullptr);
  Fill(a, 8 * kMiB, 1);
  pool.Free(a, 8 * kMiB);
  EXPECT_EQ(pool.cached_bytes(), 8 * kMiB);
  // A smaller request takes it whole: its pages were touched already, and a request that
  // grows later has them.
  void* b = pool.Allocate(3 * kMiB, 64);
  EXPECT_EQ(b, a);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  EXPECT_EQ(pool.Reallocate(b, 3 * kMiB, 7 * kMiB, 64), b) << "within the region: in place";
  EXPECT_EQ(pool.hits(), 1);
  EXPECT_EQ(pool.misses(), 1);
  EXPECT_EQ(pool.grown(), 0);
  pool.Free(b, 7 * kMiB);
}

TEST(RegionAllocator, ALargerRequestGrowsTheLargestCachedRegion) {
  RegionAllocator pool(64 * kMiB);
  void* small = pool.Allocate(2 * kMiB, 64);
  void* large = pool.Allocate(4 * kMiB, 64);
  pool.Free(small, 2 * kMiB);
  pool.Free(large, 4 * kMiB);
  void* grown = pool.Allocate(10 * kMiB, 64);
  ASSERT_NE(grown, nullptr);
  Fill(grown, 10 * kMiB, 3);  // all of it is there
  EXPECT_TRUE(Holds(grown, 10 * kMiB, 3));
  EXPECT_EQ(pool.grown(), 1);
  EXPECT_EQ(pool.hits(), 1);
  EXPECT_EQ(pool.cached_bytes(), 2 * kMiB) << "the smaller one stays cached";
  pool.Free(grown, 10 * kMiB);
}

TEST(RegionAllocator, LargestFitGivesAGrowingBufferTheLargestRegion) {
  RegionAllocator pool(64 * kMiB, RegionAllocator::Fit::kLargest);
  void* small = pool.Allocate(2 * kMiB, 64);
  void* large = pool.Allocate(12 * kMiB, 64);
  pool.Free(small, 2 * kMiB);
  pool.Free(large, 12 * kMiB);
  // A small first request takes the large region: growing to 10 MiB moves nothing.
  void* p = pool.Allocate(1 * kMiB + 1, 64);
  EXPECT_EQ(p, large);
  EXPECT_EQ(pool.Reallocate(p, 1 * kMiB, 10 * kMiB, 64), large);
  EXPECT_EQ(pool.grown(), 0);
  pool.Free(p, 10 * kMiB);
  // Best fit takes the small one for the same request.
  RegionAllocator best(64 * kMiB);
  void* s2 = best.Allocate(2 * kMiB, 64);
  void* l2 = best.Allocate(12 * kMiB, 64);
  best.Free(s2, 2 * kMiB);
  best.Free(l2, 12 * kMiB);
  void* q = best.Allocate(1 * kMiB + 1, 64);
  EXPECT_EQ(q, s2);
  best.Free(q, 2 * kMiB);
}

TEST(RegionAllocator, AFinalBlockTakesTheSmallestRegionThatHoldsItEvenWhereBlocksGrow) {
  RegionAllocator pool(64 * kMiB, RegionAllocator::Fit::kLargest);
  void* small = pool.Allocate(3 * kMiB, 64);
  void* large = pool.Allocate(12 * kMiB, 64);
  void* middle = pool.Allocate(5 * kMiB, 64);
  pool.Free(small, 3 * kMiB);
  pool.Free(large, 12 * kMiB);
  pool.Free(middle, 5 * kMiB);
  // A block sized before it is written (RaggedRows::Reserve) leaves the large region to
  // the blocks that grow.
  void* p = pool.AllocateFinal(4 * kMiB, 64);
  EXPECT_EQ(p, middle);
  void* q = pool.Allocate(1 * kMiB + 1, 64);
  EXPECT_EQ(q, large) << "a growing block still takes the largest";
  // None holds it: the largest cached one, grown.
  void* r = pool.AllocateFinal(6 * kMiB, 64);
  EXPECT_EQ(pool.grown(), 1);
  ASSERT_NE(r, nullptr);
  Fill(r, 6 * kMiB, 5);
  EXPECT_TRUE(Holds(r, 6 * kMiB, 5));
  EXPECT_EQ(pool.cached_bytes(), 0u);
  pool.Free(p, 4 * kMiB);
  pool.Free(q, 1 * kMiB + 1);
  pool.Free(r, 6 * kMiB);
}

TEST(RegionAllocator, TheProcessCountsTheBytesItsRegionsMap) {
  // RegionBytesMapped: what the run report shows beside malloc's heap. Other tests of this
  // binary run one at a time: only this allocator maps while it runs.
  const int64_t before = RegionBytesMapped();
  constexpr size_t kMiB = size_t{1} << 20;
  {
    RegionAllocator pool(/*max_cached_bytes=*/0);
    void* a = pool.Allocate(4 * kMiB, 64);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(RegionBytesMapped() - before, int64_t(4 * kMiB));
    a = pool.Reallocate(a, 4 * kMiB, 6 * kMiB, 64);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(RegionBytesMapped() - before, int64_t(6 * kMiB)) << "grown in place: 2 MiB more";
    std::memset(a, 1, kMiB);
    EXPECT_EQ(pool.Settle(a, 6 * kMiB, kMiB), kMiB);
    EXPECT_EQ(RegionBytesMapped() - before, int64_t(kMiB)) << "the unwritten tail unmapped";
    pool.Free(a, kMiB);
    EXPECT_EQ(RegionBytesMapped(), before) << "no cache: unmapped";
  }
  EXPECT_EQ(RegionBytesMapped(), before);
}

TEST(RegionAllocator, SettleGivesBackOnlyThePagesNeverWritten) {
  RegionAllocator pool(64 * kMiB);
  void* p = pool.Allocate(8 * kMiB, 64);
  Fill(p, 3 * kMiB, 1);
  EXPECT_EQ(pool.Settle(p, 8 * kMiB, 3 * kMiB), 3 * kMiB) << "the room past the rows goes";
  EXPECT_TRUE(Holds(p, 3 * kMiB, 1));
  pool.Free(p, 3 * kMiB);
  EXPECT_EQ(pool.cached_bytes(), 3 * kMiB) << "the cache counts what exists";
  // The same region grown, written less this time: the pages written before stay.
  void* q = pool.Allocate(6 * kMiB, 64);
  EXPECT_EQ(q, p);
  EXPECT_EQ(pool.grown(), 1);
  EXPECT_EQ(pool.Settle(q, 6 * kMiB, 1 * kMiB), 3 * kMiB);
  EXPECT_TRUE(Holds(q, 3 * kMiB, 1)) << "nothing written is given back";
  pool.Free(q, 3 * kMiB);
  EXPECT_EQ(pool.cached_bytes(), 3 * kMiB);
  // Freed unsettled, all of a region may have been written: a later Settle keeps it whole.
  void* r = pool.Allocate(5 * kMiB, 64);
  Fill(r, 5 * kMiB, 2);
  pool.Free(r, 5 * kMiB);
  void* s = pool.Allocate(5 * kMiB, 64);
  EXPECT_EQ(s, r);
  EXPECT_EQ(pool.Settle(s, 5 * kMiB, 1), 5 * kMiB);
  EXPECT_TRUE(Holds(s, 5 * kMiB, 2));
  pool.Free(s, 5 * kMiB);
  // A heap block is left as it is.
  void* small = pool.Allocate(4096, 64);
  EXPECT_EQ(pool.Settle(small, 4096, 10), 4096u);
  pool.Free(small, 4096);
}

TEST(RegionAllocator, ABuffersSettleShrinksItToTheBlockLeft) {
  auto pool = std::make_shared<RegionAllocator>(64 * kMiB);
  Result<Buffer> b = Buffer::Allocate(8 * kMiB, pool);
  ASSERT_TRUE(b.ok());
  Fill(b->mutable_data(), 2 * kMiB + 5, 3);
  Buffer view = *b;  // a second handle: the block is not the buffer's alone
  b->Settle(2 * kMiB + 5);
  EXPECT_EQ(b->size(), 8 * kMiB);
  view = Buffer();
  b->Settle(2 * kMiB + 5);
  EXPECT_EQ(b->size(), 2 * kMiB + 4096) << "the pages holding the bytes written";
  EXPECT_TRUE(Holds(b->data(), 2 * kMiB + 5, 3));
  *b = Buffer();
  EXPECT_EQ(pool->cached_bytes(), 2 * kMiB + 4096);
  // From the heap: unchanged.
  Result<Buffer> h = Buffer::Allocate(1000);
  h->Settle(10);
  EXPECT_EQ(h->size(), 1000u);
}

// Whether a child made by fork() maps [p, p + bytes): mincore fails with ENOMEM on an
// unmapped range. The child calls only async-signal-safe functions.
bool MappedInAForkedChild(void* p, size_t bytes) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    static unsigned char pages[1 << 12];
    const int rc = ::mincore(p, std::min(bytes, sizeof pages * 4096), pages);
    ::_exit(rc == 0 ? 0 : (errno == ENOMEM ? 1 : 2));
  }
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 2) << "mincore failed otherwise";
  return WEXITSTATUS(status) == 0;
}

TEST(RegionAllocator, ACachedRegionIsNotGivenToAForkedChildALentOneIs) {
  RegionAllocator pool(64 * kMiB);
  void* p = pool.Allocate(4 * kMiB, 64);
  Fill(p, 4 * kMiB, 4);
  EXPECT_TRUE(MappedInAForkedChild(p, 4 * kMiB)) << "lent: a child may read a batch";
  pool.Free(p, 4 * kMiB);
  // Cached: the child does not get it, so fork() leaves this process's pages writable
  // (no fault on each page's next write).
  EXPECT_FALSE(MappedInAForkedChild(p, 4 * kMiB));
  void* q = pool.Allocate(6 * kMiB, 64);  // grown from it
  EXPECT_EQ(pool.grown(), 1);
  EXPECT_TRUE(MappedInAForkedChild(q, 6 * kMiB)) << "lent again: inherited again";
  EXPECT_TRUE(Holds(q, 4 * kMiB, 4));
  pool.Free(q, 6 * kMiB);
}

TEST(RegionAllocator, ReallocateKeepsTheContentsWithoutACopyAndLeavesHeapBlocksAlone) {
  RegionAllocator pool(64 * kMiB);
  void* p = pool.Allocate(2 * kMiB, 64);
  Fill(p, 2 * kMiB, 7);
  void* q = pool.Reallocate(p, 2 * kMiB, 9 * kMiB, 64);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(Holds(q, 2 * kMiB, 7)) << "the first bytes kept";
  Fill(q, 9 * kMiB, 8);
  EXPECT_EQ(pool.grown(), 1);
  pool.Free(q, 9 * kMiB);
  // A small block is the heap's: not grown here (the caller copies).
  void* h = pool.Allocate(1000, 64);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h) % 64, 0u);
  EXPECT_EQ(pool.Reallocate(h, 1000, 5 * kMiB, 64), nullptr);
  pool.Free(h, 1000);
  EXPECT_EQ(pool.cached_bytes(), 9 * kMiB);
}

TEST(RegionAllocator, TheCacheHoldsAtMostItsCapTheOldestUnmappedFirst) {
  RegionAllocator pool(10 * kMiB);
  std::vector<void*> regions;
  for (int i = 0; i < 4; ++i) regions.push_back(pool.Allocate(4 * kMiB, 64));
  for (void* r : regions) pool.Free(r, 4 * kMiB);
  EXPECT_EQ(pool.cached_bytes(), 8 * kMiB);  // two of 4 MiB under 10
  // The newest two are the ones kept.
  void* a = pool.Allocate(4 * kMiB, 64);
  void* b = pool.Allocate(4 * kMiB, 64);
  EXPECT_TRUE((a == regions[2] && b == regions[3]) || (a == regions[3] && b == regions[2]));
  // A region larger than the cap is never kept.
  void* big = pool.Allocate(16 * kMiB, 64);
  pool.Free(big, 16 * kMiB);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  pool.Free(a, 4 * kMiB);
  pool.Free(b, 4 * kMiB);
}

TEST(RegionAllocator, BuffersGrowInPlaceWhenTheyAreTheOnlyHandle) {
  auto pool = std::make_shared<RegionAllocator>(64 * kMiB);
  Result<Buffer> a = Buffer::Allocate(2 * kMiB, pool);
  ASSERT_TRUE(a.ok());
  Fill(a->mutable_data(), 2 * kMiB, 5);
  Result<Buffer> grown = Buffer::Grow(*std::move(a), 2 * kMiB, 6 * kMiB, pool);
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ(grown->size(), 6 * kMiB);
  EXPECT_TRUE(Holds(grown->data(), 2 * kMiB, 5));
  EXPECT_EQ(pool->grown(), 1) << "grown in place: no new block";
  EXPECT_EQ(pool->misses(), 1);
  // Shared with another handle, it is copied: the other keeps its bytes.
  Buffer other = *grown;
  Result<Buffer> copy = Buffer::Grow(*grown, 6 * kMiB, 8 * kMiB, pool);
  ASSERT_TRUE(copy.ok());
  EXPECT_NE(copy->data(), other.data());
  EXPECT_TRUE(Holds(copy->data(), 2 * kMiB, 5));
  EXPECT_TRUE(Holds(other.data(), 2 * kMiB, 5));
  // From the heap (no Reallocate) it is copied too.
  auto heap = std::shared_ptr<Allocator>(DefaultAllocator(), [](Allocator*) {});
  Result<Buffer> h = Buffer::Allocate(100, heap);
  std::memcpy(h->mutable_data(), "0123456789", 10);
  Result<Buffer> hg = Buffer::Grow(*std::move(h), 10, 4000, heap);
  ASSERT_TRUE(hg.ok());
  EXPECT_EQ(std::memcmp(hg->data(), "0123456789", 10), 0);
}

TEST(RegionAllocator, ThreadsAllocateGrowAndFreeConcurrently) {
  RegionAllocator pool(32 * kMiB);
  constexpr int kThreads = 4;
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  std::vector<int> bad(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < 40; ++i) {
        const size_t first = (1 + (i + t) % 3) * kMiB;
        void* p = pool.Allocate(first, 64);
        Fill(p, first, static_cast<uint8_t>(t * 50 + i));
        void* q = pool.Reallocate(p, first, first + 2 * kMiB, 64);
        if (q == nullptr) q = p;
        bad[t] += !Holds(q, first, static_cast<uint8_t>(t * 50 + i));
        pool.Free(q, first + 2 * kMiB);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_LE(pool.cached_bytes(), 32 * kMiB);
  EXPECT_EQ(pool.hits() + pool.misses(), kThreads * 40);
}

TEST(RegionAllocator, AClosedAllocatorsRegionsServeTheNextOfItsKindOnly) {
  ReleaseKeptRegions();  // what earlier tests of this process kept
  constexpr auto kKeep = RegionAllocator::OnClose::kKeepForNext;
  void* first = nullptr;
  {
    RegionAllocator closing(64 * kMiB, RegionAllocator::Fit::kBest, kKeep);
    first = closing.Allocate(8 * kMiB, 64);
    ASSERT_NE(first, nullptr);
    Fill(first, 8 * kMiB, 7);
    closing.Free(first, 8 * kMiB);
  }
  EXPECT_EQ(KeptRegionBytes(), 8 * kMiB);
  {
    // Another kind (a sample's rows) and an allocator that keeps nothing take none.
    RegionAllocator rows(64 * kMiB, RegionAllocator::Fit::kLargest, kKeep);
    void* r = rows.Allocate(4 * kMiB, 64);
    EXPECT_NE(r, first);
    EXPECT_EQ(rows.misses(), 1);
    rows.Free(r, 4 * kMiB);
    RegionAllocator own(64 * kMiB);
    void* o = own.Allocate(4 * kMiB, 64);
    EXPECT_NE(o, first);
    EXPECT_EQ(own.misses(), 1);
    own.Free(o, 4 * kMiB);
  }
  EXPECT_EQ(KeptRegionBytes(), 8 * kMiB + 4 * kMiB) << "the rows' region kept too";
  RegionAllocator next(64 * kMiB, RegionAllocator::Fit::kBest, kKeep);
  void* taken = next.Allocate(6 * kMiB, 64);
  EXPECT_EQ(taken, first) << "the closed allocator's region, its pages still there";
  EXPECT_TRUE(Holds(taken, 8 * kMiB, 7));
  EXPECT_EQ(next.hits(), 1);
  EXPECT_EQ(next.misses(), 0);
  EXPECT_EQ(KeptRegionBytes(), 4 * kMiB);
  next.Free(taken, 6 * kMiB);
  EXPECT_EQ(ReleaseKeptRegions(), 4 * kMiB);
  EXPECT_EQ(KeptRegionBytes(), 0u);
}

TEST(RegionAllocator, KeptRegionsAreAtMostTheLargestCacheOfTheirKindTheOldestUnmapped) {
  ReleaseKeptRegions();
  constexpr auto kKeep = RegionAllocator::OnClose::kKeepForNext;
  auto older = std::make_unique<RegionAllocator>(10 * kMiB, RegionAllocator::Fit::kBest, kKeep);
  auto newer = std::make_unique<RegionAllocator>(10 * kMiB, RegionAllocator::Fit::kBest, kKeep);
  std::vector<void*> lent_older;
  std::vector<void*> lent_newer;
  for (int i = 0; i < 2; ++i) lent_older.push_back(older->Allocate(4 * kMiB, 64));
  for (int i = 0; i < 2; ++i) lent_newer.push_back(newer->Allocate(4 * kMiB, 64));
  for (void* r : lent_older) older->Free(r, 4 * kMiB);
  for (void* r : lent_newer) newer->Free(r, 4 * kMiB);
  older.reset();
  EXPECT_EQ(KeptRegionBytes(), 8 * kMiB);
  newer.reset();  // 16 MiB over the cap of 10: the older two are unmapped
  EXPECT_EQ(KeptRegionBytes(), 8 * kMiB);
  RegionAllocator next(10 * kMiB, RegionAllocator::Fit::kBest, kKeep);
  void* a = next.Allocate(4 * kMiB, 64);
  void* b = next.Allocate(4 * kMiB, 64);
  EXPECT_EQ(next.misses(), 0);
  EXPECT_TRUE((a == lent_newer[0] && b == lent_newer[1]) ||
              (a == lent_newer[1] && b == lent_newer[0]));
  next.Free(a, 4 * kMiB);
  next.Free(b, 4 * kMiB);
  EXPECT_EQ(ReleaseKeptRegions(), 0u);
}

}  // namespace
}  // namespace region_allocator_test
}  // namespace headrace
