#include "headrace/formats/parquet_row_groups.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <latch>
#include <thread>

#include "headrace/formats/parquet_test_util.h"
#include "headrace/formats/source.h"

namespace headrace {
namespace {

using ::testing::HasSubstr;
using parquet_test::MakeRows;
using parquet_test::MemoryStorage;
using parquet_test::WriteParquet;

// Holds ranged reads until Release(): reads "in flight" for as long as a test wants.
class HeldStorage final : public Storage {
 public:
  explicit HeldStorage(std::shared_ptr<MemoryStorage> base) : base_(std::move(base)) {}
  void ReadAsync(std::string uri, ReadCallback done) override {
    base_->ReadAsync(std::move(uri), std::move(done));
  }
  void ReadRangeAsyncGated(std::string uri, int64_t offset, int64_t length, ReadCallback done,
                           ReadGate gate) override {
    std::lock_guard lock(mu_);
    held_.push_back([=, this, done = std::move(done), gate = std::move(gate)]() mutable {
      base_->ReadRangeAsyncGated(uri, offset, length, std::move(done), std::move(gate));
    });
  }
  std::string_view name() const override { return "held"; }
  size_t held() {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  void Release() {
    std::vector<std::function<void()>> run;
    {
      std::lock_guard lock(mu_);
      run.swap(held_);
    }
    for (auto& f : run) f();
  }

 private:
  std::shared_ptr<MemoryStorage> base_;
  std::mutex mu_;
  std::vector<std::function<void()>> held_;
};

struct Fixture {
  std::shared_ptr<MemoryStorage> storage = std::make_shared<MemoryStorage>();
  std::shared_ptr<const ParquetFileSet> source;
  SourceSpec spec;

  explicit Fixture(int rows = 40, int per_group = 16) {
    storage->files["/d/a.parquet"] = WriteParquet(MakeRows(rows), per_group);
    spec.parquet = "/d/a.parquet";
    Result<ParquetFileSet> loaded = LoadParquetFileSet(*storage, spec);
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    source = std::make_shared<const ParquetFileSet>(*std::move(loaded));
  }
};

// Reads a record's row group through `cache` as the engine does, synchronously when
// the storage answers at once.
Result<Buffer> ReadRecord(Storage& cache, const SampleRecord& record, int64_t* gated = nullptr) {
  std::optional<Result<Buffer>> got;
  const MediaRef& ref = record.media[0];
  cache.ReadRangeAsyncGated(
      ref.uri, ref.offset, ref.length, [&](Result<Buffer> b) { got = std::move(b); },
      [gated](int64_t n) {
        if (n == kReadStillWanted) return true;
        if (gated != nullptr) *gated += n;
        return true;
      });
  EXPECT_TRUE(got.has_value());
  return *std::move(got);
}

Status PrepareRecord(ParquetRowGroupCache& cache, const ParquetFileSet& source, int64_t index,
                     Buffer bytes, Sample& sample) {
  sample.index = index;
  sample.record = &source.records[static_cast<size_t>(index)];
  std::vector<Buffer> media;
  media.push_back(std::move(bytes));
  FillFromRecord(std::move(media), sample);
  return cache.Prepare(sample);
}

TEST(ParquetRowGroupCache, EachRowGroupIsReadOnceAndDecodedOnceAndOnlyTheFirstReadIsCharged) {
  Fixture f;
  const int64_t before = f.storage->requests();
  ParquetRowGroupCache cache(f.storage, f.source, f.spec, int64_t{64} << 20);
  int64_t gated = 0;
  for (size_t i = 0; i < f.source->records.size(); ++i) {
    Result<Buffer> bytes = ReadRecord(cache, f.source->records[i], &gated);
    ASSERT_TRUE(bytes.ok());
    Sample sample;
    ASSERT_TRUE(PrepareRecord(cache, *f.source, static_cast<int64_t>(i), *bytes, sample).ok());
    const Buffer* image = sample.MediaOf(0);
    ASSERT_NE(image, nullptr);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(image->data()), image->size()),
              *MakeRows(1, static_cast<int>(i))[0].image);
    EXPECT_EQ(sample.MediaOf(kRowGroupField), nullptr);  // the group's bytes are let go
  }
  EXPECT_EQ(f.storage->requests() - before, 3);  // 40 rows, 3 row groups
  int64_t ranges = 0;
  for (const ParquetRowGroup& rg : f.source->layouts[0].row_groups) ranges += rg.length;
  EXPECT_EQ(gated, ranges);
  const RowGroupCacheStats stats = cache.CacheStats();
  EXPECT_EQ(stats.fetches, 3);
  EXPECT_EQ(stats.decodes, 3);
  EXPECT_EQ(stats.refetches, 0);
  // Every row prepared: every group dropped.
  EXPECT_EQ(stats.bytes_held, 0);
  EXPECT_GT(stats.peak_bytes, 0);
}

TEST(ParquetRowGroupCache, ReadsOfAGroupBeingFetchedWaitForThatFetch) {
  Fixture f;
  auto held = std::make_shared<HeldStorage>(f.storage);
  ParquetRowGroupCache cache(held, f.source, f.spec, int64_t{64} << 20);
  std::vector<std::optional<Result<Buffer>>> got(16);
  for (int i = 0; i < 16; ++i) {
    const MediaRef& ref = f.source->records[i].media[0];
    cache.ReadRangeAsyncGated(ref.uri, ref.offset, ref.length,
                              [&got, i](Result<Buffer> b) { got[i] = std::move(b); },
                              [](int64_t) { return true; });
  }
  EXPECT_EQ(held->held(), 1u);  // one request for 16 samples
  for (const auto& g : got) EXPECT_FALSE(g.has_value());
  held->Release();
  for (const auto& g : got) {
    ASSERT_TRUE(g.has_value() && g->ok());
    EXPECT_EQ((*g)->size(), static_cast<size_t>(f.source->layouts[0].row_groups[0].length));
  }
  EXPECT_EQ(cache.CacheStats().fetch_waits, 15);
}

TEST(ParquetRowGroupCache, ConcurrentSamplesOfAGroupDecodeItOnce) {
  Fixture f(64, 64);
  ParquetRowGroupCache cache(f.storage, f.source, f.spec, int64_t{64} << 20);
  Result<Buffer> bytes = ReadRecord(cache, f.source->records[0]);
  ASSERT_TRUE(bytes.ok());
  constexpr int kThreads = 8;
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int64_t i = t; i < 64; i += kThreads) {
        Sample sample;
        if (PrepareRecord(cache, *f.source, i, *bytes, sample).ok()) ok.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 64);
  EXPECT_EQ(cache.CacheStats().decodes, 1);
  EXPECT_EQ(cache.CacheStats().bytes_held, 0);
}

TEST(ParquetRowGroupCache, ARowGroupOverTheCapacityIsRefusedBeforeDecodingNamingTheSizes) {
  Fixture f;
  ParquetRowGroupCache cache(f.storage, f.source, f.spec, 64);
  Result<Buffer> bytes = ReadRecord(cache, f.source->records[0]);
  ASSERT_TRUE(bytes.ok());
  Sample sample;
  const Status status = PrepareRecord(cache, *f.source, 0, *bytes, sample);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("over the limit of 64"));
  EXPECT_THAT(status.message(), HasSubstr("memory.budget_bytes"));
  // The other samples of the group get the same verdict without another decode.
  Sample other;
  EXPECT_EQ(PrepareRecord(cache, *f.source, 1, Buffer(), other).code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.CacheStats().decodes, 1);
}

TEST(ParquetRowGroupCache, TheCapacityBoundsWhatIsHeldAndADroppedGroupIsReadAgain) {
  Fixture f(64, 16);  // 4 groups
  int64_t one_group = 0;  // what one decoded group holds
  {
    ParquetRowGroupCache big(f.storage, f.source, f.spec, int64_t{64} << 20);
    Sample sample;
    ASSERT_TRUE(PrepareRecord(big, *f.source, 0, *ReadRecord(big, f.source->records[0]), sample).ok());
    one_group = big.CacheStats().bytes_held;
  }
  // Room for about one and a half decoded groups (and the footer's check).
  const int64_t capacity =
      std::max(one_group, f.source->LargestRowGroupUncompressedBytes()) + one_group / 2;
  ParquetRowGroupCache cache(f.storage, f.source, f.spec, capacity);
  // One sample of each group: each stays (its other rows are pending) until the bound.
  for (int64_t i : {0, 16, 32, 48}) {
    Result<Buffer> bytes = ReadRecord(cache, f.source->records[i]);
    ASSERT_TRUE(bytes.ok());
    Sample sample;
    const Status status = PrepareRecord(cache, *f.source, i, *bytes, sample);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_LE(cache.CacheStats().bytes_held, capacity);
  }
  EXPECT_GT(cache.CacheStats().evictions, 0);
  // Group 0 was dropped: a sample whose read came back empty reads it again itself.
  Sample again;
  ASSERT_TRUE(PrepareRecord(cache, *f.source, 1, Buffer(), again).ok());
  EXPECT_EQ(cache.CacheStats().refetches, 1);
  EXPECT_NE(again.MediaOf(0), nullptr);
  // It is cached again: the next sample of the group neither waits nor reads.
  const int64_t decodes = cache.CacheStats().decodes;
  Sample third;
  ASSERT_TRUE(PrepareRecord(cache, *f.source, 2, Buffer(), third).ok());
  EXPECT_EQ(cache.CacheStats().refetches, 1);
  EXPECT_EQ(cache.CacheStats().decodes, decodes);
}

TEST(ParquetRowGroupCache, OtherRangesPassThrough) {
  Fixture f;
  ParquetRowGroupCache cache(f.storage, f.source, f.spec, int64_t{64} << 20);
  std::optional<Result<Buffer>> got;
  cache.ReadRangeAsyncGated("/d/a.parquet", 0, 4, [&](Result<Buffer> b) { got = std::move(b); },
                            nullptr);
  ASSERT_TRUE(got && got->ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*got)->data()), 4), "PAR1");
  EXPECT_EQ(cache.CacheStats().fetches, 0);
}

}  // namespace
}  // namespace headrace
