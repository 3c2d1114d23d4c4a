// headrace bench balance CONFIG: how unevenly the epoch's order deals the data-parallel
// steps' cost over the ranks, and how evenly batch.balance deals them (exec/step_deal.h),
// at several world sizes, computed from the plan: every sample sized once by the chain's
// size pass (exec/pack_sizer.h, nothing decoded; its rate is reported: what a size index
// build would take), then each world size's steps dealt both ways. No process per rank.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "headrace/core/json_writer.h"
#include "headrace/exec/epoch_order.h"
#include "headrace/exec/size_index.h"
#include "headrace/exec/step_cost.h"
#include "headrace/exec/step_deal.h"
#include "headrace/exec/thread_pool.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/prepared.h"

namespace headrace::tools {
namespace {

constexpr const char* kBenchBalanceUsage =
    "usage: headrace bench balance CONFIG [--ranks 8,64,256] [--epochs 4] [--cost NAME]\n"
    "       (batch.balance.every_rank from the config or --set applies to the deal)\n"
    "                              [--report PATH] [--set key=value ...]\n";

std::vector<int> ParseRanks(const std::string& text) {
  std::vector<int> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const int w = std::atoi(text.substr(at, comma - at).c_str());
    if (w < 1 || w > 65536) return {};
    out.push_back(w);
    at = comma + 1;
  }
  return out;
}

struct Dealt {
  int world = 0;
  int64_t steps = 0;
  double before = 0, after = 0, mean = 0;  // summed over the steps
  double deal_seconds = 0;
  int64_t short_ranks = 0;  // with batch.balance.every_rank: (rank, kind) pairs left without
  int64_t order_short = 0;  // ... as the order deals the steps
};

}  // namespace

int BenchBalanceCommand(const Args& args) {
  std::string config_path, report_path, value, cost_name;
  std::vector<std::string> overrides;
  std::vector<int> worlds = {8, 64, 256};
  int64_t epochs = 4;
  ArgReader r{args, 0};
  while (!r.done()) {
    const std::string flag = r.peek();
    if (flag == "--report") {
      if (!r.Value(flag, &report_path)) return 2;
    } else if (flag == "--set") {
      if (!r.Value(flag, &value)) return 2;
      overrides.push_back(value);
    } else if (flag == "--cost") {
      if (!r.Value(flag, &cost_name)) return 2;
    } else if (flag == "--ranks") {
      if (!r.Value(flag, &value)) return 2;
      worlds = ParseRanks(value);
      if (worlds.empty()) {
        std::fprintf(stderr, "headrace bench balance: --ranks: a list like 8,64,256 (each "
                             "1..65536), got '%s'\n", value.c_str());
        return 2;
      }
    } else if (flag == "--epochs") {
      if (!r.Value(flag, &value)) return 2;
      epochs = std::atoll(value.c_str());
      if (epochs < 1 || epochs > 1000) {
        std::fprintf(stderr, "headrace bench balance: --epochs must be in 1..1000\n");
        return 2;
      }
    } else if (config_path.empty() && flag[0] != '-') {
      config_path = flag, ++r.i;
    } else {
      std::fprintf(stderr, "headrace bench balance: unknown argument '%s'\n%s", flag.c_str(),
                   kBenchBalanceUsage);
      return 2;
    }
  }
  if (config_path.empty()) {
    std::fputs(kBenchBalanceUsage, stderr);
    return 2;
  }
  if (!report_path.empty() && !CheckWritable("headrace bench balance", "--report", report_path)) {
    return 2;
  }
  Result<PipelineSpec> spec = LoadPipelineConfig(config_path, overrides);
  if (!spec.ok()) {
    std::fprintf(stderr, "headrace bench balance: %s: %s\n", config_path.c_str(),
                 spec.status().ToString().c_str());
    return 2;
  }
  // The cost: --cost, else the config's batch.balance.cost, else tokens.
  BalanceSpec balance = spec->batch.balance;
  if (!cost_name.empty()) balance.cost = cost_name;
  if (balance.cost.empty()) balance.cost = "tokens";
  Result<uint32_t> every_rank = EveryRankOf(balance);
  if (!every_rank.ok()) {
    std::fprintf(stderr, "headrace bench balance: %s\n", every_rank.status().ToString().c_str());
    return 2;
  }
  Result<StepCostOptions> cost_options = StepCostOptionsOf(balance);
  Result<StepCost> cost = cost_options.ok() ? StepCost::Make(*cost_options)
                                            : Result<StepCost>(cost_options.status());
  if (!cost.ok()) {
    std::fprintf(stderr, "headrace bench balance: %s\n", cost.status().ToString().c_str());
    return 2;
  }
  spec->batch.balance = {};  // the plan's order is dealt here, by each world size
  auto prepared = PreparedPipeline::Make(*spec);
  if (!prepared.ok()) {
    std::fprintf(stderr, "headrace bench balance: %s\n", prepared.status().ToString().c_str());
    return 2;
  }
  const std::shared_ptr<const EngineInputs>& inputs = (*prepared)->inputs();

  // Every sample's size, on every core (what `headrace index sizes` builds).
  const int64_t n = (*prepared)->source().size();
  const auto sized_from = std::chrono::steady_clock::now();
  Result<std::vector<std::optional<SampleSize>>> sizes =
      SizeEverySample(inputs, spec->batch.pack.field, AvailableCores());
  if (!sizes.ok()) {
    std::fprintf(stderr, "headrace bench balance: %s: %s\n", config_path.c_str(),
                 sizes.status().message().c_str());
    return 2;
  }
  const double size_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sized_from).count();
  std::vector<double> costs;
  const int64_t untold = CostsOf(*sizes, *cost, costs);  // one not told: the dataset's mean

  std::vector<Dealt> results;
  for (int world : worlds) {
    Result<EpochOrder> order = (*prepared)->RankOrder(world, std::nullopt, {});
    if (!order.ok()) {
      std::fprintf(stderr, "headrace bench balance: %d ranks: %s\n", world,
                   order.status().ToString().c_str());
      continue;
    }
    Dealt d{.world = world};
    const auto from = std::chrono::steady_clock::now();
    std::vector<std::vector<int64_t>> batches(static_cast<size_t>(world));
    std::vector<double> step_costs;
    std::vector<uint32_t> step_modalities;
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      for (int64_t step = 0; step < order->batches_per_rank_epoch(); ++step) {
        step_costs.clear();
        step_modalities.clear();
        for (int rank = 0; rank < world; ++rank) {
          batches[rank] = order->SampleIndices(
              BatchPosition{.epoch = epoch, .index_in_epoch = step * world + rank});
          uint32_t held = 0;
          for (int64_t s : batches[rank]) {
            step_costs.push_back(costs[s]);
            step_modalities.push_back((*sizes)[s].has_value() ? (*sizes)[s]->modalities : 0);
            held |= step_modalities.back();
          }
          d.order_short += std::popcount(*every_rank & ~held);
        }
        const DealtStep dealt = DealStep(batches, step_costs, step_modalities, *every_rank);
        d.short_ranks += dealt.short_ranks;
        d.before += dealt.before;
        d.after += dealt.after;
        d.mean += dealt.mean;
        ++d.steps;
      }
    }
    d.deal_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
    results.push_back(d);
  }

  std::printf("headrace bench balance %s: %lld samples (%lld not sized: costed the mean), "
              "batch %lld a rank, cost %s\n",
              config_path.c_str(), static_cast<long long>(n), static_cast<long long>(untold),
              static_cast<long long>(spec->batch.size), balance.cost.c_str());
  std::printf("sized in %.2f s on %d threads: %.0f samples/s (nothing decoded)\n", size_seconds,
              AvailableCores(), size_seconds > 0 ? double(n) / size_seconds : 0.0);
  std::printf("%8s %8s %16s %16s %12s %12s %14s\n", "ranks", "steps", "max/mean order",
              "max/mean dealt", "idle order", "idle dealt", "deal us/step");
  for (const Dealt& d : results) {
    std::printf("%8d %8lld %16.3f %16.3f %11.1f%% %11.1f%% %14.1f\n", d.world,
                static_cast<long long>(d.steps), d.before / d.mean, d.after / d.mean,
                100 * (1 - d.mean / d.before), 100 * (1 - d.mean / d.after),
                d.steps > 0 ? 1e6 * d.deal_seconds / double(d.steps) : 0.0);
    if (*every_rank != 0) {
      std::printf("%8s a rank's step without a required kind: %lld (the order's deal: %lld) "
                  "of %lld\n", "", static_cast<long long>(d.short_ranks),
                  static_cast<long long>(d.order_short), static_cast<long long>(d.steps * d.world));
    }
  }
  if (!report_path.empty()) {
    JsonWriter w;
    w.BeginObject();
    w.Key("config").String(config_path);
    w.Key("samples").Int(n);
    w.Key("untold").Int(untold);
    w.Key("batch_size").Int(spec->batch.size);
    w.Key("cost").String(balance.cost);
    w.Key("size_seconds").Double(size_seconds);
    w.Key("size_threads").Int(AvailableCores());
    w.Key("worlds").BeginArray();
    for (const Dealt& d : results) {
      w.BeginObject();
      w.Key("ranks").Int(d.world);
      w.Key("steps").Int(d.steps);
      w.Key("max_over_mean_order").Double(d.before / d.mean);
      w.Key("max_over_mean_dealt").Double(d.after / d.mean);
      w.Key("deal_seconds").Double(d.deal_seconds);
      w.Key("short_ranks").Int(d.short_ranks);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
    if (!WriteTextFile(report_path, w.str() + "\n")) return 1;
  }
  return results.empty() ? 1 : 0;
}

}  // namespace headrace::tools
