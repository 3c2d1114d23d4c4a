#include "headrace/exec/chain_stage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

namespace headrace {
namespace chain_stage_test {

// Writes the sample's index and the size of its first media item into its row.
class RowOp final : public Op {
 public:
  std::string_view name() const override { return "test.row"; }
  Status Run(SampleContext& ctx) const override {
    auto* row = reinterpret_cast<int64_t*>(ctx.rows[0]);
    row[0] = ctx.sample->index;
    const Buffer* media = ctx.sample->MediaOf(0);
    row[1] = media == nullptr ? -1 : static_cast<int64_t>(media->size());
    if (ctx.sample->index == 2) return Status::CorruptData("bad");
    return Status::Ok();
  }
};

struct Finished {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<int, Status>> done;
  std::vector<int64_t> released;
  bool released_first = true;  // every sample's bytes released before its done
};

TEST(ChainStage, RunsFillAndTheChainReleasesTheBytesThenReportsEachSample) {
  std::vector<OpChain> chains(1);
  chains[0].ops.push_back(std::make_unique<RowOp>());
  std::vector<SampleRecord> records(3);
  for (auto& r : records) r.media = {MediaRef{0, "m"}};
  auto source = MakeRecordSource(std::make_shared<VectorRecords>(
                                     std::make_shared<std::vector<SampleRecord>>(records)),
                                 nullptr);
  auto job = std::make_shared<BatchJob>();
  std::vector<std::vector<int64_t>> rows(3, std::vector<int64_t>(2, 0));
  for (int s = 0; s < 3; ++s) {
    job->records.push_back(&records[s]);
    job->sample_indices.push_back(s);
    job->slots.push_back({reinterpret_cast<uint8_t*>(rows[s].data())});
  }
  Finished f;
  std::stop_source stop;
  ChainStage stage(*source, chains, ChainStageOptions{.threads = 2}, stop.get_token(),
                   [&](int64_t charged) {
                     std::lock_guard lock(f.mu);
                     f.released.push_back(charged);
                   },
                   [&](const std::shared_ptr<BatchJob>&, int slot, Status status) {
                     std::lock_guard lock(f.mu);
                     f.released_first &= std::count(f.released.begin(), f.released.end(),
                                                    5 + slot) == 1;
                     f.done.emplace_back(slot, std::move(status));
                     f.cv.notify_all();
                   });
  for (int s = 0; s < 3; ++s) {
    std::vector<Buffer> media;
    media.push_back(*Buffer::Allocate(static_cast<size_t>(5 + s)));
    stage.Submit(job, s, std::move(media), 5 + s);
  }
  std::unique_lock lock(f.mu);
  f.cv.wait(lock, [&] { return f.done.size() == 3; });
  for (const auto& [slot, status] : f.done) {
    EXPECT_EQ(status.ok(), slot != 2) << slot;
    EXPECT_EQ(rows[slot][0], slot);
    EXPECT_EQ(rows[slot][1], 5 + slot);  // the source's Fill put the bytes in place
  }
  EXPECT_TRUE(f.released_first);
  std::sort(f.released.begin(), f.released.end());
  EXPECT_EQ(f.released, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(stage.samples_run(), 3);
  EXPECT_EQ(stage.OpsMetrics()[0].items, 3);
}

TEST(ChainStage, AfterStopASampleIsCancelledWithoutRunningAndItsBytesReleased) {
  std::vector<OpChain> chains(1);
  chains[0].ops.push_back(std::make_unique<RowOp>());
  std::vector<SampleRecord> records(1);
  auto source = MakeRecordSource(std::make_shared<VectorRecords>(
                                     std::make_shared<std::vector<SampleRecord>>(records)),
                                 nullptr);
  auto job = std::make_shared<BatchJob>();
  std::vector<int64_t> row(2, 7);
  job->records.push_back(&records[0]);
  job->sample_indices.push_back(0);
  job->slots.push_back({reinterpret_cast<uint8_t*>(row.data())});
  Finished f;
  std::stop_source stop;
  stop.request_stop();
  ChainStage stage(*source, chains, ChainStageOptions{}, stop.get_token(),
                   [&](int64_t charged) {
                     std::lock_guard lock(f.mu);
                     f.released.push_back(charged);
                   },
                   [&](const std::shared_ptr<BatchJob>&, int slot, Status status) {
                     std::lock_guard lock(f.mu);
                     f.done.emplace_back(slot, std::move(status));
                     f.cv.notify_all();
                   });
  stage.Submit(job, 0, {}, 9);
  std::unique_lock lock(f.mu);
  f.cv.wait(lock, [&] { return f.done.size() == 1; });
  EXPECT_EQ(f.done[0].second.code(), StatusCode::kCancelled);
  EXPECT_EQ(f.released, std::vector<int64_t>{9});
  EXPECT_EQ(row[0], 7);  // the chain did not run
  EXPECT_EQ(stage.samples_run(), 0);
}

}  // namespace chain_stage_test
}  // namespace headrace
