#include "headrace/pipeline/loader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace headrace {
namespace {

// Writes each sample's dataset index into the field "copy".
class IndexOp final : public Op {
 public:
  std::string_view name() const override { return "test.index"; }
  Status Run(SampleContext& ctx) const override {
    *reinterpret_cast<int64_t*>(ctx.slots[0]) = ctx.sample->index;
    return Status::Ok();
  }
};

// A text-only pipeline over `samples` records whose only op is IndexOp.
PipelineSpec IndexPipeline(const std::filesystem::path& dir, int samples) {
  std::filesystem::create_directories(dir);
  std::ofstream manifest(dir / "m.jsonl");
  for (int i = 0; i < samples; ++i) {
    manifest << R"({"id": ")" << i
             << R"(", "conversations": [{"from": "human", "value": "hi"}]})" << "\n";
  }
  PipelineSpec spec;
  spec.source.manifest = (dir / "m.jsonl").string();
  spec.batch.size = 4;
  spec.epochs = std::nullopt;
  spec.execution.cpu_threads = 2;
  UserOpSpec op;
  op.name = "test.index";
  op.fields = {FieldSpec{"copy", DType::kI64, {1}}};
  op.make = [](int, int) -> Result<std::unique_ptr<Op>> {
    return std::unique_ptr<Op>(std::make_unique<IndexOp>());
  };
  spec.ops = {op};
  return spec;
}

std::vector<int64_t> Rows(const Batch& batch) {
  const Tensor* t = batch.Find("copy");
  return {t->data<int64_t>(), t->data<int64_t>() + t->numel()};
}

TEST(Loader, StartsAtABatchOfAnEpochAsTheUninterruptedRunHasIt) {
  const PipelineSpec spec =
      IndexPipeline(std::filesystem::path(testing::TempDir()) / "loader_start", 10);
  auto full = Loader::Make(spec);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ((*full)->batches_per_epoch(), 3);
  EXPECT_EQ((*full)->total_batches(), EpochOrder::kUnboundedBatches);
  std::vector<Batch> run;
  for (int i = 0; i < 9; ++i) {
    auto next = (*full)->Next();
    ASSERT_TRUE(next.ok() && next->has_value());
    run.push_back(std::move(**next));
  }
  LoaderOptions at;
  at.start_epoch = 2;
  at.start_batch = 1;
  auto resumed = Loader::Make(spec, at);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  for (int k = 7; k < 9; ++k) {
    auto next = (*resumed)->Next();
    ASSERT_TRUE(next.ok() && next->has_value());
    EXPECT_EQ((*next)->epoch, 2);
    EXPECT_EQ((*next)->global_index, run[k].global_index);
    EXPECT_EQ(Rows(**next), Rows(run[k]));
  }
  at.start_epoch = -1;
  EXPECT_FALSE(Loader::Make(spec, at).ok());
}

TEST(ResolveIoInflight, KeepsAnExplicitValue) {
  ExecutionSpec ex;
  ex.io_inflight = 7;
  EXPECT_EQ(ResolveIoInflight(ex, 64), 7);
}

TEST(ResolveIoInflight, AutomaticIsSixteenPerCpuThreadButAtLeastThirtyTwo) {
  ExecutionSpec ex;
  EXPECT_EQ(ex.io_inflight, 0);  // the default is automatic
  EXPECT_EQ(ResolveIoInflight(ex, 1), 32);
  EXPECT_EQ(ResolveIoInflight(ex, 2), 32);
  EXPECT_EQ(ResolveIoInflight(ex, 3), 48);
  EXPECT_EQ(ResolveIoInflight(ex, 16), 256);
  EXPECT_EQ(ResolveIoInflight(ex, 0), 32);
}

}  // namespace
}  // namespace headrace
