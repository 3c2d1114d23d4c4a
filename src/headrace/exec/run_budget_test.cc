#include "headrace/exec/run_budget.h"

#include <gtest/gtest.h>

#include <cstring>

namespace headrace {
namespace run_budget_test {

// A blend of two entries: indices 0-99 are "a"'s, 100-199 "b"'s.
int EntryOfIndex(int64_t index) { return index < 100 ? 0 : 1; }
const EntryOf kEntryOf = EntryOfIndex;

RunBudgetOptions Blend(std::optional<double> b_rate) {
  RunBudgetOptions o;
  o.max_error_rate = 1.0;
  o.min_samples = 1;
  o.entries = {"a", "b"};
  o.entry_max_error_rate = {std::nullopt, b_rate};
  return o;
}

// A batch of the samples `rows` (its "index" field) and of failed samples `failed`.
Batch MakeBatch(std::vector<int64_t> rows, std::vector<int64_t> failed) {
  Batch b;
  auto tensor = Tensor::Allocate(DType::kI64, {static_cast<int64_t>(rows.size())});
  std::memcpy(tensor->mutable_data<int64_t>(), rows.data(), rows.size() * sizeof(int64_t));
  b.fields.emplace_back("index", *std::move(tensor));
  for (int64_t i : failed) {
    b.errors.push_back(SampleError{0, i, "img" + std::to_string(i), Status::CorruptData("bad")});
  }
  return b;
}

std::vector<std::string> Texts(const Batch& batch) {
  std::vector<std::string> out;
  for (const SampleError& e : batch.errors) out.push_back(e.ToString());
  return out;
}

TEST(RunBudget, CountsABatchsRowsAndErrorsInTheRunAndInTheirEntryOnce) {
  RunBudget budget(Blend(std::nullopt));
  budget.Count(MakeBatch({1, 2, 150}, {3, 160, 170}), kEntryOf);
  EXPECT_EQ(budget.run().counts().delivered, 3);
  EXPECT_EQ(budget.run().counts().failed, 3);
  const std::vector<EntryCounts> entries = budget.entry_counts();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].name, "a");
  EXPECT_EQ(entries[0].counts.delivered, 2);
  EXPECT_EQ(entries[0].counts.failed, 1);
  EXPECT_EQ(entries[1].name, "b");
  EXPECT_EQ(entries[1].counts.delivered, 1);
  EXPECT_EQ(entries[1].counts.failed, 2);
  EXPECT_TRUE(budget.Check(true).ok());  // no entry has a rate of its own; the run's is 1
}

TEST(RunBudget, AShardSkippedAtOpenCountsInTheRunsBudgetAndInNoEntrys) {
  RunBudget budget(Blend(std::nullopt));
  Batch batch = MakeBatch({150, 151}, {});
  // Shard 1 of b's list: its index is its place in that list, which is no sample of b's.
  batch.errors.push_back(SampleError{0, 1, "/d/b-1.tar", Status::ShardError("shard 1 skipped")});
  const BatchTally tally = RunBudget::Tally(batch, kEntryOf, 2);
  ASSERT_EQ(tally.errors.size(), 1u);
  EXPECT_EQ(tally.errors[0].entry, BatchTally::kNoEntry);
  EXPECT_EQ(tally.errors[0].kind, "shard_error");
  budget.Count(batch, kEntryOf);
  EXPECT_EQ(budget.run().counts().failed, 1);
  EXPECT_EQ(budget.run().by_kind().at("shard_error"), 1);
  for (const EntryCounts& e : budget.entry_counts()) EXPECT_EQ(e.counts.failed, 0) << e.name;
  EXPECT_EQ(budget.entry_counts()[1].counts.delivered, 2);
}

TEST(RunBudget, AnEntryPastItsOwnRateStopsTheRunNamingTheEntryAndItsKey) {
  RunBudget budget(Blend(0.1));
  budget.Count(MakeBatch({1, 2, 3, 4, 150, 151, 152, 153}, {}), kEntryOf);
  EXPECT_TRUE(budget.Check(false).ok());
  budget.Count(MakeBatch({5, 6}, {154}), kEntryOf);  // b: 1 of 5 failed, above 10%
  const Status s = budget.Check(false);
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "source.mix[1] (b): too many bad samples: 1 of 5 samples failed (20%), above "
            "source.mix[1].max_error_rate 10%; by kind: corrupt_data=1; first: epoch 0, index "
            "154, img154: corrupt_data: bad");
}

TEST(RunBudget, TheRunsBudgetIsCheckedBeforeAnEntrys) {
  RunBudgetOptions o = Blend(0.1);
  o.max_error_rate = 0.1;
  RunBudget budget(o);
  budget.Count(MakeBatch({150}, {151}), kEntryOf);
  const Status s = budget.Check(false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("too many bad samples: 1 of 2", 0), 0u) << s.ToString();
}

// A Ray worker tallies the batch it computed; its rank counts the tally with the errors'
// text: the counts, the verdict and its message are those of the batch counted whole.
TEST(RunBudget, ATallyCountedWhereTheBatchIsConsumedGivesTheWholeBatchsVerdict) {
  const Batch first = MakeBatch({1, 2, 150, 151}, {152});
  Batch second = MakeBatch({3, 153}, {4, 154});
  second.errors.insert(second.errors.begin(),
                       SampleError{0, 0, "/d/b-0.tar", Status::ShardError("shard 0 skipped")});
  RunBudget whole(Blend(0.2));
  RunBudget tallied(Blend(0.2));
  for (const Batch* batch : {&first, static_cast<const Batch*>(&second)}) {
    whole.Count(*batch, kEntryOf);
    ASSERT_TRUE(tallied.Count(RunBudget::Tally(*batch, kEntryOf, 2), Texts(*batch)).ok());
  }
  EXPECT_EQ(tallied.run().counts().delivered, whole.run().counts().delivered);
  EXPECT_EQ(tallied.run().counts().failed, whole.run().counts().failed);
  EXPECT_EQ(tallied.run().by_kind(), whole.run().by_kind());
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(tallied.entry_counts()[s].counts.delivered, whole.entry_counts()[s].counts.delivered);
    EXPECT_EQ(tallied.entry_counts()[s].counts.failed, whole.entry_counts()[s].counts.failed);
  }
  const Status want = whole.Check(false);
  ASSERT_FALSE(want.ok());
  EXPECT_EQ(tallied.Check(false).ToString(), want.ToString());
  EXPECT_NE(want.message().find("source.mix[1] (b)"), std::string::npos) << want.ToString();
}

TEST(RunBudget, ATallyThatDoesNotMatchItsBatchCountsNothing) {
  RunBudget budget(Blend(std::nullopt));
  const Batch batch = MakeBatch({1}, {2});
  const BatchTally tally = RunBudget::Tally(batch, kEntryOf, 2);
  EXPECT_EQ(budget.Count(tally, {}).code(), StatusCode::kInvalidArgument);
  BatchTally three = tally;
  three.entry_delivered.push_back(0);
  EXPECT_EQ(budget.Count(three, Texts(batch)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(budget.run().counts().attempted(), 0);
}

TEST(RunBudget, ASampleLostAfterDeliveryMovesToFailedInItsEntry) {
  RunBudget budget(Blend(0.3));
  budget.Count(MakeBatch({1, 150, 151}, {}), kEntryOf);
  const std::vector<LostSample> lost = {
      LostSample{SampleError{0, 150, "x", Status::InvalidArgument("cut")}, true}};
  budget.CountLost(lost, kEntryOf);
  EXPECT_EQ(budget.run().counts().delivered, 2);
  EXPECT_EQ(budget.run().counts().failed, 1);
  EXPECT_EQ(budget.entry_counts()[0].counts.failed, 0);
  EXPECT_EQ(budget.entry_counts()[1].counts.delivered, 1);
  EXPECT_EQ(budget.entry_counts()[1].counts.failed, 1);
  EXPECT_NE(budget.Check(false).message().find("source.mix[1] (b): too many bad samples: 1 of 2"),
            std::string::npos);
}

TEST(RunBudget, WithoutABlendOnlyTheRunsBudgetCounts) {
  RunBudgetOptions o;
  o.max_error_rate = 0.1;
  o.min_samples = 1;
  RunBudget budget(o);
  const Batch batch = MakeBatch({1, 2, 3}, {4});
  const BatchTally tally = RunBudget::Tally(batch, nullptr, 0);
  EXPECT_TRUE(tally.entry_delivered.empty());
  ASSERT_TRUE(budget.Count(tally, Texts(batch)).ok());
  EXPECT_TRUE(budget.entry_counts().empty());
  const Status s = budget.Check(false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("too many bad samples: 1 of 4", 0), 0u) << s.ToString();
}

}  // namespace run_budget_test
}  // namespace headrace
