// headrace bench balance CONFIG: how unevenly the epoch's order deals the data-parallel
// steps' cost over the ranks, and how evenly batch.balance deals them (exec/step_deal.h),
// at several world sizes, computed from the plan: every sample sized once by the chain's
// size pass (exec/pack_sizer.h, nothing decoded; its rate is reported: what a size index
// build would take), then each world size's steps dealt both ways. No process per rank.
// With batch.pack (or max_tokens), each rank's packed batches too: its shares, as each way
// deals them, planned into rows by the packer's rule (exec/pack_planner.h, over the told
// sizes; its window carries samples into later steps), each packed batch costing its
// samples' costs (attention stays within a sample's segment). A sample longer than a row
// is planned cut, at its whole cost. With a packing window the balanced side is the one a
// balanced run forms: each step's rows planned over every rank's samples, the rows dealt
// (exec/step_deal.h DealRows).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "headrace/core/json_writer.h"
#include "headrace/exec/batch_formers.h"
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
  // With batch.pack: each step's costliest rank's packed batch and the ranks' mean, as the
  // order deals the steps and as balanced, summed over the steps.
  double packed_before = 0, packed_mean_before = 0, packed_after = 0, packed_mean = 0;
  // ... the rows and their tokens over every rank (a row's fill: tokens / seq_len).
  int64_t rows_order = 0, rows_dealt = 0, tokens_order = 0, tokens_dealt = 0;
  bool rows = false;  // the balanced side's rows dealt (a packing window)
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

  // Each rank's packer over its shares (batch.pack), as a rank's planned pack plans them.
  const std::optional<PackOptions> pack =
      spec->batch.regroups() ? std::optional<PackOptions>(spec->batch.pack_options()) : std::nullopt;
  const PackPlanner::Sizer told = [&sizes](int64_t, std::span<const int64_t> indices,
                                           std::stop_token) {
    std::vector<std::optional<PackPlanner::Told>> out;
    for (int64_t s : indices) {
      const std::optional<SampleSize>& size = (*sizes)[static_cast<size_t>(s)];
      if (!size.has_value()) {
        out.emplace_back();
        continue;
      }
      PackPlanner::Told t;
      t.tokens = size->tokens;
      t.patches = size->patches;
      out.push_back(std::move(t));
    }
    return out;
  };
  // A planned sample's tokens in its row (one longer than seq_len planned cut).
  const auto row_tokens = [&](int64_t s) {
    const std::optional<SampleSize>& size = (*sizes)[static_cast<size_t>(s)];
    return size.has_value() ? std::min(size->tokens, pack->seq_len) : pack->seq_len;
  };
  // The cost of the packed batch rank `planner` forms from input batch `step` `share`;
  // its rows and their tokens added to `rows` and `tokens`.
  const auto packed_cost = [&](PackPlanner& planner, int64_t epoch, int64_t step, int64_t global,
                               bool last, const std::vector<int64_t>& share, int64_t& rows,
                               int64_t& tokens) {
    double c = 0;
    for (int64_t s : planner.Plan(epoch, step, global, last, share)) {
      c += costs[s];
      tokens += row_tokens(s);
    }
    rows += static_cast<int64_t>(planner.Take(global)->rows.size());
    return c;
  };

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
    std::vector<std::unique_ptr<PackPlanner>> ordered, balanced;  // per rank, with pack
    // With a window the balanced run plans each step's rows over every rank's samples and
    // deals the rows (PackPlanner::RowDeal, as balanced_former.cc): one planner, whose
    // deal adds every rank's rows' costs here.
    const bool rows = BalanceDealsRows(pack, world);
    d.rows = rows;
    std::unique_ptr<PackPlanner> step_rows;
    double rows_max = 0, rows_sum = 0;  // the step's, as its rows were dealt
    if (pack.has_value()) {
      PackOptions planning = *pack;
      planning.epoch_batches = order->batches_per_rank_epoch();
      for (int rank = 0; rank < world; ++rank) {
        ordered.push_back(std::make_unique<PackPlanner>(planning, told));
        if (!rows) balanced.push_back(std::make_unique<PackPlanner>(planning, told));
      }
      if (rows) {
        PackPlanner::RowDeal deal{.world = world, .rank = 0};
        deal.deal = [&](int64_t, std::span<const std::vector<int64_t>> planned,
                        std::span<const std::vector<std::optional<PackPlanner::Told>>>) {
          std::vector<double> row_costs;
          std::vector<uint32_t> row_kinds;
          for (const std::vector<int64_t>& row : planned) {
            row_costs.push_back(0);
            row_kinds.push_back(0);
            for (int64_t s : row) {
              row_costs.back() += costs[s];
              if ((*sizes)[s].has_value()) row_kinds.back() |= (*sizes)[s]->modalities;
            }
          }
          for (const std::vector<int64_t>& row : planned) {
            for (int64_t s : row) d.tokens_dealt += row_tokens(s);
          }
          d.rows_dealt += static_cast<int64_t>(planned.size());
          const DealtStep dealt = DealRows(row_costs, row_kinds, world, *every_rank);
          rows_max = dealt.after;
          rows_sum = dealt.mean * world;
          return std::vector<size_t>(dealt.ranks[0].begin(), dealt.ranks[0].end());
        };
        step_rows = std::make_unique<PackPlanner>(planning, told, std::move(deal));
      }
    }
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
        if (pack.has_value()) {
          const int64_t global = epoch * order->batches_per_rank_epoch() + step;
          const bool last = step + 1 == order->batches_per_rank_epoch();
          double max_o = 0, max_b = 0, sum_o = 0, sum_b = 0;
          for (int rank = 0; rank < world; ++rank) {
            const double o = packed_cost(*ordered[rank], epoch, step, global, last,
                                         batches[rank], d.rows_order, d.tokens_order);
            max_o = std::max(max_o, o);
            sum_o += o;
            if (rows) continue;
            const double b = packed_cost(*balanced[rank], epoch, step, global, last,
                                         dealt.ranks[rank], d.rows_dealt, d.tokens_dealt);
            max_b = std::max(max_b, b);
            sum_b += b;
          }
          if (rows) {
            std::vector<int64_t> whole;
            for (const std::vector<int64_t>& batch : batches) {
              whole.insert(whole.end(), batch.begin(), batch.end());
            }
            (void)step_rows->Plan(epoch, step, global, last, whole);
            step_rows->Take(global);
            max_b = rows_max;
            sum_b = rows_sum;
          }
          d.packed_before += max_o;
          d.packed_mean_before += sum_o / world;
          d.packed_after += max_b;
          d.packed_mean += sum_b / world;
        }
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
    if (pack.has_value() && d.packed_mean > 0) {
      const auto fill = [&](int64_t tokens, int64_t rows) {
        return rows > 0 ? 100.0 * double(tokens) / double(rows * pack->seq_len) : 0.0;
      };
      std::printf("%8s packed (rows of %lld tokens%s): max/mean order %.3f, dealt %.3f; idle "
                  "%.1f%% -> %.1f%%; rows a rank a step %.2f -> %.2f, fill %.1f%% -> %.1f%%\n",
                  "", static_cast<long long>(pack->seq_len), d.rows ? ", rows dealt" : "",
                  d.packed_before / d.packed_mean_before, d.packed_after / d.packed_mean,
                  100 * (1 - d.packed_mean_before / d.packed_before),
                  100 * (1 - d.packed_mean / d.packed_after),
                  double(d.rows_order) / double(d.steps * d.world),
                  double(d.rows_dealt) / double(d.steps * d.world),
                  fill(d.tokens_order, d.rows_order), fill(d.tokens_dealt, d.rows_dealt));
    }
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
      if (pack.has_value() && d.packed_mean > 0) {
        w.Key("packed_max_over_mean_order").Double(d.packed_before / d.packed_mean_before);
        w.Key("packed_max_over_mean_dealt").Double(d.packed_after / d.packed_mean);
        w.Key("packed_rows_order").Int(d.rows_order);
        w.Key("packed_rows_dealt").Int(d.rows_dealt);
        w.Key("packed_tokens_order").Int(d.tokens_order);
        w.Key("packed_tokens_dealt").Int(d.tokens_dealt);
      }
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
    if (!WriteTextFile(report_path, w.str() + "\n")) return 1;
  }
  return results.empty() ? 1 : 0;
}

}  // namespace headrace::tools
