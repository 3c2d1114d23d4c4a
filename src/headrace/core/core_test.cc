#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

#include "headrace/core/allocator_test_util.h"
#include "headrace/core/batch.h"
#include "headrace/core/ragged_rows.h"
#include "headrace/core/pooling_allocator.h"
#include "headrace/core/rng.h"
#include "headrace/core/sample.h"
#include "headrace/core/status.h"

namespace headrace {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  HR_ASSIGN_OR_RETURN(int half, Half(x));
  HR_ASSIGN_OR_RETURN(*out, Half(half));
  return Status::Ok();
}

TEST(Status, CarriesCodeMessageAndContext) {
  Status s = Status::CorruptData("truncated").WithContext("image 3");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorruptData);
  EXPECT_EQ(s.ToString(), "corrupt_data: image 3: truncated");
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(StatusCodeName(StatusCode::kPathEscape), "path_escape");
}

TEST(Result, PropagatesErrorsThroughMacros) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(Quarter(6, &out).code(), StatusCode::kInvalidArgument);
  Result<int> bad(Status::Ok());  // an ok Status is not a value
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInternal);
}

TEST(Buffer, SlicesShareMemoryAndOutliveTheOriginal) {
  Buffer slice;
  {
    auto b = Buffer::CopyOf("abcdef", 6);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % kBufferAlignment, 0u);
    slice = b->Slice(2, 100);  // clamped
    EXPECT_EQ(slice.data(), b->data() + 2);
    EXPECT_EQ(b->use_count(), 2);
  }
  ASSERT_EQ(slice.size(), 4u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(slice.data()), 4), "cdef");
}

class CountingAllocator final : public Allocator {
 public:
  void* Allocate(size_t bytes, size_t alignment) override {
    live += bytes;
    return DefaultAllocator()->Allocate(bytes, alignment);
  }
  void Free(void* p, size_t bytes) override {
    live -= bytes;
    DefaultAllocator()->Free(p, bytes);
  }
  const char* name() const override { return "counting"; }
  int64_t live = 0;
};

TEST(Tensor, AllocatesThroughThePluggableAllocator) {
  CountingAllocator alloc;
  {
    auto t = Tensor::Allocate(DType::kBF16, {2, 3, 4}, &alloc);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->nbytes(), 48u);
    EXPECT_EQ(alloc.live, 48);
    EXPECT_EQ(t->ToString(), "bf16[2, 3, 4]");
  }
  EXPECT_EQ(alloc.live, 0);
  EXPECT_EQ(*ParseDType("f16"), DType::kF16);
  EXPECT_FALSE(ParseDType("f64").ok());
}

TEST(Rng, IsDeterministicPerKeyAndIndependentAcrossKeys) {
  Rng a(HashKeys(1, 2, 3)), b(HashKeys(1, 2, 3)), c(HashKeys(1, 2, 4));
  std::set<uint64_t> seen;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    EXPECT_NE(x, c.Next());
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), 100u);
  Rng u(5);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_LT(u.Below(7), 7u);
    const double d = u.Uniform();
    EXPECT_GE(d, 0.0);
    EXPECT_LT(d, 1.0);
  }
}

TEST(Batch, FindsFieldsAndReportsSize) {
  Batch batch;
  batch.fields.emplace_back("x", *Tensor::Allocate(DType::kF32, {5, 2}));
  EXPECT_EQ(batch.size(), 5);
  EXPECT_EQ(batch.nbytes(), 40u);
  EXPECT_NE(batch.Find("x"), nullptr);
  EXPECT_EQ(batch.Find("y"), nullptr);
}

// A tensor of `dtype` holding `values`.
template <typename T>
Tensor TensorOf(DType dtype, std::vector<int64_t> shape, std::vector<T> values) {
  Tensor t = *Tensor::Allocate(dtype, std::move(shape));
  std::memcpy(t.mutable_data<uint8_t>(), values.data(), values.size() * sizeof(T));
  return t;
}

TEST(Batch, SampleOffsetsSplitConcatenatedFieldsBySample) {
  // Three samples with 2, 0 and 1 views; each view has a ragged number of patches.
  Batch batch;
  batch.fields.emplace_back("views", TensorOf<uint8_t>(DType::kU8, {3, 1}, {1, 2, 3}));
  batch.fields.emplace_back("patches", TensorOf<float>(DType::kF32, {6, 1}, {0, 0, 0, 0, 0, 0}));
  batch.fields.emplace_back("patches_lengths", TensorOf<int32_t>(DType::kI32, {3}, {4, 1, 1}));
  batch.fields.emplace_back("views_count", TensorOf<int64_t>(DType::kI64, {3}, {2, 0, 1}));
  batch.fields.emplace_back("tokens", TensorOf<int64_t>(DType::kI64, {5}, {0, 0, 0, 0, 0}));
  batch.fields.emplace_back("tokens_lengths", TensorOf<int32_t>(DType::kI32, {3}, {3, 2, 0}));
  batch.fields.emplace_back("index", TensorOf<int64_t>(DType::kI64, {3}, {7, 8, 9}));
  EXPECT_EQ(batch.size(), 3) << "from 'index', not the first field";
  using V = std::vector<int64_t>;
  const auto offsets = [&](FieldSpec f) {
    Result<V> r = SampleOffsets(batch, f);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : V{};
  };
  EXPECT_EQ(offsets({"views", DType::kU8, {1}, FieldLayout::kItems, "views_count"}),
            (V{0, 2, 2, 3}));
  EXPECT_EQ(offsets({"patches", DType::kF32, {1}, FieldLayout::kRagged, "views_count"}),
            (V{0, 5, 5, 6}));
  EXPECT_EQ(offsets({"patches_lengths", DType::kI32, {}, FieldLayout::kLengths, "views_count"}),
            (V{0, 2, 2, 3}));
  EXPECT_EQ(offsets({"tokens", DType::kI64, {}, FieldLayout::kRagged}), (V{0, 3, 5, 5}));
  EXPECT_EQ(offsets({"index", DType::kI64, {}}), (V{0, 1, 2, 3}));
  // A count that disagrees with the tensor is refused.
  const Result<V> bad =
      SampleOffsets(batch, {"views", DType::kU8, {1}, FieldLayout::kItems, "tokens_lengths"});
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(SampleOffsets(batch, {"nope", DType::kU8, {}}).ok());
}

TEST(RaggedRows, ToldRowsAreHeldAtTheGateOnceBeforeTheyAreReserved) {
  struct Counting final : RowsGate {
    void Hold(size_t bytes) override {
      ++calls;
      held += bytes;
    }
    int calls = 0;
    size_t held = 0;
  } gate;
  std::vector<FieldSpec> fields = {
      FieldSpec{"ids", DType::kI64, {}, FieldLayout::kRagged},
      FieldSpec{"ids_lengths", DType::kI32, {}, FieldLayout::kLengths},
      FieldSpec{"patches", DType::kF32, {6}, FieldLayout::kRagged},
      FieldSpec{"patches_lengths", DType::kI32, {}, FieldLayout::kLengths}};
  RaggedRows rows(fields, std::shared_ptr<Allocator>(DefaultAllocator(), [](Allocator*) {}));
  rows.set_gate(&gate);
  const std::vector<int64_t> told = {10, 0, 3, 0};
  ASSERT_TRUE(rows.ReserveTold(told).ok());
  EXPECT_EQ(gate.calls, 1);
  EXPECT_EQ(gate.held, 10 * 8 + 3 * 6 * 4u);
  ASSERT_TRUE(rows.ReserveTold(told).ok());  // told once: the gate is not asked again
  EXPECT_EQ(gate.calls, 1);
}

TEST(RaggedRows, AppendsGrowKeepingEarlierRowsAndCountEntries) {
  auto memory = std::shared_ptr<Allocator>(DefaultAllocator(), [](Allocator*) {});
  RaggedRows rows(std::vector<FieldSpec>{FieldSpec{"fixed", DType::kI64, {}},
                                         FieldSpec{"r", DType::kI32, {2}, FieldLayout::kRagged}},
                  memory);
  EXPECT_FALSE(rows.Append(0, 1).ok()) << "a fixed field has no rows to append";
  for (int32_t e = 0; e < 50; ++e) {
    Result<uint8_t*> out = rows.Append(1, e % 3);
    ASSERT_TRUE(out.ok());
    auto* v = reinterpret_cast<int32_t*>(*out);
    for (int r = 0; r < 2 * (e % 3); ++r) v[r] = e;
  }
  EXPECT_EQ(rows.lengths(1).size(), 50u);
  EXPECT_EQ(rows.rows(1), 49);  // 17 × 1 + 16 × 2
  const auto* v = reinterpret_cast<const int32_t*>(rows.bytes(1).data());
  EXPECT_EQ(v[0], 1) << "entry 0 appended no row; entry 1 is first";
  EXPECT_EQ(v[2 * 48], 49);
  EXPECT_FALSE(rows.Append(1, -1).ok());
  rows.Clear();
  EXPECT_EQ(rows.rows(1), 0);
  EXPECT_GT(rows.held_bytes(), 0u) << "cleared, its memory kept";
}

TEST(RaggedRows, RowsPastMaxBytesFailWhenToldAndWhenAppended) {
  auto memory = std::shared_ptr<Allocator>(DefaultAllocator(), [](Allocator*) {});
  RaggedRows rows(std::vector<FieldSpec>{FieldSpec{"a", DType::kI32, {2}, FieldLayout::kRagged},
                                         FieldSpec{"b", DType::kU8, {}, FieldLayout::kRagged}},
                  memory);
  rows.set_max_bytes(100);  // 8 bytes a row of a, 1 of b
  EXPECT_TRUE(rows.CheckTold(std::vector<int64_t>{10, 20}).ok()) << "100 bytes: at the limit";
  const Status told = rows.CheckTold(std::vector<int64_t>{10, 21});
  EXPECT_EQ(told.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(told.message().find("told before decoding take 101 bytes, more than a batch may "
                                "hold (100 bytes"),
            std::string::npos)
      << told.message();
  ASSERT_TRUE(rows.Append(0, 10).ok());
  ASSERT_TRUE(rows.Append(1, 15).ok());
  ASSERT_TRUE(rows.Append(1, 5).ok()) << "100 bytes over both fields";
  const Result<uint8_t*> past = rows.Append(1, 1);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(past.status().message().find("would take 101 bytes"), std::string::npos);
  EXPECT_EQ(rows.rows(1), 20) << "nothing appended by the failed call";
}

TEST(RaggedRows, ReservedRowsAreOneBlockOfTheirSizeThatTheAppendsFillWithoutMovingIt) {
  testing::FitCountingAllocator counting;
  auto memory = std::shared_ptr<Allocator>(&counting, [](Allocator*) {});
  RaggedRows rows(std::vector<FieldSpec>{FieldSpec{"fixed", DType::kI64, {}},
                                         FieldSpec{"r", DType::kI32, {2}, FieldLayout::kRagged}},
                  memory);
  EXPECT_FALSE(rows.Reserve(0, 4).ok()) << "a fixed field has no rows to reserve";
  EXPECT_FALSE(rows.Reserve(1, -1).ok());
  ASSERT_TRUE(rows.Reserve(1, 10).ok());
  EXPECT_EQ(counting.final, (std::vector<size_t>{10 * 8})) << "one block of 10 rows of 8 bytes";
  const uint8_t* block = rows.bytes(1).data();
  ASSERT_TRUE(rows.Reserve(1, 10).ok()) << "room already there";
  EXPECT_EQ(counting.final.size(), 1u);
  for (int64_t n : {3, 7}) {
    Result<uint8_t*> out = rows.Append(1, n);
    ASSERT_TRUE(out.ok());
    std::memset(*out, static_cast<int>(n), static_cast<size_t>(n) * 8);
  }
  EXPECT_EQ(rows.bytes(1).data(), block) << "the appends filled the reserved block";
  EXPECT_TRUE(counting.growing.empty());
  EXPECT_EQ(rows.held_bytes(), 80u);
  // A prediction short of what is appended: the block grows as without one, rows kept.
  ASSERT_TRUE(rows.Append(1, 1).ok());
  EXPECT_EQ(counting.growing.size(), 1u);
  EXPECT_EQ(rows.rows(1), 11);
  EXPECT_EQ(rows.bytes(1)[3 * 8], 7) << "entry 2 starts after entry 1's 3 rows";
  EXPECT_EQ((std::vector<int32_t>(rows.lengths(1).begin(), rows.lengths(1).end())),
            (std::vector<int32_t>{3, 7, 1}));
}

}  // namespace
}  // namespace headrace

namespace headrace {
namespace {

TEST(PoolingAllocator, ReusesFreedBlocksOfTheSameSizeClass) {
  CountingAllocator base;
  auto pool = std::make_shared<PoolingAllocator>(&base, /*max_cached_bytes=*/1 << 20);
  const uint8_t* first;
  {
    auto a = Buffer::Allocate(10000, pool);
    ASSERT_TRUE(a.ok());
    first = a->data();
  }
  EXPECT_EQ(pool->cached_bytes(), 12288u);  // rounded up to 4 KiB pages
  auto b = Buffer::Allocate(9000, pool);    // same class: the same block
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(pool->hits(), 1);
  EXPECT_EQ(pool->misses(), 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % kBufferAlignment, 0u);
}

TEST(PoolingAllocator, GeometricClassesServeBatchesOfNearbySizesFromOneBlock) {
  CountingAllocator base;
  auto pool = std::make_shared<PoolingAllocator>(&base, 64 << 20,
                                                 PoolingAllocator::SizeClasses::kGeometric);
  // Four classes per doubling: never more than 25% over the request.
  for (size_t bytes : {size_t{1}, size_t{4097}, size_t{100000}, size_t{1} << 20,
                       (size_t{1} << 20) + 1, size_t{19267584}}) {
    const size_t size = pool->SizeClass(bytes);
    EXPECT_GE(size, bytes);
    EXPECT_EQ(size % 4096, 0u);
    if (bytes > 8192) EXPECT_LE(size, bytes + bytes / 4) << bytes;
  }
  EXPECT_EQ(pool->SizeClass((size_t{1} << 20) + 1), (size_t{1} << 20) + (size_t{1} << 18));
  const uint8_t* first;
  {
    auto a = Buffer::Allocate(1'000'000, pool);  // a batch of text padded to its longest
    ASSERT_TRUE(a.ok());
    first = a->data();
  }
  auto b = Buffer::Allocate(1'040'000, pool);  // the next one, a little longer
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(pool->misses(), 1);
  // Page classes would have needed a second block for it.
  PoolingAllocator pages(&base, 64 << 20);
  EXPECT_NE(pages.SizeClass(1'000'000), pages.SizeClass(1'040'000));
}

TEST(PoolingAllocator, AVaryingSizeTakesALargerCachedBlockAndTheNewestAreKept) {
  CountingAllocator base;
  auto pool = std::make_shared<PoolingAllocator>(&base, 4 << 20,
                                                 PoolingAllocator::SizeClasses::kGeometric);
  const uint8_t* big;
  {
    auto a = Buffer::Allocate(size_t{2} << 20, pool);  // class 2 MiB
    ASSERT_TRUE(a.ok());
    big = a->data();
  }
  {
    // Two classes smaller (1.5 MiB + 1: class 1.75 MiB): served by the 2 MiB block,
    // which goes back into its own class when freed.
    auto b = Buffer::Allocate((size_t{3} << 19) + 1, pool);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->data(), big);
    EXPECT_EQ(pool->hits(), 1);
    EXPECT_EQ(pool->cached_bytes(), 0u);
  }
  EXPECT_EQ(pool->cached_bytes(), size_t{2} << 20);
  {
    // Half its size is more than 50% under it: a fresh block, not the 2 MiB one.
    auto c = Buffer::Allocate(size_t{1} << 20, pool);
    ASSERT_TRUE(c.ok());
    EXPECT_NE(c->data(), big);
    EXPECT_EQ(pool->misses(), 2);
  }
  EXPECT_EQ(pool->cached_bytes(), size_t{3} << 20);
  {
    auto d = Buffer::Allocate(size_t{5} << 19, pool);  // 2.5 MiB: fresh
    ASSERT_TRUE(d.ok());
  }  // freed: the 2 MiB block, freed longest ago, makes room; the 1 MiB one stays
  EXPECT_EQ(pool->cached_bytes(), (size_t{5} << 19) + (size_t{1} << 20));
  EXPECT_EQ(base.live, static_cast<int64_t>(pool->cached_bytes()));
  {
    auto e = Buffer::Allocate(size_t{5} << 20, pool);  // over the cap: never kept
    ASSERT_TRUE(e.ok());
  }
  EXPECT_EQ(pool->cached_bytes(), (size_t{5} << 19) + (size_t{1} << 20));
  EXPECT_EQ(base.live, static_cast<int64_t>(pool->cached_bytes()));
}

TEST(PoolingAllocator, FreesPastItsCapAndOutlivesItsOwner) {
  CountingAllocator base;
  Buffer survivor;
  {
    auto pool = std::make_shared<PoolingAllocator>(&base, /*max_cached_bytes=*/8192);
    {
      auto a = Buffer::Allocate(8192, pool);
      auto b = Buffer::Allocate(8192, pool);
      ASSERT_TRUE(a.ok() && b.ok());
    }  // one is cached, the other goes back to the base allocator
    EXPECT_EQ(pool->cached_bytes(), 8192u);
    EXPECT_EQ(base.live, 8192);
    survivor = *Buffer::Allocate(100, pool);
  }  // the owner drops the pool; the buffer keeps it alive
  EXPECT_GT(base.live, 0);
  survivor = Buffer();  // last user: the block returns to the pool, the pool is freed
  EXPECT_EQ(base.live, 0);
}

}  // namespace
}  // namespace headrace

namespace headrace {
namespace {

TEST(Sample, MediaAreFoundByFieldInListOrder) {
  SampleRecord record;
  record.media = {MediaRef{0, "a.jpg"}, MediaRef{1, "b0.jpg"}, MediaRef{1, "b1.jpg"}};
  Sample sample;
  sample.record = &record;
  sample.media = {Sample::Item{0, *Buffer::CopyOf("rec", 3), "a.jpg"},
                  Sample::Item{1, *Buffer::CopyOf("cell!", 5), "b0.jpg"},
                  Sample::Item{1, *Buffer::CopyOf("x", 1), "b1.jpg"}};
  EXPECT_EQ(sample.MediaOf(0)->size(), 3u);
  EXPECT_EQ(sample.MediaOf(1)->size(), 5u);
  EXPECT_EQ(sample.MediaOf(2), nullptr);
  std::vector<std::string> uris;
  sample.ForEachMedia(1, [&](const Buffer&, std::string_view uri) { uris.emplace_back(uri); });
  EXPECT_EQ(uris, (std::vector<std::string>{"b0.jpg", "b1.jpg"}));
  // Turns and attributes are what the source put in place, never the record's behind it.
  record.attributes = {Attribute{2, int64_t{7}}};
  EXPECT_TRUE(sample.attributes.empty());
}

}  // namespace
}  // namespace headrace
