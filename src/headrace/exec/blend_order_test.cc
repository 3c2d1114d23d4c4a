#include "headrace/exec/blend_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "headrace/core/rng.h"
#include "headrace/exec/epoch_order.h"

namespace headrace {
namespace {

BlendOptions Blend(std::vector<std::pair<int64_t, double>> parts,
                   BlendUntil until = BlendUntil::kFirstExhausted) {
  BlendOptions b;
  b.until = until;
  int64_t first = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    BlendPart p;
    p.first = first;
    p.size = parts[i].first;
    p.weight = parts[i].second;
    p.key = BlendKey("part" + std::to_string(i));
    first += p.size;
    b.parts.push_back(p);
  }
  return b;
}

int PartOf(const BlendOptions& b, int64_t index) {
  for (size_t s = 0; s < b.parts.size(); ++s) {
    if (index >= b.parts[s].first && index < b.parts[s].first + b.parts[s].size) {
      return static_cast<int>(s);
    }
  }
  return -1;
}

std::vector<double> Normalized(const BlendOptions& b) {
  double sum = 0;
  for (const BlendPart& p : b.parts) sum += p.weight;
  std::vector<double> w;
  for (const BlendPart& p : b.parts) w.push_back(p.weight / sum);
  return w;
}

// The documented error bounds: |c_s(n) - n w_s| < 1 without the block shuffle, and
// < 2 + kBlendBlock w_s with it, at every n, over many random weightings.
TEST(BlendOrderTest, ProportionsStayWithinTheDocumentedBound) {
  Rng rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::pair<int64_t, double>> parts;
    const int n_parts = 2 + static_cast<int>(rng.Below(5));
    for (int s = 0; s < n_parts; ++s) {
      parts.emplace_back(100000, 0.01 + static_cast<double>(rng.Below(1000)) / 100.0);
    }
    const BlendOptions b = Blend(parts, BlendUntil::kSamples);
    const std::vector<double> w = Normalized(b);
    const int64_t length = 5000;
    const std::vector<int32_t> plain = BlendChoices(b, length);
    const std::vector<int64_t> seq = BlendSequence<int64_t>(b, length, true, trial, 3);
    std::vector<int64_t> c_plain(parts.size()), c_shuffled(parts.size());
    for (int64_t n = 1; n <= length; ++n) {
      ++c_plain[static_cast<size_t>(plain[static_cast<size_t>(n - 1)])];
      ++c_shuffled[static_cast<size_t>(PartOf(b, seq[static_cast<size_t>(n - 1)]))];
      for (size_t s = 0; s < parts.size(); ++s) {
        const double target = static_cast<double>(n) * w[s];
        ASSERT_LT(std::abs(static_cast<double>(c_plain[s]) - target), 1.0)
            << "trial " << trial << " n " << n << " part " << s;
        ASSERT_LT(std::abs(static_cast<double>(c_shuffled[s]) - target),
                  2.0 + static_cast<double>(kBlendBlock) * w[s])
            << "trial " << trial << " n " << n << " part " << s;
      }
    }
  }
}

// The rule as BlendOrder states it, part by part: the largest deficit n·w_s − c_s, the
// earliest among equals.
std::vector<int32_t> DeficitOneByOne(const std::vector<double>& weights, int64_t length) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> counts(weights.size(), 0);
  std::vector<int32_t> out;
  for (int64_t n = 1; n <= length; ++n) {
    size_t best = 0;
    double best_deficit = -std::numeric_limits<double>::infinity();
    for (size_t s = 0; s < weights.size(); ++s) {
      const double w = weights[s] / sum;
      if (w <= 0) continue;
      const double deficit = static_cast<double>(n) * w - static_cast<double>(counts[s]);
      if (deficit > best_deficit) {
        best_deficit = deficit;
        best = s;
      }
    }
    ++counts[best];
    out.push_back(static_cast<int32_t>(best));
  }
  return out;
}

TEST(BlendOrderTest, ChoicesAreTheDeficitRulePartByPart) {
  // Parts sharing weights (grouped) and distinct ones, ties between groups included.
  Rng rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::pair<int64_t, double>> parts;
    const int n = 1 + static_cast<int>(rng.Below(40));
    const double pool[] = {1, 1, 2, 0.5, 3, 1e-3, 7};
    for (int i = 0; i < n; ++i) parts.emplace_back(5, pool[rng.Below(trial % 2 ? 7 : 2)]);
    const BlendOptions b = Blend(parts);
    std::vector<double> weights;
    for (const auto& p : parts) weights.push_back(p.second);
    EXPECT_EQ(BlendChoices(b, 3000), DeficitOneByOne(weights, 3000)) << "trial " << trial;
  }
}

TEST(BlendOrderTest, ManyEntriesOfOneWeightAreDrawnInTurn) {
  // 20,000 entries of one sample each and one weight, all_exhausted: each once, in
  // order (one by one that was 4e8 deficits, grouped it is a set step a position).
  std::vector<std::pair<int64_t, double>> parts(20000, {1, 1.0});
  const BlendOptions b = Blend(parts, BlendUntil::kAllExhausted);
  const Result<int64_t> length = BlendEpochLength(b);
  ASSERT_TRUE(length.ok()) << length.status().ToString();
  EXPECT_EQ(*length, 20000);
  const std::vector<int32_t> choices = BlendChoices(b, *length);
  for (int32_t s = 0; s < 20000; ++s) ASSERT_EQ(choices[static_cast<size_t>(s)], s);
}

TEST(BlendOrderTest, AnEpochPastTheCapIsRefusedBeforeItIsWalked) {
  // all_exhausted waits for the 1e-12 part: about 1e12 positions, past 2^36. It was
  // walked position by position first (minutes, no first batch); now refused at once.
  const Result<int64_t> far =
      BlendEpochLength(Blend({{10, 1.0}, {1, 1e-12}}, BlendUntil::kAllExhausted));
  ASSERT_EQ(far.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(far.status().message().find("more than an order can hold"), std::string::npos)
      << far.status().ToString();
  // first_exhausted ends with the first part: 10 positions or so.
  const Result<int64_t> near =
      BlendEpochLength(Blend({{10, 1.0}, {1, 1e-12}}, BlendUntil::kFirstExhausted));
  ASSERT_TRUE(near.ok()) << near.status().ToString();
  EXPECT_EQ(*near, 10);
}

TEST(BlendOrderTest, ALimitStopsTheWalkAndALongEpochIsNotWalked) {
  // all_exhausted waits for the 1e-7 part's 1000 samples: about 1e10 positions, under the
  // 2^36 cap. Asked with a limit (a run's memory budget), the answer is "at least the
  // limit", from the weights: it was walked position by position (minutes) before.
  const BlendOptions far = Blend({{1000, 1.0}, {1000, 1e-7}}, BlendUntil::kAllExhausted);
  const Result<int64_t> limited = BlendEpochLength(far, 1000);
  ASSERT_TRUE(limited.ok()) << limited.status().ToString();
  EXPECT_EQ(*limited, 1000);
  // An epoch that ends before the limit is its length; one that reaches it, the limit.
  const BlendOptions b = Blend({{300, 0.6}, {100, 0.3}, {1000, 0.1}});
  const Result<int64_t> whole = BlendEpochLength(b);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*BlendEpochLength(b, *whole + 1), *whole);
  EXPECT_EQ(*BlendEpochLength(b, *whole), *whole);
  EXPECT_EQ(*BlendEpochLength(b, *whole - 1), *whole - 1);
  BlendOptions many = Blend({{10, 1.0}}, BlendUntil::kSamples);
  many.samples = 5000;
  EXPECT_EQ(*BlendEpochLength(many, 100), 100);
}

TEST(BlendOrderTest, FirstExhaustedReadsEachSampleAtMostOnce) {
  const BlendOptions b = Blend({{300, 0.6}, {100, 0.3}, {1000, 0.1}});
  const Result<int64_t> length = BlendEpochLength(b);
  ASSERT_TRUE(length.ok()) << length.status().message();
  // The 0.3 part runs out first: after about 100 / 0.3 positions.
  EXPECT_NEAR(static_cast<double>(*length), 100 / 0.3, 3.0);
  const std::vector<int64_t> seq = BlendSequence<int64_t>(b, *length, true, 11, 0);
  std::set<int64_t> seen(seq.begin(), seq.end());
  EXPECT_EQ(seen.size(), seq.size());
  std::vector<int64_t> per(3);
  for (int64_t i : seq) ++per[static_cast<size_t>(PartOf(b, i))];
  EXPECT_EQ(per[1], 100);  // the part that ended the epoch gave every sample
  EXPECT_LE(per[0], 300);
}

TEST(BlendOrderTest, AllExhaustedReadsEverySampleAndRepeatsTheSmallParts) {
  const BlendOptions b = Blend({{50, 0.5}, {400, 0.5}}, BlendUntil::kAllExhausted);
  const Result<int64_t> length = BlendEpochLength(b);
  ASSERT_TRUE(length.ok());
  EXPECT_EQ(*length, 800);  // the big part needs 400 picks at half the positions
  const std::vector<int64_t> seq = BlendSequence<int64_t>(b, *length, true, 5, 2);
  std::map<int64_t, int> times;
  for (int64_t i : seq) ++times[i];
  EXPECT_EQ(times.size(), 450u);  // every sample of both parts
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(times[i], 8) << i;  // 400 picks of 50: 8 passes
  for (int64_t i = 50; i < 450; ++i) EXPECT_EQ(times[i], 1) << i;
}

TEST(BlendOrderTest, EpochizedReadsEachSampleItsRepeatTimes) {
  BlendOptions b = Blend({{30, 1}, {70, 1}}, BlendUntil::kEpochized);
  b.parts[0].repeat = 2;
  b.parts[1].repeat = 1;
  const Result<int64_t> length = BlendEpochLength(b);
  ASSERT_TRUE(length.ok());
  EXPECT_EQ(*length, 130);
  const std::vector<int64_t> seq = BlendSequence<int64_t>(b, *length, true, 9, 1);
  std::map<int64_t, int> times;
  for (int64_t i : seq) ++times[i];
  for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(times[i], 2) << i;
  for (int64_t i = 30; i < 100; ++i) EXPECT_EQ(times[i], 1) << i;
}

TEST(BlendOrderTest, SamplesUntilIsTheGivenLength) {
  BlendOptions b = Blend({{10, 1}, {10, 3}}, BlendUntil::kSamples);
  b.samples = 1000;
  ASSERT_EQ(*BlendEpochLength(b), 1000);
  const std::vector<int64_t> seq = BlendSequence<int64_t>(b, 1000, false, 0, 0);
  int64_t second = 0;
  for (int64_t i : seq) second += PartOf(b, i) == 1;
  EXPECT_EQ(second, 750);
}

// Deterministic per (seed, epoch); another epoch or seed is another order; the part's
// own order (its k-th pick) does not depend on the other parts.
TEST(BlendOrderTest, EachPartKeepsItsOwnSeededOrder) {
  const BlendOptions two = Blend({{200, 1}, {200, 1}});
  BlendOptions three = two;
  BlendPart extra;
  extra.first = 400;
  extra.size = 200;
  extra.weight = 1;
  extra.key = BlendKey("another");
  three.parts.push_back(extra);
  const int64_t n2 = *BlendEpochLength(two), n3 = *BlendEpochLength(three);
  const auto a = BlendSequence<int64_t>(two, n2, true, 42, 4);
  EXPECT_EQ(a, (BlendSequence<int64_t>(two, n2, true, 42, 4)));
  EXPECT_NE(a, (BlendSequence<int64_t>(two, n2, true, 42, 5)));
  EXPECT_NE(a, (BlendSequence<int64_t>(two, n2, true, 43, 4)));
  const auto b = BlendSequence<int64_t>(three, n3, true, 42, 4);
  std::vector<int64_t> first_of_a, first_of_b;
  for (int64_t i : a) if (i < 200) first_of_a.push_back(i);
  for (int64_t i : b) if (i < 200) first_of_b.push_back(i);
  ASSERT_LE(first_of_b.size(), first_of_a.size());
  EXPECT_TRUE(std::equal(first_of_b.begin(), first_of_b.end(), first_of_a.begin()));
  // Unshuffled: each part in its own dataset order.
  const auto plain = BlendSequence<int64_t>(two, n2, false, 42, 4);
  std::vector<int64_t> p0;
  for (int64_t i : plain) if (i < 200) p0.push_back(i);
  std::vector<int64_t> expected(200);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(p0, expected);
}

TEST(BlendOrderTest, BadWeightsAreConfigErrorsNamingTheEntry) {
  for (double bad : std::vector<double>{0.0, -1.0, std::nan(""),
                                        std::numeric_limits<double>::infinity()}) {
    const Result<int64_t> r = BlendEpochLength(Blend({{10, 1}, {10, bad}}));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("source.mix[1].weight"), std::string::npos)
        << r.status().message();
  }
  EXPECT_FALSE(BlendEpochLength(BlendOptions{}).ok());
}

// EpochOrder cuts a blend's epoch as a permutation: batches, ranks disjoint.
TEST(BlendOrderTest, EpochOrderCutsTheBlendIntoRanksBatches) {
  EpochOrderOptions o;
  o.blend = Blend({{64, 2}, {64, 1}});
  o.num_samples = 128;
  o.batch_size = 8;
  o.world_size = 2;
  o.seed = 3;
  std::set<int64_t> seen;
  int64_t total = 0;
  for (int rank = 0; rank < 2; ++rank) {
    o.rank = rank;
    const Result<EpochOrder> order = EpochOrder::Make(o);
    ASSERT_TRUE(order.ok()) << order.status().message();
    EXPECT_EQ(order->epoch_samples(), *BlendEpochLength(*o.blend));
    for (int64_t j = 0; j < order->batches_per_rank_epoch(); ++j) {
      for (int64_t i : order->SampleIndices(order->Position(j))) {
        EXPECT_TRUE(seen.insert(i).second) << i;
        ++total;
      }
    }
  }
  EXPECT_EQ(total, (*BlendEpochLength(*o.blend) / 8 / 2) * 2 * 8);
  o.num_samples = 100;
  EXPECT_FALSE(EpochOrder::Make(o).ok());  // parts that do not cover the dataset
}

}  // namespace
}  // namespace headrace

namespace headrace {
namespace {

// The rest of an epoch (an elastic resume): pending samples first, then the epoch's
// order from `consumed` on, dealt to the new ranks; the run ends with that epoch.
TEST(EpochRemainderTest, TheRestOfAnEpochIsPendingThenTheOrderDealtToTheNewRanks) {
  EpochOrderOptions o;
  o.num_samples = 100;
  o.batch_size = 5;
  o.seed = 9;
  o.epochs = std::nullopt;
  const std::vector<int64_t> full = EpochOrder::Make(o)->Permutation(2);
  o.remainder = EpochRemainder{2, 40, {full[0], full[1], full[2]}};
  o.world_size = 3;
  std::vector<int64_t> rest;
  std::vector<std::vector<int64_t>> batches(21);
  for (int rank = 0; rank < 3; ++rank) {
    o.rank = rank;
    const Result<EpochOrder> order = EpochOrder::Make(o);
    ASSERT_TRUE(order.ok()) << order.status().message();
    EXPECT_EQ(order->epoch_samples(), 63);
    EXPECT_EQ(order->batches_per_rank_epoch(), 4);  // 13 batches: 4 rounds of 3
    EXPECT_EQ(order->total_batches(), 3 * 4);       // the run is epochs 0..2 of 4 each
    for (int64_t j = 0; j < 4; ++j) {
      const BatchPosition p = order->Position(2 * 4 + j);
      EXPECT_EQ(p.epoch, 2);
      batches[static_cast<size_t>(p.index_in_epoch)] = order->SampleIndices(p);
    }
  }
  for (int b = 0; b < 12; ++b) rest.insert(rest.end(), batches[b].begin(), batches[b].end());
  std::vector<int64_t> expected = {full[0], full[1], full[2]};
  expected.insert(expected.end(), full.begin() + 40, full.begin() + 40 + 57);
  EXPECT_EQ(rest, expected);
  // More ranks than the rest has batches: a config error naming the state.
  o.remainder = EpochRemainder{2, 95, {}};
  o.world_size = 2;
  o.rank = 0;
  const Result<EpochOrder> none = EpochOrder::Make(o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("fewer than world_size 2"), std::string::npos);
  o.remainder = EpochRemainder{2, 0, {100}};
  EXPECT_FALSE(EpochOrder::Make(o).ok());  // a pending index outside the dataset
}

// A blend continued with other weights: each part resumes its own order at its picks,
// and first_exhausted still ends before any sample is read twice in the epoch.
TEST(BlendOrderTest, AContinuationResumesEachPartAtItsPicks) {
  const BlendOptions before = Blend({{50, 0.5}, {50, 0.5}});
  const int64_t n = *BlendEpochLength(before);
  const std::vector<int64_t> seq = BlendSequence<int64_t>(before, n, true, 1, 0);
  const std::vector<int64_t> picks = BlendCounts(before, n, true, 1, 0, 30);
  EXPECT_EQ(picks[0] + picks[1], 30);
  BlendOptions after = Blend({{50, 0.9}, {50, 0.1}});
  after.start = picks;
  const int64_t m = *BlendEpochLength(after);
  const std::vector<int64_t> rest = BlendSequence<int64_t>(after, m, true, 1, 0);
  std::vector<int64_t> epoch(seq.begin(), seq.begin() + 30);
  epoch.insert(epoch.end(), rest.begin(), rest.end());
  std::set<int64_t> seen(epoch.begin(), epoch.end());
  EXPECT_EQ(seen.size(), epoch.size());
  EXPECT_EQ(std::count_if(epoch.begin(), epoch.end(), [](int64_t i) { return i < 50; }), 50);
  // Part 0's samples across the change are its own order, as the unchanged run's.
  std::vector<int64_t> mine, own;
  for (int64_t i : epoch) if (i < 50) mine.push_back(i);
  for (int64_t i : seq) if (i < 50) own.push_back(i);
  EXPECT_EQ(mine, own);
}

}  // namespace
}  // namespace headrace
