#include "headrace/exec/assemble_stage.h"

#include <gtest/gtest.h>

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
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory);
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
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory);
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
  AssembleStage stage(f.fields, f.strings, f.batch_ops, 1, f.memory);
  auto job = f.Job(stage);
  bool cancelled = false;
  const Batch batch = stage.Finish(*job, cancelled);
  EXPECT_EQ(batch.size(), 0);
  ASSERT_EQ(batch.errors.size(), 4u);
  EXPECT_NE(batch.errors[0].status.message().find("test.fail on batch"), std::string::npos);
  for (const Batch::Strings& column : batch.strings) EXPECT_TRUE(column.rows.empty());
}

}  // namespace assemble_stage_test
}  // namespace headrace
