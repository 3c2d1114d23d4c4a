#include "headrace/pipeline/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "headrace/io/loopback_server.h"
#include "headrace/pipeline/test_pipelines.h"

namespace headrace {
namespace {

using test::IndexPipeline;
using ::testing::AllOf;
using ::testing::HasSubstr;

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

TEST(ResolveIoInflight, AutomaticIsCappedWithoutOverflow) {
  ExecutionSpec ex;
  EXPECT_EQ(ResolveIoInflight(ex, 1024), kMaxAutoIoInflight);
  EXPECT_EQ(ResolveIoInflight(ex, 2'000'000'000), kMaxAutoIoInflight);  // 16 x 2e9 > INT_MAX
}

// Serves a one-line manifest. Every other read fails, at once or, with `hold`, when
// Release() is called: until then the engine's reads stay in flight and the consumer
// waits.
class ManifestStorage final : public Storage {
 public:
  explicit ManifestStorage(bool hold = false) : hold_(hold) {}

  void ReadAsync(std::string uri, ReadCallback done) override {
    if (uri == "m.jsonl") {
      const std::string line =
          R"({"id": "a", "image": "a.jpg", "conversations": [{"from": "human", "value": "hi"}]})";
      return done(*Buffer::CopyOf(line.data(), line.size()));
    }
    {
      std::lock_guard lock(mu_);
      if (hold_) {
        held_.push_back(std::move(done));
        cv_.notify_all();
        return;
      }
    }
    done(Status::IoError("released"));
  }
  std::string_view name() const override { return "manifest"; }

  void WaitForARead() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !held_.empty(); });
  }
  void Release() {
    std::vector<ReadCallback> held;
    {
      std::lock_guard lock(mu_);
      hold_ = false;
      held.swap(held_);
    }
    for (ReadCallback& done : held) done(Status::IoError("released"));
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_;                       // guarded by mu_
  std::vector<ReadCallback> held_;  // guarded by mu_
};

class NoOp final : public Op {
 public:
  std::string_view name() const override { return "noop"; }
  Status Run(SampleContext&) const override { return Status::Ok(); }
};

PipelineSpec ImageSpec(int crop) {
  PipelineSpec spec;
  spec.source.manifest = "m.jsonl";
  spec.batch.size = 32;
  spec.ops = {DecodeSpec{}, CenterCropSpec{crop, crop}, NormalizeSpec{}};
  spec.memory.budget_bytes = int64_t{1} << 30;
  spec.execution.cpu_threads = 1;
  return spec;
}

TEST(Loader, ABatchOverTheBudgetNamesTheKeyThatSetsItsSize) {
  auto storage = std::make_shared<ManifestStorage>();
  // 32 x 3 x 16384 x 16384 f32: 96 GiB, against 896 MiB left for batches.
  auto loader = Loader::Make(ImageSpec(16384), {.storage = storage});
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(loader.status().message(),
              AllOf(HasSubstr("ops[1].image.center_crop.size 16384: a batch of 32 samples would "
                              "take 103079215360 bytes, more than the 939524096"),
                    HasSubstr("memory.budget_bytes 1073741824"),
                    HasSubstr("lower it or batch.size, or raise memory.budget_bytes")));
}

TEST(Loader, SizeProductsThatOverflowAreCaughtNotWrapped) {
  auto storage = std::make_shared<ManifestStorage>();
  PipelineSpec spec = ImageSpec(8);
  UserOpSpec user;
  user.name = "huge";
  // 2^40 x 2^40 x 4 bytes: wraps to 0 in 64 bits.
  user.fields = {FieldSpec{"x", DType::kF32, {int64_t{1} << 40, int64_t{1} << 40}}};
  user.make = [](const UserOpBinding&) -> Result<std::unique_ptr<Op>> {
    return std::unique_ptr<Op>(std::make_unique<NoOp>());
  };
  spec.ops = {user};
  auto loader = Loader::Make(spec, {.storage = storage});
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(loader.status().message(),
              AllOf(HasSubstr("ops[0].fields[0] (huge, x) shape 1099511627776x1099511627776"),
                    HasSubstr("would take more than 9223372036854775807 bytes")));
}

TEST(Loader, CancelFromAnotherThreadEndsABlockedNext) {
  auto storage = std::make_shared<ManifestStorage>(/*hold=*/true);
  auto loader = Loader::Make(ImageSpec(8), {.storage = storage});
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  std::thread canceller([&] {
    storage->WaitForARead();  // the engine is running; the consumer waits for batch 0
    (*loader)->Cancel();
  });
  auto batch = (*loader)->Next();
  canceller.join();
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), StatusCode::kCancelled);
  EXPECT_EQ((*loader)->Next().status().code(), StatusCode::kCancelled);
  storage->Release();  // the reads in flight end; the loader then joins its threads
}

// Closing a loader whose reads hang at the object store returns at once: the engine tells
// the storage its reads are no longer wanted (storage.h, kReadStillWanted) instead of
// waiting out a first-byte timeout of ten minutes for each.
TEST(Loader, ClosingDoesNotWaitOutReadsHungAtTheObjectStore) {
  auto server = *LoopbackServer::Start();
  std::string manifest;
  for (int i = 0; i < 8; ++i) {
    const std::string name = "hung" + std::to_string(i) + ".jpg";
    server->Put("/bkt/" + name, *Buffer::Allocate(100));
    server->SetFault("/bkt/" + name, LoopbackFault::kHang);
    manifest += R"({"id": ")" + std::to_string(i) + R"(", "image": ")" + name +
                R"(", "conversations": [{"from": "human", "value": "hi"}]})" + "\n";
  }
  Buffer bytes = *Buffer::Allocate(manifest.size());
  std::memcpy(bytes.mutable_data(), manifest.data(), manifest.size());
  server->Put("/bkt/m.jsonl", bytes);
  PipelineSpec spec = ImageSpec(8);
  spec.source.manifest = "s3://bkt/m.jsonl";
  spec.storage.endpoint = server->origin();
  spec.storage.anonymous = true;
  spec.storage.first_byte_timeout_ms = 600'000;
  auto loader = Loader::Make(spec);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  // The manifest, then the first image read (the engine sizes its reads by the first
  // object's size, so it issues one until then): in flight, hung.
  while (server->stats().requests < 2) std::this_thread::yield();
  loader->reset();  // cancels and joins: returns only once every read has ended
  SUCCEED();
}

}  // namespace
}  // namespace headrace
