#include "headrace/exec/assemble_stage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <latch>
#include <random>
#include <thread>
#include <vector>

#include "headrace/core/region_allocator.h"

namespace headrace {
namespace assemble_stage_test {

struct Fixture {
  std::vector<FieldSpec> fields{FieldSpec{"row", DType::kI64, {2}}};
  std::vector<StringField> strings{StringField{"id", -1, false},
                                   StringField{"caption", 0, false}};
  std::vector<std::unique_ptr<BatchOp>> batch_ops;
  std::vector<SampleRecord> records = std::vector<SampleRecord>(4);
  std::shared_ptr<PoolingAllocator> memory =
      std::make_shared<PoolingAllocator>(DefaultAllocator(), 1 << 20);

  // A job of four samples, each row written as the chain would: (index, 10 × index).
  std::shared_ptr<BatchJob> Job(AssembleStage& stage) {
    auto job = std::make_shared<BatchJob>();
    for (int i = 0; i < 4; ++i) {
      records[i].id = "s" + std::to_string(i);
      records[i].attributes = {Attribute{0, "record " + std::to_string(i)}};
      job->records.push_back(&records[i]);
      job->sample_indices.push_back(100 + i);
    }
    EXPECT_TRUE(stage.AllocateRows(*job).ok());
    for (int i = 0; i < 4; ++i) {
      auto* row = reinterpret_cast<int64_t*>(job->slots[i][0]);
      row[0] = i;
      row[1] = 10 * i;
    }
    return job;
  }
};

TEST(AssembleStage, FailedSamplesAreCompactedOutAndEveryFieldKeepsItsRows) {
  Fixture f;
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory);
  EXPECT_EQ(stage.BatchBytes(4), 4u * (2 * 8 + 8));  // "row" and "index"
  auto job = f.Job(stage);
  job->status[1] = Status::CorruptData("bad jpeg");
  job->parsed_attributes[2] = std::vector<Attribute>{Attribute{0, "parsed 2"}};
  bool cancelled = true;
  const Batch batch = stage.Finish(*job, cancelled);
  EXPECT_FALSE(cancelled);
  ASSERT_EQ(batch.size(), 3);
  const Tensor* row = batch.Find("row");
  const Tensor* index = batch.Find("index");
  ASSERT_NE(row, nullptr);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(std::vector<int64_t>(index->data<int64_t>(), index->data<int64_t>() + 3),
            (std::vector<int64_t>{100, 102, 103}));
  EXPECT_EQ(std::vector<int64_t>(row->data<int64_t>(), row->data<int64_t>() + 6),
            (std::vector<int64_t>{0, 0, 2, 20, 3, 30}));
  ASSERT_EQ(batch.errors.size(), 1u);
  EXPECT_EQ(batch.errors[0].index, 101);
  ASSERT_EQ(batch.strings.size(), 2u);
  EXPECT_EQ(batch.strings[0].rows,
            (std::vector<std::vector<std::string>>{{"s0"}, {"s2"}, {"s3"}}));
  EXPECT_EQ(batch.strings[1].rows, (std::vector<std::vector<std::string>>{
                                       {"record 0"}, {"parsed 2"}, {"record 3"}}));
  EXPECT_EQ(stage.bytes_copied(), 2 * (2 * 8 + 8));  // two rows moved up, both fields
}

TEST(AssembleStage, ACancelledSampleMarksTheBatchCancelled) {
  Fixture f;
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory);
  auto job = f.Job(stage);
  job->status[3] = Status::Cancelled("the run was cancelled");
  bool cancelled = false;
  const Batch batch = stage.Finish(*job, cancelled);
  EXPECT_TRUE(cancelled);
  EXPECT_TRUE(batch.errors.empty());  // a cancellation is nobody's error
}

class FailingBatchOp final : public BatchOp {
 public:
  std::string_view name() const override { return "test.fail"; }
  Status Run(Batch&, uint64_t) const override { return Status::CorruptData("no"); }
};

TEST(AssembleStage, AFailingBatchOpEmptiesTheBatchAndNamesEachSample) {
  Fixture f;
  f.batch_ops.push_back(std::make_unique<FailingBatchOp>());
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory);
  auto job = f.Job(stage);
  bool cancelled = false;
  const Batch batch = stage.Finish(*job, cancelled);
  EXPECT_EQ(batch.size(), 0);
  ASSERT_EQ(batch.errors.size(), 4u);
  EXPECT_NE(batch.errors[0].status.message().find("test.fail on batch"), std::string::npos);
  for (const Batch::Strings& column : batch.strings) EXPECT_TRUE(column.rows.empty());
}

// A layout with a ragged field ("tokens", i32 rows of 2: [?, 2]) and its lengths, a
// list's items ("views", u8 [3] each), and a fixed field.
struct RaggedFixture : Fixture {
  RaggedFixture() {
    fields = {FieldSpec{"tokens", DType::kI32, {2}, FieldLayout::kRagged},
              FieldSpec{"tokens_lengths", DType::kI32, {}, FieldLayout::kLengths},
              FieldSpec{"views", DType::kU8, {3}, FieldLayout::kItems},
              FieldSpec{"row", DType::kI64, {}}};
    strings.clear();
  }

  // Sample i appends i rows of tokens (values 100 i + row), in two entries for sample 3,
  // and i views (bytes 10 i + view).
  std::shared_ptr<BatchJob> Job(AssembleStage& stage) {
    auto job = std::make_shared<BatchJob>();
    for (int i = 0; i < 4; ++i) {
      job->records.push_back(&records[i]);
      job->sample_indices.push_back(i);
    }
    EXPECT_TRUE(stage.AllocateRows(*job).ok());
    EXPECT_EQ(job->ragged.size(), 4u);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(job->slots[i][0], nullptr) << "a ragged field has no row in place";
      *reinterpret_cast<int64_t*>(job->slots[i][3]) = i;
      const int entries = i == 3 ? 2 : 1;
      int row = 0;
      for (int e = 0; e < entries; ++e) {
        const int rows = i == 3 ? (e == 0 ? 1 : 2) : i;
        auto* out = reinterpret_cast<int32_t*>(*job->ragged[i].Append(0, rows));
        for (int r = 0; r < rows; ++r, ++row) out[2 * r] = out[2 * r + 1] = 100 * i + row;
      }
      for (int v = 0; v < i; ++v) {
        uint8_t* item = *job->ragged[i].Append(2, 1);
        item[0] = item[1] = item[2] = static_cast<uint8_t>(10 * i + v);
      }
    }
    return job;
  }
};

TEST(AssembleStage, RaggedRowsAndItemsAreConcatenatedInOrderWithTheirLengths) {
  RaggedFixture f;
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory);
  EXPECT_EQ(stage.BatchBytes(4), 4u * (8 + 8)) << "only the fixed fields are in place";
  auto job = f.Job(stage);
  job->status[1] = Status::CorruptData("bad");  // its row and view are dropped
  bool cancelled = true;
  const Batch batch = stage.Finish(*job, cancelled);
  ASSERT_EQ(batch.size(), 3);
  const Tensor* tokens = batch.Find("tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->shape(), (std::vector<int64_t>{5, 2}));  // 0 + 2 + 3 rows
  EXPECT_EQ(std::vector<int32_t>(tokens->data<int32_t>(), tokens->data<int32_t>() + 10),
            (std::vector<int32_t>{200, 200, 201, 201, 300, 300, 301, 301, 302, 302}));
  const Tensor* lengths = batch.Find("tokens_lengths");
  ASSERT_NE(lengths, nullptr);
  EXPECT_EQ(lengths->dtype(), DType::kI32);
  EXPECT_EQ(std::vector<int32_t>(lengths->data<int32_t>(),
                                 lengths->data<int32_t>() + lengths->numel()),
            (std::vector<int32_t>{0, 2, 1, 2})) << "one entry per append, sample 3 two";
  const Tensor* views = batch.Find("views");
  ASSERT_NE(views, nullptr);
  EXPECT_EQ(views->shape(), (std::vector<int64_t>{5, 3}));  // 0 + 2 + 3 items
  EXPECT_EQ(views->data<uint8_t>()[0], 20);
  EXPECT_EQ(views->data<uint8_t>()[3 * 4], 32);
  // The batch's bytes: its fixed rows and what it concatenated.
  EXPECT_EQ(job->bytes, static_cast<int64_t>(4 * 16 + tokens->nbytes() + lengths->nbytes() +
                                             views->nbytes()));
  EXPECT_EQ(stage.ConcatenatedBytesPerSample(),
            static_cast<int64_t>(tokens->nbytes() + lengths->nbytes() + views->nbytes()) / 3);
  EXPECT_TRUE(job->ragged.empty()) << "the samples' rows are released once joined";
}

TEST(AssembleStage, SamplesAreJoinedInSlotOrderAsTheyFinishAndTheirRowsFreed) {
  RaggedFixture f;
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory);
  ASSERT_TRUE(stage.joins());
  auto job = f.Job(stage);
  job->status[1] = Status::CorruptData("bad");
  const auto held = [&](int s) { return job->ragged[static_cast<size_t>(s)].held_bytes(); };
  ASSERT_GT(held(2), 0u);
  // Sample 2 finishes first: nothing before it is done, so it waits, rows and all.
  EXPECT_FALSE(stage.SampleDone(*job, 2));
  EXPECT_GT(held(2), 0u);
  // Sample 0: joined (freed); 1 is not done, so 2 still waits.
  EXPECT_FALSE(stage.SampleDone(*job, 0));
  EXPECT_EQ(held(0), 0u);
  EXPECT_GT(held(2), 0u);
  EXPECT_FALSE(stage.SampleDone(*job, 3));
  EXPECT_GT(held(3), 0u);
  // Sample 1 (failed) lets 2 and 3 through: this call joined the last, so it says so.
  EXPECT_TRUE(stage.SampleDone(*job, 1));
  for (int s = 0; s < 4; ++s) EXPECT_EQ(held(s), 0u) << s;
  bool cancelled = true;
  const Batch batch = stage.Finish(*job, cancelled);
  ASSERT_EQ(batch.size(), 3);
  const Tensor* tokens = batch.Find("tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(std::vector<int32_t>(tokens->data<int32_t>(), tokens->data<int32_t>() + 10),
            (std::vector<int32_t>{200, 200, 201, 201, 300, 300, 301, 301, 302, 302}));
  const Tensor* lengths = batch.Find("tokens_lengths");
  EXPECT_EQ(std::vector<int32_t>(lengths->data<int32_t>(),
                                 lengths->data<int32_t>() + lengths->numel()),
            (std::vector<int32_t>{0, 2, 1, 2}));
  EXPECT_EQ(batch.Find("views")->shape(), (std::vector<int64_t>{5, 3}));
}

TEST(AssembleStage, ManyThreadsFinishingSamplesJoinEachOnceAndOneAssembles) {
  RaggedFixture f;
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory);
  for (int round = 0; round < 200; ++round) {
    auto job = f.Job(stage);
    std::atomic<int> finishers{0};
    std::latch start(4);
    std::vector<std::thread> threads;
    for (int s = 0; s < 4; ++s) {
      threads.emplace_back([&, s] {
        start.arrive_and_wait();
        if (stage.SampleDone(*job, s)) ++finishers;
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(finishers.load(), 1) << "round " << round;
    bool cancelled = true;
    const Batch batch = stage.Finish(*job, cancelled);
    ASSERT_EQ(batch.Find("tokens")->shape(), (std::vector<int64_t>{6, 2})) << round;
    const int32_t* t = batch.Find("tokens")->data<int32_t>();
    ASSERT_EQ(std::vector<int32_t>(t, t + 12),
              (std::vector<int32_t>{100, 100, 200, 200, 201, 201, 300, 300, 301, 301, 302, 302}))
        << round;
  }
}

// Samples that tell their rows before they write them (the size pass: ReserveTold), as a
// chain does: after one batch was assembled, their rows are lent windows of the batch
// tensors (BatchPlacement).
struct PlacedFixture : RaggedFixture {
  struct Plan {
    int told = 0;      // token rows told
    int written = 0;   // token rows written (views: as many as written, told as told)
    bool fails = false;
  };
  // One batch of RaggedFixture's, so that the stage knows a mean batch.
  void Warm(AssembleStage& stage) {
    auto job = RaggedFixture::Job(stage);
    bool cancelled = false;
    (void)stage.Finish(*job, cancelled);
  }
  std::shared_ptr<BatchJob> Empty(AssembleStage& stage, int samples) {
    auto job = std::make_shared<BatchJob>();
    for (int i = 0; i < samples; ++i) {
      job->records.push_back(&records[static_cast<size_t>(i % 4)]);
      job->sample_indices.push_back(i);
    }
    EXPECT_TRUE(stage.AllocateRows(*job).ok());
    return job;
  }
  static void Tell(BatchJob& job, int s, const Plan& p) {
    RaggedRows& r = job.ragged[static_cast<size_t>(s)];
    std::vector<int64_t> told(static_cast<size_t>(r.fields()), 0);  // "index" included
    told[0] = told[2] = p.told;
    ASSERT_TRUE(r.ReserveTold(told).ok());
  }
  // Sample s's rows: tokens 1000 s + row, views (s, row) as bytes; where its first token
  // row went.
  static int32_t* Write(BatchJob& job, int s, const Plan& p) {
    RaggedRows& r = job.ragged[static_cast<size_t>(s)];
    *reinterpret_cast<int64_t*>(job.slots[static_cast<size_t>(s)][3]) = s;
    auto* out = reinterpret_cast<int32_t*>(*r.Append(0, p.written));
    for (int i = 0; i < p.written; ++i) out[2 * i] = out[2 * i + 1] = 1000 * s + i;
    for (int i = 0; i < p.written; ++i) {
      uint8_t* item = *r.Append(2, 1);
      item[0] = item[1] = static_cast<uint8_t>(s);
      item[2] = static_cast<uint8_t>(i);
    }
    if (p.fails) job.status[static_cast<size_t>(s)] = Status::CorruptData("bad");
    return p.written > 0 ? out : nullptr;
  }
  // Each sample tells its rows, then writes them, in slot order; where sample `traced`
  // wrote its first token row.
  static int32_t* TellAndWriteInOrder(BatchJob& job, const std::vector<Plan>& plans,
                                      int traced) {
    int32_t* first = nullptr;
    for (int s = 0; s < static_cast<int>(plans.size()); ++s) {
      Tell(job, s, plans[s]);
      int32_t* at = Write(job, s, plans[s]);
      if (s == traced) first = at;
    }
    return first;
  }
  // The batch's tokens and views must be the kept samples' rows in slot order.
  static void ExpectRows(const Batch& batch, const std::vector<Plan>& plans, int round) {
    std::vector<int32_t> tokens;
    std::vector<uint8_t> views;
    std::vector<int32_t> lengths;
    for (size_t s = 0; s < plans.size(); ++s) {
      if (plans[s].fails) continue;
      lengths.push_back(plans[s].written);
      for (int i = 0; i < plans[s].written; ++i) {
        tokens.push_back(1000 * static_cast<int32_t>(s) + i);
        tokens.push_back(1000 * static_cast<int32_t>(s) + i);
        views.insert(views.end(), {static_cast<uint8_t>(s), static_cast<uint8_t>(s),
                                   static_cast<uint8_t>(i)});
      }
    }
    const Tensor* t = batch.Find("tokens");
    const Tensor* v = batch.Find("views");
    const Tensor* l = batch.Find("tokens_lengths");
    ASSERT_EQ(t->numel(), static_cast<int64_t>(tokens.size())) << "round " << round;
    EXPECT_EQ(std::vector<int32_t>(t->data<int32_t>(), t->data<int32_t>() + t->numel()), tokens)
        << "round " << round;
    ASSERT_EQ(v->numel(), static_cast<int64_t>(views.size())) << "round " << round;
    EXPECT_EQ(std::vector<uint8_t>(v->data<uint8_t>(), v->data<uint8_t>() + v->numel()), views)
        << "round " << round;
    EXPECT_EQ(std::vector<int32_t>(l->data<int32_t>(), l->data<int32_t>() + l->numel()), lengths)
        << "round " << round;
  }
};

TEST(AssembleStage, RowsToldBeforeTheyAreWrittenAreWrittenInTheBatchTensorNotCopied) {
  PlacedFixture f;
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory);
  f.Warm(stage);
  auto job = f.Empty(stage, 4);
  const std::vector<PlacedFixture::Plan> plans{{0, 0}, {2, 2}, {3, 3}, {1, 1}};
  int32_t* first = f.TellAndWriteInOrder(*job, plans, 1);
  const int64_t copied_before = stage.bytes_copied();
  for (int s = 0; s < 4; ++s) EXPECT_EQ(stage.SampleDone(*job, s), s == 3);
  bool cancelled = true;
  const Batch batch = stage.Finish(*job, cancelled);
  f.ExpectRows(batch, plans, 0);
  EXPECT_EQ(job->placement.windows_lent(), 6) << "tokens and views of samples 1, 2 and 3";
  EXPECT_EQ(batch.Find("tokens")->data<int32_t>(), first) << "sample 1's rows, where it wrote them";
  EXPECT_EQ(stage.bytes_copied() - copied_before,
            static_cast<int64_t>(batch.Find("tokens_lengths")->nbytes()))
      << "only the lengths are copied";
}

TEST(AssembleStage, FromRegionsEvenTheFirstBatchIsWrittenInPlace) {
  // No batch assembled yet, so no mean: the block is guessed from the first window.
  PlacedFixture f;
  auto regions = std::make_shared<RegionAllocator>(size_t{64} << 20);
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, regions, f.memory);
  auto job = f.Empty(stage, 4);
  const std::vector<PlacedFixture::Plan> plans{{1, 1}, {2, 2}, {3, 3}, {2, 2}};
  int32_t* first = f.TellAndWriteInOrder(*job, plans, 0);
  for (int s = 0; s < 4; ++s) stage.SampleDone(*job, s);
  bool cancelled = true;
  const Batch batch = stage.Finish(*job, cancelled);
  f.ExpectRows(batch, plans, 0);
  EXPECT_EQ(job->placement.windows_lent(), 8) << "tokens and views of every sample";
  EXPECT_EQ(batch.Find("tokens")->data<int32_t>(), first);
  EXPECT_EQ(stage.bytes_copied(), static_cast<int64_t>(batch.Find("tokens_lengths")->nbytes()));
}

TEST(AssembleStage, RowsNotWhereTheyWereToldAreMovedAndNoWindowIsWrittenOver) {
  // Sample 2 tells before 0 (no window, its room kept); 1 tells 1 row and writes 3 (they
  // leave its window); 3 is in its window, past where 1's rows end up.
  PlacedFixture f;
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory);
  f.Warm(stage);
  auto job = f.Empty(stage, 4);
  const std::vector<PlacedFixture::Plan> plans{{1, 1}, {1, 3}, {2, 2}, {2, 2}};
  for (int s : {2, 0, 1, 3}) f.Tell(*job, s, plans[s]);
  EXPECT_EQ(job->placement.windows_lent(), 6) << "2 told first: no window";
  for (int s = 0; s < 4; ++s) f.Write(*job, s, plans[s]);
  for (int s : {3, 2, 0}) EXPECT_FALSE(stage.SampleDone(*job, s));
  EXPECT_TRUE(stage.SampleDone(*job, 1));
  bool cancelled = true;
  f.ExpectRows(stage.Finish(*job, cancelled), plans, 0);
}

TEST(AssembleStage, ASampleThatToldBeforeItsPredecessorIsWrittenInPlaceWhenItWritesAfter) {
  // Samples 1 and 3 tell before their predecessors (their size passes ran while those
  // did), and write once those have told: their rows are lent their windows then.
  PlacedFixture f;
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory);
  f.Warm(stage);
  auto job = f.Empty(stage, 4);
  const std::vector<PlacedFixture::Plan> plans{{2, 2}, {3, 3}, {1, 1}, {2, 2}};
  for (int s : {1, 0, 3, 2}) f.Tell(*job, s, plans[s]);
  EXPECT_EQ(job->placement.windows_lent(), 4) << "samples 0 and 2, at the tell";
  int32_t* first = nullptr;
  for (int s = 0; s < 4; ++s) {
    int32_t* at = f.Write(*job, s, plans[s]);
    if (s == 0) first = at;
  }
  EXPECT_EQ(job->placement.windows_lent(), 8) << "the others' when they wrote";
  const int64_t copied_before = stage.bytes_copied();
  for (int s = 0; s < 4; ++s) stage.SampleDone(*job, s);
  bool cancelled = true;
  const Batch batch = stage.Finish(*job, cancelled);
  f.ExpectRows(batch, plans, 0);
  EXPECT_EQ(batch.Find("tokens")->data<int32_t>(), first);
  EXPECT_EQ(stage.bytes_copied() - copied_before,
            static_cast<int64_t>(batch.Find("tokens_lengths")->nbytes()))
      << "only the lengths are copied";
}

TEST(AssembleStage, AnyOrderOfTellingWritingFailingAndFinishingJoinsTheKeptRowsInOrder) {
  PlacedFixture f;
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory);
  f.Warm(stage);
  std::mt19937 rng(7);
  int64_t lent = 0;
  for (int round = 0; round < 500; ++round) {
    const int n = 1 + static_cast<int>(rng() % 6);
    auto job = f.Empty(stage, n);
    std::vector<PlacedFixture::Plan> plans(static_cast<size_t>(n));
    for (auto& p : plans) {
      p.told = static_cast<int>(rng() % 5);
      p.written = rng() % 3 == 0 ? static_cast<int>(rng() % 5) : p.told;
      p.fails = rng() % 6 == 0;
    }
    std::vector<int> order(static_cast<size_t>(n));
    for (int s = 0; s < n; ++s) order[static_cast<size_t>(s)] = s;
    std::shuffle(order.begin(), order.end(), rng);
    for (int s : order) f.Tell(*job, s, plans[s]);
    std::shuffle(order.begin(), order.end(), rng);
    for (int s : order) f.Write(*job, s, plans[s]);
    std::shuffle(order.begin(), order.end(), rng);
    int finishers = 0;
    for (int s : order) finishers += stage.SampleDone(*job, s) ? 1 : 0;
    ASSERT_EQ(finishers, 1);
    lent += job->placement.windows_lent();
    bool cancelled = true;
    f.ExpectRows(stage.Finish(*job, cancelled), plans, round);
  }
  EXPECT_GT(lent, 500) << "windows were lent";
}

TEST(AssembleStage, SamplesOnManyThreadsWriteTheirRowsInPlaceAndOneAssembles) {
  PlacedFixture f;
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory);
  f.Warm(stage);
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    auto job = f.Empty(stage, 4);
    std::vector<PlacedFixture::Plan> plans(4);
    for (auto& p : plans) {
      p.told = static_cast<int>(rng() % 4);
      p.written = rng() % 4 == 0 ? static_cast<int>(rng() % 4) : p.told;
    }
    std::atomic<int> finishers{0};
    std::latch start(4);
    std::vector<std::thread> threads;
    for (int s = 0; s < 4; ++s) {
      threads.emplace_back([&, s] {
        start.arrive_and_wait();
        f.Tell(*job, s, plans[s]);
        f.Write(*job, s, plans[s]);
        if (stage.SampleDone(*job, s)) ++finishers;
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(finishers.load(), 1) << "round " << round;
    bool cancelled = true;
    f.ExpectRows(stage.Finish(*job, cancelled), plans, round);
  }
}

TEST(AssembleStage, ABatchWhoseSamplesAllFailHasEmptyConcatenatedFields) {
  RaggedFixture f;
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory);
  auto job = f.Job(stage);
  for (Status& s : job->status) s = Status::CorruptData("bad");
  bool cancelled = true;
  const Batch batch = stage.Finish(*job, cancelled);
  EXPECT_EQ(batch.size(), 0);
  EXPECT_EQ(batch.errors.size(), 4u);
  EXPECT_EQ(batch.Find("tokens")->shape(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(batch.Find("tokens_lengths")->shape(), (std::vector<int64_t>{0}));
}

TEST(AssembleStage, KeepSampleRowsHandsEachKeptSamplesRowsOverUnjoined) {
  RaggedFixture f;
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory,
                      /*keep_sample_rows=*/true);
  auto job = f.Job(stage);
  job->status[1] = Status::CorruptData("bad");
  bool cancelled = true;
  const Batch batch = stage.Finish(*job, cancelled);
  ASSERT_EQ(batch.size(), 3);
  // The concatenated fields have no rows; each kept sample's rows are in sample_rows.
  EXPECT_EQ(batch.Find("tokens")->shape(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(batch.Find("views")->shape(), (std::vector<int64_t>{0, 3}));
  ASSERT_EQ(batch.sample_rows.size(), 3u);
  const int tokens = 0;  // the RaggedFixture's field order: tokens first
  EXPECT_EQ(batch.sample_rows[0]->rows(tokens), 0);
  EXPECT_EQ(batch.sample_rows[1]->rows(tokens), 2);  // sample 2
  EXPECT_EQ(batch.sample_rows[2]->rows(tokens), 3);  // sample 3, in two entries
  const auto l = batch.sample_rows[2]->lengths(tokens);
  EXPECT_EQ(std::vector<int32_t>(l.begin(), l.end()), (std::vector<int32_t>{1, 2}));
  const auto b = batch.sample_rows[1]->bytes(tokens);
  ASSERT_EQ(b.size(), 2u * 2 * sizeof(int32_t));
  int32_t first = 0;
  std::memcpy(&first, b.data(), sizeof first);
  EXPECT_EQ(first, 200);
  // What the batch holds is still counted: its fixed rows and the samples' rows.
  size_t rows_bytes = 0;
  for (const auto& r : batch.sample_rows) rows_bytes += r->held_bytes();
  EXPECT_EQ(job->bytes, static_cast<int64_t>(4 * 16 + rows_bytes));
  EXPECT_EQ(batch.nbytes(), 3u * 16 + rows_bytes);
}

class PassingBatchOp final : public BatchOp {
 public:
  std::string_view name() const override { return "test.pass"; }
  Status Run(Batch&, uint64_t) const override { return Status::Ok(); }
};

TEST(AssembleStage, KeepSampleRowsIsIgnoredWithBatchOps) {
  RaggedFixture f;
  f.batch_ops.push_back(std::make_unique<PassingBatchOp>());
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory, f.memory,
                      /*keep_sample_rows=*/true);
  auto job = f.Job(stage);
  bool cancelled = true;
  const Batch batch = stage.Finish(*job, cancelled);
  EXPECT_TRUE(batch.sample_rows.empty()) << "a batch op sees the joined fields";
  EXPECT_EQ(batch.Find("tokens")->shape()[0], 6);  // 0 + 1 + 2 + 3 rows
}

}  // namespace assemble_stage_test
}  // namespace headrace
