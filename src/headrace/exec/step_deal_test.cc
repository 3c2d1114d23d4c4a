#include "headrace/exec/step_deal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace headrace {
namespace {

// Each rank's batch of `batch` consecutive sample indices from `first`.
std::vector<std::vector<int64_t>> Batches(int world, int batch, int64_t first = 0) {
  std::vector<std::vector<int64_t>> out(world);
  for (int r = 0; r < world; ++r) {
    for (int i = 0; i < batch; ++i) out[r].push_back(first + r * batch + i);
  }
  return out;
}

double CostOf(const std::vector<int64_t>& rank, const std::vector<double>& costs,
              int64_t first = 0) {
  double sum = 0;
  for (int64_t s : rank) sum += costs[s - first];
  return sum;
}

TEST(StepDeal, TheCostliestFirstToTheLeastLoadedRankWithRoom) {
  // Ranks [0, 1] and [2, 3] cost 19 and 2; dealt: 10 to rank 0, 9 to rank 1, then the
  // two 1s to the cheaper rank each time: 11 and 10, which no swap evens further.
  const std::vector<double> costs = {10, 9, 1, 1};
  const DealtStep dealt = DealStep(Batches(2, 2), costs);
  EXPECT_EQ(dealt.ranks[0], (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(dealt.ranks[1], (std::vector<int64_t>{1, 2}));
  EXPECT_DOUBLE_EQ(dealt.before, 19);
  EXPECT_DOUBLE_EQ(dealt.after, 11);
  EXPECT_DOUBLE_EQ(dealt.mean, 10.5);
}

TEST(StepDeal, EverySampleOnceEachRankItsCountInStepOrder) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> cost(0, 1.5);
  for (int world : {2, 3, 8, 64}) {
    std::vector<std::vector<int64_t>> batches = Batches(world, 6, 100);
    batches.back().resize(2);  // an epoch's last, partial batch
    std::vector<double> costs;
    for (const auto& b : batches) {
      for (size_t i = 0; i < b.size(); ++i) costs.push_back(cost(rng));
    }
    const DealtStep dealt = DealStep(batches, costs);
    ASSERT_EQ(dealt.ranks.size(), batches.size());
    std::vector<int64_t> all, dealt_all;
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(dealt.ranks[r].size(), batches[r].size()) << "rank " << r << " of " << world;
      EXPECT_TRUE(std::is_sorted(dealt.ranks[r].begin(), dealt.ranks[r].end()));
      all.insert(all.end(), batches[r].begin(), batches[r].end());
      dealt_all.insert(dealt_all.end(), dealt.ranks[r].begin(), dealt.ranks[r].end());
      EXPECT_LE(CostOf(dealt.ranks[r], costs, 100), dealt.after + 1e-9);
    }
    std::sort(dealt_all.begin(), dealt_all.end());
    EXPECT_EQ(dealt_all, all) << world << " ranks";
    EXPECT_LE(dealt.after, dealt.before);
    EXPECT_GE(dealt.after, dealt.mean);
  }
}

TEST(StepDeal, BringsTheCostliestRankNearWhatAnyDealCouldReach) {
  // A heavy-tailed mix, 8 samples a rank: the order's deal leaves the costliest rank
  // well above the mean; no deal gets below the mean, nor below the costliest sample
  // with the 7 cheapest beside it. The deal comes within 3% of the higher of the two.
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> cost(0, 1.0);
  double before = 0, after = 0, bound = 0;
  for (int step = 0; step < 50; ++step) {
    std::vector<double> costs(8 * 8);
    for (double& c : costs) c = cost(rng);
    const DealtStep dealt = DealStep(Batches(8, 8), costs);
    std::vector<double> sorted = costs;
    std::sort(sorted.begin(), sorted.end());
    const double alone = sorted.back() + std::accumulate(sorted.begin(), sorted.begin() + 7, 0.0);
    before += dealt.before;
    after += dealt.after;
    bound += std::max(dealt.mean, alone);
  }
  EXPECT_GT(before / bound, 1.2);
  EXPECT_LT(after / bound, 1.03);
}

TEST(StepDeal, OneRankAndEqualCostsKeepTheOrdersDeal) {
  const std::vector<std::vector<int64_t>> one = {{5, 3, 9}};
  EXPECT_EQ(DealStep(one, std::vector<double>{1, 7, 2}).ranks, one);
  const std::vector<std::vector<int64_t>> batches = Batches(3, 2);
  EXPECT_EQ(DealStep(batches, std::vector<double>(6, 4.0)).ranks,
            (std::vector<std::vector<int64_t>>{{0, 3}, {1, 4}, {2, 5}}))
      << "equal costs go round the ranks in step order";
}

constexpr uint32_t kImage = 1, kVideo = 2;

int64_t Holding(const std::vector<int64_t>& rank, const std::vector<uint32_t>& modalities,
                uint32_t bit) {
  return std::count_if(rank.begin(), rank.end(), [&](int64_t s) { return modalities[s] & bit; });
}

TEST(StepDeal, EveryRankGetsAnImageWheneverTheStepHoldsOnePerRank) {
  // 4 ranks of 3: the images (samples 0-4, cheap) all in the first ranks as ordered, the
  // costly text-only samples after them; one sample holds an image and a video.
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> text(10, 50);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> costs(12);
    std::vector<uint32_t> modalities(12, 0);
    for (int s = 0; s < 12; ++s) costs[s] = s < 5 ? 1 + s * 0.1 : text(rng);
    for (int s = 0; s < 5; ++s) modalities[s] = kImage;
    modalities[11] = kVideo;
    modalities[2] |= kVideo;
    const DealtStep dealt = DealStep(Batches(4, 3), costs, modalities, kImage);
    EXPECT_EQ(dealt.short_ranks, 0);
    std::vector<int64_t> all;
    for (const auto& rank : dealt.ranks) {
      EXPECT_EQ(rank.size(), 3u);
      EXPECT_GE(Holding(rank, modalities, kImage), 1) << "trial " << trial;
      all.insert(all.end(), rank.begin(), rank.end());
    }
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, Batches(1, 12).front());
    // Images and videos both: the two videos go to two ranks, the other two are short.
    const DealtStep both = DealStep(Batches(4, 3), costs, modalities, kImage | kVideo);
    EXPECT_EQ(both.short_ranks, 2);
    for (const auto& rank : both.ranks) EXPECT_GE(Holding(rank, modalities, kImage), 1);
    int64_t with_video = 0;
    for (const auto& rank : both.ranks) with_video += Holding(rank, modalities, kVideo) > 0;
    EXPECT_EQ(with_video, 2);
  }
}

TEST(StepDeal, RowsDealtWithEveryRankGiveEachRankARowOfTheKind) {
  // Six rows over two ranks, three each; rows 0 (10) and 3 (3) hold an image. By cost:
  // 10 and 3 and 2 to rank 0, 9 and 8 and 1 to rank 1 (15 and 18): both images on rank 0.
  const std::vector<double> costs = {10, 9, 8, 3, 2, 1};
  const uint32_t image = ModalityBit(FieldKind::kImage);
  const std::vector<uint32_t> kinds = {image, 0, 0, image, 0, 0};
  const DealtStep by_cost = DealRows(costs, kinds, 2);
  EXPECT_EQ(by_cost.ranks, (std::vector<std::vector<int64_t>>{{0, 3, 4}, {1, 2, 5}}));
  EXPECT_DOUBLE_EQ(by_cost.before, 27);  // the plan's blocks: rows 0-2 and 3-5
  const DealtStep safe = DealRows(costs, kinds, 2, image);
  for (const std::vector<int64_t>& rank : safe.ranks) {
    EXPECT_EQ(rank.size(), 3u);
    EXPECT_TRUE(std::is_sorted(rank.begin(), rank.end()));
    const auto image_rows = [](int64_t r) { return r == 0 || r == 3; };
    EXPECT_EQ(std::count_if(rank.begin(), rank.end(), image_rows), 1);
  }
  EXPECT_EQ(safe.short_ranks, 0);
  // Rows not a multiple of the ranks (an epoch's end): one rank a row fewer.
  const std::vector<double> three = {5, 4, 3};
  const DealtStep odd = DealRows(three, {}, 2);
  EXPECT_EQ(odd.ranks[0].size() + odd.ranks[1].size(), 3u);
  EXPECT_LE(std::max(odd.ranks[0].size(), odd.ranks[1].size()), 2u);
}

TEST(StepDeal, AStepWithFewerImagesThanRanksCountsTheRanksShort) {
  const std::vector<uint32_t> modalities = {kImage, kImage, 0, 0, 0, 0, 0, 0};
  const DealtStep dealt =
      DealStep(Batches(4, 2), std::vector<double>(8, 1.0), modalities, kImage);
  EXPECT_EQ(dealt.short_ranks, 2);
  int64_t with_image = 0;
  for (const auto& rank : dealt.ranks) with_image += Holding(rank, modalities, kImage) > 0;
  EXPECT_EQ(with_image, 2) << "the two images on two ranks";
}

}  // namespace
}  // namespace headrace
