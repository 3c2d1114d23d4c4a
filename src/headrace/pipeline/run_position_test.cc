#include "headrace/pipeline/run_position.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "headrace/pipeline/prepared.h"
#include "headrace/pipeline/test_pipelines.h"

namespace headrace {
namespace {

using ::testing::HasSubstr;

// Rank `rank` of 2, batch size 4, at batch 3 of epoch 1, of an epoch of 10 batches a rank.
LoaderState At(int64_t rank, int64_t batch = 3) {
  LoaderState s;
  s.rank = rank;
  s.world_size = 2;
  s.batch_size = 4;
  s.epoch = 1;
  s.batch_in_epoch = batch;
  s.batches_per_epoch = 10;
  return s;
}

// An epoch of 80 samples over two ranks of batch size 4.
StateBounds Bounds() { return {.num_samples = 80, .epoch_samples = 80, .batches_per_epoch = 20}; }

std::string Refusal(const LoaderState& s, const std::optional<StateBounds>& bounds = Bounds()) {
  const Status st = CheckLoaderState(s, bounds);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  return st.message();
}

TEST(CheckLoaderState, AcceptsWhatALoaderWrites) {
  EXPECT_TRUE(CheckLoaderState(At(1), Bounds()).ok());
  EXPECT_TRUE(CheckLoaderState(At(1, 10), Bounds()).ok());  // after the epoch's last batch
  LoaderState s = At(0);
  s.batches_per_epoch.reset();  // before the first engine ran
  s.batch_in_epoch = 0;
  EXPECT_TRUE(CheckLoaderState(s, Bounds()).ok());
  s = At(0);
  s.pack = PackState{.epoch = 1, .from_batch = 2, .next_batch = 3, .waiting = {7, 9, 11}};
  EXPECT_TRUE(CheckLoaderState(s, Bounds()).ok());
}

TEST(CheckLoaderState, RefusesSizesBelowOne) {
  LoaderState s = At(0);
  s.world_size = 0;
  EXPECT_THAT(Refusal(s), HasSubstr("world_size: 0 (allowed: >= 1)"));
  s = At(0);
  s.batch_size = 0;
  EXPECT_THAT(Refusal(s), HasSubstr("batch_size: 0 (allowed: >= 1)"));
  s = At(0);
  s.batches_per_epoch = 0;
  EXPECT_THAT(Refusal(s), HasSubstr("batches_per_epoch: 0 (allowed: >= 1"));
  s = At(2);
  EXPECT_THAT(Refusal(s), HasSubstr("rank: 2 (allowed: [0, world_size 2))"));
}

TEST(CheckLoaderState, RefusesAPositionOutsideTheEpoch) {
  EXPECT_THAT(Refusal(At(0, 11)), HasSubstr("batch_in_epoch: 11 is outside the epoch"));
  EXPECT_THAT(Refusal(At(0, -1)), HasSubstr("batch_in_epoch: -1"));
  LoaderState s = At(0, int64_t{1} << 62);
  s.batches_per_epoch.reset();
  EXPECT_THAT(Refusal(s, std::nullopt), HasSubstr("batch_in_epoch"));
}

TEST(CheckLoaderState, RefusesABatchesPerEpochThatIsNotThePipelines) {
  LoaderState s = At(0, 5);
  s.batches_per_epoch = 5;  // would end the epoch at once
  EXPECT_THAT(Refusal(s), HasSubstr("batches_per_epoch: saved 5, this loader 10"));
  EXPECT_TRUE(CheckLoaderState(s, std::nullopt).ok());  // only the pipeline knows
}

TEST(CheckLoaderState, RefusesALyingPackWindow) {
  LoaderState s = At(0);
  s.pack = PackState{.epoch = 1, .from_batch = 2, .next_batch = 3, .waiting = {0, 0}};
  EXPECT_THAT(Refusal(s), HasSubstr("pack.waiting: index 0 appears more than once"));
  s.pack->waiting = {80};
  EXPECT_THAT(Refusal(s), HasSubstr("pack.waiting: index 80 is outside the dataset"));
  s.pack->waiting = {1, 2, 3, 4, 5};  // one input batch holds 4
  s.pack->from_batch = 3;
  EXPECT_THAT(Refusal(s), HasSubstr("pack.waiting: 5 samples"));
  s.pack->waiting = {1};
  s.pack->delivered = int64_t{1} << 40;
  EXPECT_THAT(Refusal(s), HasSubstr("pack.delivered: 1099511627776 (allowed: [0, batch_size 4]"));
  s.pack->delivered = 0;
  s.batches_per_epoch = int64_t{1} << 62;  // a window size past int64 is no overflow
  s.batch_size = int64_t{1} << 30;
  s.pack->next_batch = int64_t{1} << 61;
  s.pack->from_batch = 0;
  EXPECT_TRUE(CheckLoaderState(s, std::nullopt).ok());
  s = At(0);
  s.pack = PackState{.epoch = 1, .from_batch = 3, .next_batch = 3, .waiting = {1}};
  s.pack->next_batch = 2;
  EXPECT_THAT(Refusal(s), HasSubstr("from_batch 3, next_batch 2"));
}

TEST(CheckLoaderState, RefusesALyingRemainder) {
  LoaderState s = At(0, 0);
  s.batches_per_epoch.reset();
  s.remainder = EpochRemainder{.epoch = 1, .consumed = 8, .pending = {3, 3}};
  EXPECT_THAT(Refusal(s), HasSubstr("remainder.pending: index 3 appears more than once"));
  s.remainder->pending.assign(9, 0);
  for (int i = 0; i < 9; ++i) s.remainder->pending[i] = i;
  EXPECT_THAT(Refusal(s), HasSubstr("remainder.pending: 9 samples, more than the 8"));
  s.remainder->pending = {1};
  s.remainder->consumed = 81;
  EXPECT_THAT(Refusal(s), HasSubstr("remainder.consumed: 81 is outside the epoch"));
  s.remainder->consumed = 8;
  s.remainder->epoch = 0;
  EXPECT_THAT(Refusal(s), HasSubstr("remainder.epoch: 0 (allowed: the state's epoch 1)"));
  s.remainder->epoch = 1;
  s.batch_in_epoch = 10;  // 80 positions of a rest of 73
  EXPECT_THAT(Refusal(s), HasSubstr("batch_in_epoch: 10 is past the rest of the epoch (73"));
}

TEST(CheckLoaderState, RefusesBlendPicksPastTheEpoch) {
  StateBounds b = Bounds();
  b.blend_entries = 2;
  LoaderState s = At(0);
  s.blend_picks = {10, int64_t{1} << 62};
  EXPECT_THAT(Refusal(s, b), HasSubstr("blend_picks: entry 1's picks 4611686018427387904"));
  s.blend_picks = {50, 40};  // 90 picks in an epoch of 80 positions
  EXPECT_THAT(Refusal(s, b), HasSubstr("blend_picks: entry 1's picks 40"));
  s.blend_picks = {1, 2, 3};
  EXPECT_THAT(Refusal(s, b), HasSubstr("blend_picks: 3 counts for a blend of 2 entries"));
  s.blend_picks = {12, 12};
  EXPECT_TRUE(CheckLoaderState(s, b).ok());
}

TEST(PositionsConsumed, IsTheRoundRobinDealingAndRefusesOverflow) {
  EXPECT_EQ(*PositionsConsumed(3, 2, 4), 24);
  EXPECT_FALSE(PositionsConsumed(int64_t{1} << 62, 2, 4).ok());
  EXPECT_FALSE(PositionsConsumed(1, 0, 4).ok());
}

TEST(MergeLoaderStates, TheRestStartsWithTheWindowsThenThePositionsEveryRankReached) {
  LoaderState a = At(0), b = At(1);
  b.pack = PackState{.epoch = 1, .from_batch = 2, .next_batch = 3, .waiting = {5, 6}};
  a.pack = PackState{.epoch = 1, .from_batch = 2, .next_batch = 3, .waiting = {9}};
  auto g = MergeLoaderStates({b, a}, /*lockstep=*/false);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->epoch, 1);
  EXPECT_EQ(g->saved_world_size, 2);
  ASSERT_TRUE(g->remainder.has_value());
  EXPECT_EQ(g->remainder->consumed, 24);  // 3 batches x 2 ranks x 4
  EXPECT_EQ(g->remainder->pending, (std::vector<int64_t>{9, 5, 6}));  // rank order
}

TEST(MergeLoaderStates, AnEarlierRemaindersPendingSamplesComeFirst) {
  LoaderState a = At(0, 1), b = At(1, 1);
  for (LoaderState* s : {&a, &b}) {
    s->batches_per_epoch.reset();
    s->remainder = EpochRemainder{.epoch = 1, .consumed = 20, .pending = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
  }
  auto g = MergeLoaderStates({a, b}, false);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->remainder->consumed, 20);
  EXPECT_EQ(g->remainder->pending, (std::vector<int64_t>{8, 9}));
  for (LoaderState* s : {&a, &b}) s->batch_in_epoch = 2;  // 16 positions: 10 pending, 6 more
  g = MergeLoaderStates({a, b}, false);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->remainder->consumed, 26);
  EXPECT_TRUE(g->remainder->pending.empty());
}

TEST(MergeLoaderStates, EveryRankDoneStartsTheNextEpoch) {
  auto g = MergeLoaderStates({At(0, 10), At(1, 10)}, false);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->epoch, 2);
  EXPECT_FALSE(g->remainder.has_value());
}

TEST(MergeLoaderStates, RefusesLyingOrInconsistentStates) {
  auto message = [](const std::vector<LoaderState>& states, bool lockstep = false) {
    auto g = MergeLoaderStates(states, lockstep);
    EXPECT_FALSE(g.ok());
    return g.status().message();
  };
  EXPECT_THAT(message({At(0)}), HasSubstr("ranks [0] of world_size 2"));
  EXPECT_THAT(message({At(0), At(0)}), HasSubstr("ranks [0, 0] of world_size 2"));
  LoaderState far = At(1, int64_t{1} << 62);
  EXPECT_THAT(message({At(0), far}), HasSubstr("rank 1: state dict: batch_in_epoch"));
  LoaderState other = At(1);
  other.batches_per_epoch = 11;
  EXPECT_THAT(message({At(0), other}), HasSubstr("batches_per_epoch: rank 1 has 11"));
  LoaderState a = At(0), b = At(1);
  a.pack = PackState{.epoch = 1, .from_batch = 2, .next_batch = 3, .waiting = {5}};
  b.pack = PackState{.epoch = 1, .from_batch = 2, .next_batch = 3, .waiting = {5}};
  EXPECT_THAT(message({a, b}), HasSubstr("sample 5 waits in another rank's window too"));
  b.pack->waiting = {6};
  b.pack->delivered = 1;
  EXPECT_THAT(message({a, b}), HasSubstr("rank 1: pack.delivered is 1"));
  EXPECT_THAT(message({a}, true), HasSubstr("needs every rank's state"));
  LoaderState zero = At(0);
  zero.world_size = 0;
  EXPECT_THAT(message({zero}), HasSubstr("world_size: 0"));
}

TEST(CheckPending, RefusesASampleTheRestOfTheEpochDeliversAnyway) {
  const PipelineSpec spec =
      test::IndexPipeline(std::filesystem::path(testing::TempDir()) / "run_position", 40);
  auto prepared = PreparedPipeline::Make(spec);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  auto bounds = StateBoundsOf(**prepared);
  ASSERT_TRUE(bounds.ok());
  EXPECT_EQ(bounds->num_samples, 40);
  EXPECT_EQ(bounds->epoch_samples, 40);
  EXPECT_EQ(bounds->batches_per_epoch, 10);
  auto order = (*prepared)->RunWideOrder(std::nullopt, {});
  ASSERT_TRUE(order.ok());
  const std::vector<int64_t> epoch1 = order->Permutation(1);
  EpochRemainder rest{.epoch = 1, .consumed = 8, .pending = {epoch1[2], epoch1[7]}};
  EXPECT_TRUE(CheckPending(**prepared, rest, {}).ok());
  rest.pending.push_back(epoch1[8]);  // not consumed: delivered by the rest already
  const Status st = CheckPending(**prepared, rest, {});
  EXPECT_THAT(st.message(), HasSubstr("remainder.pending: sample " + std::to_string(epoch1[8]) +
                                      " is not among the epoch's first 8 positions"));
}

}  // namespace
}  // namespace headrace
