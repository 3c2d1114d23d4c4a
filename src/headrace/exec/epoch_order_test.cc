#include "headrace/exec/epoch_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <map>
#include <set>

namespace headrace {
namespace {

// 10 shards of 7..16 samples.
EpochOrderOptions Sharded(int64_t window, bool shuffle = true) {
  EpochOrderOptions o;
  for (int64_t s = 0; s < 10; ++s) o.shard_samples.push_back(7 + s);
  o.num_samples = std::accumulate(o.shard_samples.begin(), o.shard_samples.end(), int64_t{0});
  o.batch_size = 8;
  o.shuffle = shuffle;
  o.seed = 42;
  o.epochs = 3;
  o.shuffle_window = window;
  return o;
}

// The shard of dataset index i.
int64_t ShardOf(const EpochOrderOptions& o, int64_t i) {
  for (size_t s = 0; s < o.shard_samples.size(); ++s) {
    if (i < o.shard_samples[s]) return static_cast<int64_t>(s);
    i -= o.shard_samples[s];
  }
  return -1;
}

TEST(EpochOrder, ShardWindowsShuffleWithinWindowsOfWholeShards) {
  const EpochOrderOptions o = Sharded(3);
  auto order = EpochOrder::Make(o);
  ASSERT_TRUE(order.ok()) << order.status().ToString();
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const std::vector<int64_t> p = order->Permutation(epoch);
    std::vector<int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(o.num_samples);
    std::iota(all.begin(), all.end(), int64_t{0});
    ASSERT_EQ(sorted, all);  // a permutation
    // Shards ranked by first appearance: window = rank / 3. All samples of a window
    // come before any sample of the next one.
    std::map<int64_t, int64_t> rank;
    for (int64_t i : p) rank.emplace(ShardOf(o, i), static_cast<int64_t>(rank.size()));
    ASSERT_EQ(rank.size(), 10u);
    int64_t window = 0;
    for (int64_t i : p) {
      const int64_t w = rank[ShardOf(o, i)] / 3;
      EXPECT_GE(w, window) << "epoch " << epoch;
      window = w;
    }
    EXPECT_EQ(window, 3);
  }
}

TEST(EpochOrder, ShardOrderIsAPureFunctionOfSeedAndEpoch) {
  auto a = EpochOrder::Make(Sharded(2));
  auto b = EpochOrder::Make(Sharded(2));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->Permutation(1), b->Permutation(1));
  EXPECT_NE(a->Permutation(0), a->Permutation(1));
  EpochOrderOptions other = Sharded(2);
  other.seed = 43;
  EXPECT_NE(EpochOrder::Make(other)->Permutation(1), a->Permutation(1));
  // Batches are slices of the permutation, as without shards.
  const std::vector<int64_t> p = a->Permutation(2);
  const BatchPosition pos = a->Position(a->batches_per_rank_epoch() * 2 + 3);
  EXPECT_EQ(a->SampleIndices(pos), std::vector<int64_t>(p.begin() + 24, p.begin() + 32));
}

TEST(EpochOrder, UnshuffledShardsKeepTheDatasetOrder) {
  auto order = EpochOrder::Make(Sharded(4, /*shuffle=*/false));
  ASSERT_TRUE(order.ok());
  const std::vector<int64_t> p = order->Permutation(5);
  EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
}

TEST(EpochOrder, AWindowOfOneShardKeepsEachShardTogether) {
  const EpochOrderOptions o = Sharded(1);
  const std::vector<int64_t> p = EpochOrder::Make(o)->Permutation(0);
  int changes = 0;
  for (size_t i = 1; i < p.size(); ++i) changes += ShardOf(o, p[i]) != ShardOf(o, p[i - 1]);
  EXPECT_EQ(changes, 9);
}

TEST(EpochOrder, ShardCountsMustAddUpToTheDataset) {
  EpochOrderOptions o = Sharded(2);
  o.num_samples += 1;
  EXPECT_EQ(EpochOrder::Make(o).status().code(), StatusCode::kInvalidArgument);
  o = Sharded(0);
  EXPECT_EQ(EpochOrder::Make(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace headrace

namespace headrace {
namespace {

// The batches' indices, end to end, over one epoch.
std::vector<int64_t> EpochFromBatches(const EpochOrder& order, int64_t epoch) {
  std::vector<int64_t> all;
  for (int64_t k = 0; k < order.batches_per_rank_epoch(); ++k) {
    const BatchPosition p = order.Position(epoch * order.batches_per_rank_epoch() + k);
    const std::vector<int64_t> batch = order.SampleIndices(p);
    all.insert(all.end(), batch.begin(), batch.end());
  }
  return all;
}

TEST(EpochOrder, TheKeptPermutationTakesFourBytesASampleAndGivesTheSameOrder) {
  for (const bool sharded : {false, true}) {
    SCOPED_TRACE(sharded ? "sharded" : "whole dataset");
    EpochOrderOptions o = Sharded(3);
    if (!sharded) {
      o.shard_samples.clear();
      o.num_samples = 1001;
    }
    Result<EpochOrder> order = EpochOrder::Make(o);
    ASSERT_TRUE(order.ok());
    EXPECT_EQ(order->permutation_bytes(), 4 * o.num_samples);
    for (int64_t epoch : {0, 2, 1}) {
      const std::vector<int64_t> want = order->Permutation(epoch);
      std::vector<int64_t> sorted = want;
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], static_cast<int64_t>(i));
      EXPECT_NE(want, sorted);  // shuffled
      EXPECT_EQ(EpochFromBatches(*order, epoch), want);
    }
  }
}

// The rule a Ray rank applies to its workers' run-wide count: the one EpochOrder deals by.
TEST(RankShare, EveryRankGetsTheSameFloorOfAnEpochAndTheRunsEpochsOfIt) {
  Result<RankShare> share = RankShareOf(7, 8, 3, 2);
  ASSERT_TRUE(share.ok()) << share.status().ToString();
  EXPECT_EQ(share->batches_per_epoch, 2);  // the epoch's 7th batch is left out
  EXPECT_EQ(share->total_batches, 4);
  EpochOrderOptions o;
  o.num_samples = 50;  // 7 batches of 8
  o.batch_size = 8;
  o.epochs = 2;
  o.world_size = 3;
  Result<EpochOrder> order = EpochOrder::Make(o);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order->batches_per_epoch(), 7);
  EXPECT_EQ(order->batches_per_rank_epoch(), share->batches_per_epoch);
  EXPECT_EQ(order->total_batches(), share->total_batches);
}

TEST(RankShare, ARunWithoutAnEndOrLongerThanInt64BatchesIsUnbounded) {
  EXPECT_EQ(RankShareOf(7, 8, 3, std::nullopt)->total_batches, EpochOrder::kUnboundedBatches);
  EXPECT_EQ(RankShareOf(7, 8, 1, EpochOrder::kUnboundedBatches / 2)->total_batches,
            EpochOrder::kUnboundedBatches);
}

TEST(RankShare, FewerBatchesThanRanksIsAConfigErrorNamingBoth) {
  const Result<RankShare> none = RankShareOf(2, 8, 3, 1);
  ASSERT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(none.status().message(),
            "an epoch has 2 batches of 8, fewer than world_size 3: lower batch.size or use "
            "fewer ranks");
  EpochOrderOptions o;
  o.num_samples = 16;
  o.batch_size = 8;
  o.world_size = 3;
  EXPECT_EQ(EpochOrder::Make(o).status().message(), none.status().message());
  EXPECT_EQ(RankShareOf(2, 8, 0, 1).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace headrace
