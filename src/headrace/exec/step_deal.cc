#include "headrace/exec/step_deal.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>
#include <utility>

namespace headrace {
namespace {

double MaxOf(const std::vector<double>& loads) {
  return loads.empty() ? 0 : *std::max_element(loads.begin(), loads.end());
}

// How many samples of `rank` hold `bit`.
int64_t Holding(const std::vector<size_t>& rank, std::span<const uint32_t> modalities,
                uint32_t bit) {
  return std::count_if(rank.begin(), rank.end(), [&](size_t p) { return (modalities[p] & bit) != 0; });
}

// The modality-safe pass (DealStep): for each kind `every_rank` requires, each rank holding
// none swaps with a rank holding two or more. Returns the (rank, kind) pairs left short.
int64_t GiveEveryRankItsKinds(std::span<const double> costs, std::span<const uint32_t> modalities,
                              uint32_t every_rank, std::vector<std::vector<size_t>>& held,
                              std::vector<double>& loads) {
  const size_t world = held.size();
  // Whether `rank` may give up the sample at `p` without losing its last of a required kind.
  const auto can_give = [&](size_t rank, size_t p) {
    for (uint32_t bits = modalities[p] & every_rank; bits != 0; bits &= bits - 1) {
      if (Holding(held[rank], modalities, bits & -bits) < 2) return false;
    }
    return true;
  };
  int64_t short_ranks = 0;
  for (uint32_t bits = every_rank; bits != 0; bits &= bits - 1) {
    const uint32_t bit = bits & -bits;
    for (size_t r = 0; r < world; ++r) {
      if (Holding(held[r], modalities, bit) > 0) continue;
      // The swap nearest in cost: a sample of the kind from a donor that keeps one, for
      // one of r's that r can spare. Ties to the lower donor, then step order.
      double best = -1;
      size_t donor = world, give = 0, take = 0;
      for (size_t d = 0; d < world; ++d) {
        if (d == r || Holding(held[d], modalities, bit) < 2) continue;
        for (size_t a = 0; a < held[d].size(); ++a) {
          if ((modalities[held[d][a]] & bit) == 0 || !can_give(d, held[d][a])) continue;
          for (size_t b = 0; b < held[r].size(); ++b) {
            if (!can_give(r, held[r][b])) continue;
            const double gap = std::abs(costs[held[d][a]] - costs[held[r][b]]);
            if (best < 0 || gap < best) {
              best = gap;
              donor = d, give = a, take = b;
            }
          }
        }
      }
      if (donor == world) {
        ++short_ranks;
        continue;
      }
      const double d = costs[held[donor][give]] - costs[held[r][take]];
      std::swap(held[donor][give], held[r][take]);
      loads[donor] -= d;
      loads[r] += d;
    }
  }
  return short_ranks;
}

}  // namespace

DealtStep DealRows(std::span<const double> row_costs, std::span<const uint32_t> row_modalities,
                   int world, uint32_t every_rank) {
  const size_t n = row_costs.size();
  std::vector<std::vector<int64_t>> blocks(static_cast<size_t>(world));
  for (size_t r = 0; r < n; ++r) {
    blocks[r * static_cast<size_t>(world) / n].push_back(static_cast<int64_t>(r));
  }
  return DealStep(blocks, row_costs, row_modalities, every_rank);
}

DealtStep DealStep(std::span<const std::vector<int64_t>> batches, std::span<const double> costs,
                   std::span<const uint32_t> modalities, uint32_t every_rank) {
  const size_t world = batches.size();
  DealtStep dealt;
  dealt.ranks.resize(world);
  std::vector<size_t> room(world);
  std::vector<double> loads(world, 0);
  std::vector<int64_t> sample;  // by step position
  sample.reserve(costs.size());
  for (size_t r = 0; r < world; ++r) {
    room[r] = batches[r].size();
    for (int64_t s : batches[r]) {
      loads[r] += costs[sample.size()];
      sample.push_back(s);
    }
  }
  assert(sample.size() == costs.size());
  const size_t n = sample.size();
  dealt.before = MaxOf(loads);
  dealt.mean = world == 0 ? 0 : std::accumulate(loads.begin(), loads.end(), 0.0) / double(world);

  // Costliest first (equal costs in step order), dealt in rounds: each round gives one
  // sample to every rank with room, the round's costliest to the least loaded (ties to
  // the lower rank), so that a rank's count is met as its cost is.
  std::vector<size_t> by_cost(n);
  std::iota(by_cost.begin(), by_cost.end(), size_t{0});
  std::stable_sort(by_cost.begin(), by_cost.end(),
                   [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::fill(loads.begin(), loads.end(), 0.0);
  std::vector<std::vector<size_t>> held(world);  // step positions
  std::vector<size_t> open;
  for (size_t next = 0; next < n;) {
    open.clear();
    for (size_t r = 0; r < world; ++r) {
      if (held[r].size() < room[r]) open.push_back(r);
    }
    std::stable_sort(open.begin(), open.end(),
                     [&](size_t a, size_t b) { return loads[a] < loads[b]; });
    for (size_t r : open) {
      if (next == n) break;
      const size_t pos = by_cost[next++];
      held[r].push_back(pos);
      loads[r] += costs[pos];
    }
  }

  // Then the costliest rank swaps, with whichever rank evens them most, the pair of
  // samples whose difference d is nearest half their gap (0 < d < gap lowers it), while
  // one does: at most 2 x world swaps.
  for (size_t round = 0; round < 2 * world; ++round) {
    const size_t hi = std::max_element(loads.begin(), loads.end()) - loads.begin();
    double best = 0;  // how much lower the pair's costlier side gets
    size_t best_lo = hi, best_a = 0, best_b = 0;
    for (size_t lo = 0; lo < world; ++lo) {
      const double gap = loads[hi] - loads[lo];
      if (lo == hi || gap <= best) continue;
      for (size_t a = 0; a < held[hi].size(); ++a) {
        for (size_t b = 0; b < held[lo].size(); ++b) {
          const double d = costs[held[hi][a]] - costs[held[lo][b]];
          if (d <= 0 || d >= gap) continue;
          const double lowered = loads[hi] - std::max(loads[hi] - d, loads[lo] + d);
          if (lowered > best) {
            best = lowered;
            best_lo = lo;
            best_a = a;
            best_b = b;
          }
        }
      }
    }
    if (best_lo == hi) break;
    const double d = costs[held[hi][best_a]] - costs[held[best_lo][best_b]];
    std::swap(held[hi][best_a], held[best_lo][best_b]);
    loads[hi] -= d;
    loads[best_lo] += d;
  }

  if (every_rank != 0 && modalities.size() == n) {
    dealt.short_ranks = GiveEveryRankItsKinds(costs, modalities, every_rank, held, loads);
  }

  for (size_t r = 0; r < world; ++r) {
    std::sort(held[r].begin(), held[r].end());
    for (size_t pos : held[r]) dealt.ranks[r].push_back(sample[pos]);
  }
  dealt.after = MaxOf(loads);
  return dealt;
}

int64_t CostsOf(std::span<const std::optional<SampleSize>> sizes, const StepCost& cost,
                std::vector<double>& costs) {
  costs.assign(sizes.size(), -1);
  double told_sum = 0;
  int64_t told_count = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    if (!sizes[s].has_value()) continue;
    costs[s] = cost.Of(*sizes[s]);
    told_sum += costs[s];
    ++told_count;
  }
  const double estimate = told_count > 0 ? told_sum / double(told_count) : 1.0;
  for (double& c : costs) {
    if (c < 0) c = estimate;
  }
  return static_cast<int64_t>(sizes.size()) - told_count;
}

}  // namespace headrace
