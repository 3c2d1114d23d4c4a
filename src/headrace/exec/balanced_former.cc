// balanced: batch.balance. Each data-parallel step's samples (every rank's batch of the
// step, as the epoch's order deals them) are dealt over the ranks by cost
// (exec/step_deal.h, exec/step_cost.h) before the former the rest of the list picks for
// the run (plain, pack, pack planned) forms this rank's share: balancing composes with
// them. Every rank sizes the whole step by the chain's size pass (exec/pack_sizer.h:
// headers read, nothing decoded) and computes the same deal: a pure function of (seed,
// epoch, step, sizes, world size), so that any thread count, process or resume deals
// alike. A sample whose size cannot be told costs the mean of those told in its step.
//
// With batch.pack and a window a rank's packer would carry what its rows cannot hold into
// its later steps and undo a deal of samples: the rows are dealt instead. The planned pack
// this wraps plans each step's rows over every rank's samples (its window every rank's,
// the same plan on every rank) and keeps the rows DealRows gives this rank
// (FormingRun::row_deal, PackPlanner::RowDeal; docs/balanced_steps.md, "The deal").
//
// What it costs: without a size index each rank reads the media of the whole step
// (world_size x its own) and runs their size pass; with one (batch.balance.index,
// exec/size_index.h) it reads each sample's entry, O(1).
//
// On Ray (an on-demand run, BalanceOptions::ranks) a worker deals the share of whichever
// rank's batch it computes. With batch.pack or max_tokens the rank forms its packed
// batches from its workers' batches with this same former (Compose never called there):
// under every_rank each worker batch carries its samples' kinds (kSampleKindsField),
// which the rank's former takes out of its input, so that its `dummy_kinds` are those of
// the local run's. With a packing window (rows dealt) a worker plans every step's rows as
// every rank does (StepRowsPlan) and computes the rows' samples of the rank asking; the
// rank plans each step as its batch arrives (FormingRun::plans_at_push), checks the batch
// holds the planned samples, lays it out and tells its rows' kinds from that plan.
#include <algorithm>
#include <chrono>
#include <climits>
#include <iterator>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "headrace/exec/batch_formers.h"
#include "headrace/exec/epoch_order.h"
#include "headrace/exec/pack_sizer.h"
#include "headrace/exec/size_index.h"
#include "headrace/exec/step_deal.h"
#include "headrace/exec/thread_annotations.h"

namespace headrace {

Result<std::shared_ptr<BatchFormer>> MakeBalancedFormer(FormingRun& run);

namespace {

// The steps a rank dealt, summed as they are dealt (BatchFormer::balance). Thread-safe.
class StepsSeen {
 public:
  void Add(const DealtStep& dealt, int64_t untold) {
    MutexLock lock(mu_);
    seen_.steps += 1;
    seen_.untold += untold;
    seen_.max_before += dealt.before;
    seen_.max_after += dealt.after;
    seen_.mean += dealt.mean;
    seen_.short_ranks += dealt.short_ranks;
  }
  BalanceSeen get() const {
    MutexLock lock(mu_);
    return seen_;
  }

 private:
  mutable Mutex mu_;
  BalanceSeen seen_ HR_GUARDED_BY(mu_);
};

// With batch.balance.every_rank: the kinds of media (ModalityBit) of the samples a rank
// was dealt and has not delivered yet, by (epoch, dataset index); what a delivered
// batch's `dummy_kinds` field is computed from. Each is stamped with the batch it was
// dealt in, and those dealt kKeptBatches batches before the one delivered are forgotten
// (a sample that failed, or that packing left out, is never delivered): the map holds the
// samples of the batches in flight and a packing window's. Thread-safe (dealt by the run,
// taken by the consumer).
//
// Why the epoch is in the key: a sample is in every epoch, and the run deals the next
// epoch's first batches while the consumer still takes this epoch's last ones (prefetch).
// Keyed by index alone, taking epoch e's batch also took the kinds dealt for the same
// sample in epoch e + 1, whose batch then flagged a kind it holds: in the rows case of
// tests/python/test_ray.py a local run's rank 0 flagged `image` on epoch 1's first batch
// (samples 6 and 31, in its epoch 0 batches 4 and 10) in 2 to 5 runs of 30.
class SampleKinds {
 public:
  // Batches a dealt sample's kinds are kept for: past any prefetch depth and packing
  // window; one forgotten too early counts as holding no kind (a dummy too many).
  static constexpr int64_t kKeptBatches = 64;

  // Samples `indices` of epoch `epoch` dealt for the next batch.
  void Add(int64_t epoch, std::span<const int64_t> indices, std::span<const uint32_t> kinds) {
    MutexLock lock(mu_);
    for (size_t i = 0; i < indices.size(); ++i) kinds_[{epoch, indices[i]}] = {kinds[i], dealt_};
    ++dealt_;
  }
  // The kinds of each of the next delivered batch's samples `indices` of epoch `epoch`
  // (0: not dealt here, or forgotten).
  std::vector<uint32_t> TakeEach(int64_t epoch, std::span<const int64_t> indices) {
    MutexLock lock(mu_);
    std::vector<uint32_t> each(indices.size(), 0);
    for (size_t k = 0; k < indices.size(); ++k) {
      if (auto it = kinds_.find({epoch, indices[k]}); it != kinds_.end()) {
        each[k] = it->second.kinds;
        kinds_.erase(it);
      }
    }
    if (const int64_t taken = ++taken_; taken % kKeptBatches == 0) {
      std::erase_if(kinds_, [taken](const auto& e) { return e.second.dealt + kKeptBatches < taken; });
    }
    return each;
  }
  // The kinds the next delivered batch's samples `indices` of epoch `epoch` hold together.
  uint32_t Take(int64_t epoch, std::span<const int64_t> indices) {
    uint32_t held = 0;
    for (uint32_t kinds : TakeEach(epoch, indices)) held |= kinds;
    return held;
  }

 private:
  struct Dealt {
    uint32_t kinds = 0;
    int64_t dealt = 0;  // the batch it was dealt in (the count of Adds before)
  };
  Mutex mu_;
  std::map<std::pair<int64_t, int64_t>, Dealt> kinds_ HR_GUARDED_BY(mu_);  // (epoch, index)
  int64_t dealt_ HR_GUARDED_BY(mu_) = 0;
  int64_t taken_ HR_GUARDED_BY(mu_) = 0;
};

// Deals the steps of one rank's run.
class StepDealer {
 public:
  // Deals each step of `order` over `world` ranks; sizes from `index` when there is one,
  // else by `sizer`.
  StepDealer(std::shared_ptr<const EpochOrder> order, int world,
             std::shared_ptr<const SizeIndex> index, PackPlanner::Sizer sizer, StepCost cost,
             uint32_t every_rank)
      : order_(std::move(order)),
        world_(world),
        index_(std::move(index)),
        sizer_(std::move(sizer)),
        cost_(std::move(cost)),
        every_rank_(every_rank) {}

  // Every rank's batch of the step that holds `position`, as the order deals them.
  std::vector<std::vector<int64_t>> BatchesOf(const BatchPosition& position) const {
    // The epoch's batch b is rank b mod world's share of step b div world: the order's
    // round-robin deal (PositionOf), whether the order is this rank's of `world` (a local
    // run) or every rank's (an on-demand run computing any rank's batches).
    const int64_t step = position.index_in_epoch / world_;
    std::vector<std::vector<int64_t>> batches(world_);
    for (int r = 0; r < world_; ++r) {
      BatchPosition p = position;
      p.index_in_epoch = step * world_ + r;
      batches[r] = order_->SampleIndices(p);
    }
    return batches;
  }
  // ... their samples, rank 0's first: what a step's rows are planned from (RowsOf).
  std::vector<int64_t> StepOf(const BatchPosition& position) const {
    return Joined(BatchesOf(position));
  }

  // This rank's samples of the step that holds `position` (`stop`: the run's; a deal
  // given up keeps the order's). Adds the step to `seen` (null: not counted), and with
  // every_rank the kinds of media each sample of the share holds to `kinds` (null: not
  // told).
  std::vector<int64_t> SamplesOf(const BatchPosition& position, std::stop_token stop,
                                 StepsSeen* seen, SampleKinds* kinds = nullptr) const {
    std::vector<std::vector<int64_t>> batches = BatchesOf(position);
    const std::vector<int64_t> samples = Joined(batches);
    const auto rank = static_cast<int>(position.index_in_epoch % world_);
    if (world_ == 1) return batches[rank];
    std::vector<std::optional<SampleSize>> sizes;
    sizes.reserve(samples.size());
    if (index_ != nullptr) {
      for (int64_t s : samples) sizes.push_back(index_->At(s));
    } else {
      for (const auto& told : sizer_(position.epoch, samples, stop)) sizes.push_back(SizeOf(told));
      if (stop.stop_requested()) return batches[rank];
    }
    std::vector<double> costs;
    const int64_t untold = CostsOf(sizes, cost_, costs);
    std::vector<uint32_t> modalities;
    if (every_rank_ != 0) {
      for (const auto& s : sizes) modalities.push_back(s.has_value() ? s->modalities : 0);
    }
    DealtStep dealt = DealStep(batches, costs, modalities, every_rank_);
    if (seen != nullptr) seen->Add(dealt, untold);
    if (kinds != nullptr && every_rank_ != 0) {
      std::unordered_map<int64_t, uint32_t> of;
      for (size_t i = 0; i < samples.size(); ++i) of.emplace(samples[i], modalities[i]);
      std::vector<uint32_t> share;
      for (int64_t s : dealt.ranks[rank]) share.push_back(of[s]);
      kinds->Add(position.epoch, dealt.ranks[rank], share);
    }
    return std::move(dealt.ranks[rank]);
  }

  // A step's `rows`, planned over every rank's samples of the step (PackPlanner::RowDeal;
  // `told`: each row's samples' sizes), dealt as DealRows deals them (exec/step_deal.h):
  // each rank's row numbers. Adds the step to `seen` (null: not counted).
  DealtStep DealRowsOf(std::span<const std::vector<int64_t>> rows,
                       std::span<const std::vector<std::optional<PackPlanner::Told>>> told,
                       StepsSeen* seen) const {
    std::vector<std::optional<SampleSize>> sizes;
    for (const auto& row : told) {
      for (const auto& t : row) sizes.push_back(SizeOf(t));
    }
    std::vector<double> sample_costs;
    const int64_t untold = CostsOf(sizes, cost_, sample_costs);
    std::vector<double> costs(rows.size(), 0.0);
    std::vector<uint32_t> modalities(rows.size(), 0);
    for (size_t r = 0, k = 0; r < rows.size(); ++r) {
      for (size_t s = 0; s < rows[r].size(); ++s, ++k) {
        costs[r] += sample_costs[k];
        if (sizes[k].has_value()) modalities[r] |= sizes[k]->modalities;
      }
    }
    DealtStep dealt = DealRows(costs, modalities, world_, every_rank_);
    if (seen != nullptr) seen->Add(dealt, untold);
    return dealt;
  }
  // The rows rank `rank` keeps of a step of epoch `epoch` (DealRowsOf), with every_rank
  // their samples' kinds added to `kinds`.
  std::vector<size_t> RowsOf(int rank, int64_t epoch, std::span<const std::vector<int64_t>> rows,
                             std::span<const std::vector<std::optional<PackPlanner::Told>>> told,
                             StepsSeen& seen, SampleKinds& kinds) const {
    const DealtStep dealt = DealRowsOf(rows, told, &seen);
    if (every_rank_ != 0) {
      std::vector<int64_t> samples;
      std::vector<uint32_t> each;
      for (const int64_t r : dealt.ranks[rank]) {
        for (size_t s = 0; s < rows[r].size(); ++s) {
          samples.push_back(rows[r][s]);
          each.push_back(told[r][s].has_value() ? told[r][s]->modalities : 0);
        }
      }
      kinds.Add(epoch, samples, each);
    }
    return {dealt.ranks[rank].begin(), dealt.ranks[rank].end()};
  }

  int world() const { return world_; }

 private:
  static std::vector<int64_t> Joined(const std::vector<std::vector<int64_t>>& batches) {
    std::vector<int64_t> samples;
    for (const std::vector<int64_t>& batch : batches) {
      samples.insert(samples.end(), batch.begin(), batch.end());
    }
    return samples;
  }

  const std::shared_ptr<const EpochOrder> order_;
  const int world_;
  const std::shared_ptr<const SizeIndex> index_;
  const PackPlanner::Sizer sizer_;
  const StepCost cost_;
  const uint32_t every_rank_;
};

// An on-demand run's rows dealt (a Ray worker, batch.balance with a packing window): each
// epoch's steps planned in order as every rank's planner plans them (PackPlanner with a
// RowDeal, over the same sizes), each rank's kept rows remembered for the last steps
// planned, so that the worker computes any rank's batch of a step: that rank's rows'
// samples, in row order, which the rank lays out by its own plan (PlannedPackFormer,
// planning as the batches arrive, which also tells the kinds of its rows' samples for its
// `dummy_kinds`: none are told here). A step older than those remembered, or of an epoch
// no longer kept, is planned again from its epoch's start. Thread-safe.
//
// Why a plan per epoch: a rank asks for the next epoch's first batches before its last
// ones of this epoch are computed (its request window crosses the epoch's end), and the
// ranks may be an epoch apart; with one plan, each request of the other epoch planned its
// epoch again from the start (every step of it sized again, without a size index by
// reading headers) at every epoch's end.
//
// The balance statistics (`seen`) count each step of an epoch once, the first time it is
// planned, as a rank's own run counts the steps it deals: an epoch planned again adds
// nothing for the steps it had planned before.
class StepRowsPlan {
 public:
  // Steps whose rows are remembered: past the batches a Ray loader keeps in flight.
  static constexpr int64_t kKeptSteps = 64;
  // Epochs whose plans are kept: this one and the next (or the one before).
  static constexpr size_t kKeptEpochs = 2;

  StepRowsPlan(std::shared_ptr<const StepDealer> dealer, PackOptions planning,
               PackPlanner::Sizer sizer, std::shared_ptr<StepsSeen> seen)
      : dealer_(std::move(dealer)),
        planning_(std::move(planning)),
        sizer_(std::move(sizer)),
        seen_(std::move(seen)) {}

  // The samples of the rows the rank whose epoch batch `position` is keeps of its step.
  std::vector<int64_t> SamplesOf(const BatchPosition& position) {
    const int world = dealer_->world();
    const int64_t step = position.index_in_epoch / world;
    const auto rank = static_cast<size_t>(position.index_in_epoch % world);
    MutexLock lock(mu_);
    EpochRows& rows = PlanOf(position.epoch, step);
    while (rows.next_step <= step) PlanNext(position.epoch, rows);
    return rows.kept.at(step).at(rank);
  }

 private:
  // One epoch's plan.
  struct EpochRows {
    std::unique_ptr<PackPlanner> planner;
    int64_t next_step = 0;  // the step its planner plans next
    // Each step's rows' samples by rank, of the last kKeptSteps steps planned.
    std::map<int64_t, std::vector<std::vector<int64_t>>> kept;
  };

  // The plan of `epoch` that has `step` or will plan it: kept, or started (the epoch
  // furthest from `epoch` dropped past kKeptEpochs).
  EpochRows& PlanOf(int64_t epoch, int64_t step) HR_REQUIRES(mu_) {
    auto it = epochs_.find(epoch);
    if (it != epochs_.end() && (step >= it->second.next_step || it->second.kept.contains(step))) {
      return it->second;
    }
    // Every rank's rows kept (dealt_), rank 0's given to the planner: the window is every
    // rank's, the same whichever rank's rows it keeps.
    const auto deal = [this](int64_t, std::span<const std::vector<int64_t>> rows,
                             std::span<const std::vector<std::optional<PackPlanner::Told>>> told) {
      // Called by a planner's Plan, under mu_ (PlanNext).
      const DealtStep dealt =
          dealer_->DealRowsOf(rows, told, counting_ ? seen_.get() : nullptr);
      dealt_.assign(dealt.ranks.size(), {});
      for (size_t r = 0; r < dealt.ranks.size(); ++r) {
        for (const int64_t row : dealt.ranks[r]) {
          dealt_[r].insert(dealt_[r].end(), rows[row].begin(), rows[row].end());
        }
      }
      return std::vector<size_t>(dealt.ranks[0].begin(), dealt.ranks[0].end());
    };
    EpochRows started;
    started.planner = std::make_unique<PackPlanner>(
        planning_, sizer_,
        PackPlanner::RowDeal{.world = dealer_->world(), .rank = 0, .deal = deal});
    it = epochs_.insert_or_assign(epoch, std::move(started)).first;
    while (epochs_.size() > kKeptEpochs) {
      const auto front = epochs_.begin(), back = std::prev(epochs_.end());
      epochs_.erase(epoch - front->first >= back->first - epoch ? front : back);
    }
    return it->second;
  }
  void PlanNext(int64_t epoch, EpochRows& rows) HR_REQUIRES(mu_) {
    const int64_t step = rows.next_step;
    const BatchPosition first{.epoch = epoch, .index_in_epoch = step * dealer_->world()};
    const int64_t global = epoch * planning_.epoch_batches + step;
    int64_t& counted = counted_[epoch];
    counting_ = step >= counted;
    if (counting_) counted = step + 1;
    (void)rows.planner->Plan(epoch, step, global, step + 1 == planning_.epoch_batches,
                             dealer_->StepOf(first));
    (void)rows.planner->Take(global);
    rows.kept[step] = std::move(dealt_);
    rows.kept.erase(step - kKeptSteps);
    ++rows.next_step;
  }

  const std::shared_ptr<const StepDealer> dealer_;
  const PackOptions planning_;  // epoch_batches: each rank's batches an epoch
  const PackPlanner::Sizer sizer_;
  const std::shared_ptr<StepsSeen> seen_;
  Mutex mu_;
  std::map<int64_t, EpochRows> epochs_ HR_GUARDED_BY(mu_);  // by epoch, at most kKeptEpochs
  // Each epoch's steps counted in `seen_`: [0, counted); one entry an epoch planned.
  std::map<int64_t, int64_t> counted_ HR_GUARDED_BY(mu_);
  // While Plan runs (under mu_): the deal's rows by rank, and whether it counts the step.
  std::vector<std::vector<int64_t>> dealt_;
  bool counting_ = false;
};

// A rank's input batches that an on-demand run dealt and computed (a Ray worker's), as
// `input` hands them: each batch's kSampleKindsField taken out into `kinds`, as the
// rank's own Compose would have told them.
class KindsFromInput final : public BatchInput {
 public:
  KindsFromInput(BatchInput& input, SampleKinds& kinds) : input_(input), kinds_(kinds) {}

  Result<std::optional<Batch>> Next() override {
    HR_ASSIGN_OR_RETURN(std::optional<Batch> batch, input_.Next());
    if (batch.has_value()) HR_RETURN_IF_ERROR(TakeKinds(*batch));
    return batch;
  }
  bool WaitReady(std::chrono::nanoseconds timeout) override { return input_.WaitReady(timeout); }
  int64_t batches_per_epoch() const override { return input_.batches_per_epoch(); }
  void ChargeHeld(int64_t delta) override { input_.ChargeHeld(delta); }
  Status CountLost(std::span<const LostSample> lost, bool at_end) override {
    return input_.CountLost(lost, at_end);
  }

 private:
  Status TakeKinds(Batch& batch) {
    const Tensor* kinds = batch.Find(kSampleKindsField);
    if (kinds == nullptr) return Status::Ok();  // a batch this run computed itself
    const Tensor* index = batch.Find("index");
    if (index == nullptr || kinds->dtype() != DType::kI32 || kinds->numel() != index->numel()) {
      return Status::InvalidArgument(
          "batch.balance.every_rank: an input batch's '" + std::string(kSampleKindsField) +
          "' is not one int32 per sample of its 'index'");
    }
    const int32_t* bits = kinds->data<int32_t>();
    const std::vector<uint32_t> each(bits, bits + kinds->numel());
    kinds_.Add(batch.epoch, {index->data<int64_t>(), static_cast<size_t>(index->numel())}, each);
    std::erase_if(batch.fields, [](const auto& f) { return f.first == kSampleKindsField; });
    return Status::Ok();
  }

  BatchInput& input_;
  SampleKinds& kinds_;
};

class BalancedFormer final : public BatchFormer {
 public:
  // `every_rank`: the kinds the `dummy_kinds` field may flag (0: no field); `peers`:
  // whether the run has other ranks (one alone has no peer to wait for it: no flag);
  // `consumer_forms`: an on-demand run whose batches their consumer forms further (a Ray
  // rank packs them): they leave with their samples' kinds, not flagged.
  // `rows`: the inner former (a planned pack) deals each step's rows (FormingRun::
  // row_deal, adding to `seen` and `kinds`): it composes from the whole step.
  // `rows_plan`: on demand with rows dealt, the plan whose rows' samples it composes.
  BalancedFormer(std::shared_ptr<const StepDealer> dealer, std::shared_ptr<BatchFormer> inner,
                 uint32_t every_rank, bool peers, bool consumer_forms, bool rows,
                 std::shared_ptr<StepsSeen> seen, std::shared_ptr<SampleKinds> kinds,
                 std::shared_ptr<StepRowsPlan> rows_plan)
      : rows_plan_(std::move(rows_plan)),
        dealer_(std::move(dealer)),
        inner_(std::move(inner)),
        name_("balanced " + std::string(rows ? "rows, " : "") + std::string(inner_->name())),
        every_rank_(every_rank),
        flagged_(peers ? every_rank : 0),
        consumer_forms_(consumer_forms),
        rows_(rows),
        seen_(std::move(seen)),
        kinds_(std::move(kinds)) {}

  std::string_view name() const override { return name_; }
  std::optional<std::vector<int64_t>> Compose(const BatchPosition& position,
                                              std::span<const int64_t>,
                                              std::stop_token stop) override {
    std::vector<int64_t> share =
        rows_plan_ != nullptr ? rows_plan_->SamplesOf(position)
        : rows_              ? dealer_->StepOf(position)
                             : dealer_->SamplesOf(position, stop, seen_.get(), kinds_.get());
    std::optional<std::vector<int64_t>> formed = inner_->Compose(position, share, stop);
    return formed.has_value() ? std::move(formed) : std::move(share);
  }
  HandedOver HandOver(int64_t epoch, int64_t index, bool media) override {
    return inner_->HandOver(epoch, index, media);
  }
  bool keeps_sample_rows() const override { return inner_->keeps_sample_rows(); }
  bool counts_losses() const override { return inner_->counts_losses(); }
  Result<std::optional<Batch>> Next(BatchInput& input) override {
    if (every_rank_ == 0) return inner_->Next(input);
    KindsFromInput told(input, *kinds_);  // input batches a Ray rank's workers dealt
    HR_ASSIGN_OR_RETURN(std::optional<Batch> batch, inner_->Next(told));
    if (batch.has_value()) HR_RETURN_IF_ERROR(AddDummyKinds(*batch));
    return batch;
  }
  // A Ray worker's batch: the flags its rank's own run would add in Next(), or, where
  // the rank forms its batches from it, its samples' kinds for the rank's Next(). With
  // rows dealt (rows_plan_) nothing: the rank's own plan of each step tells its rows'
  // kinds (FormingRun::row_deal).
  Status FinishTaken(Batch& batch) override {
    if (every_rank_ == 0 || rows_plan_ != nullptr) return Status::Ok();
    return consumer_forms_ ? AddSampleKinds(batch) : AddDummyKinds(batch);
  }
  bool ready() const override { return inner_->ready(); }
  int64_t inputs_held() const override { return inner_->inputs_held(); }
  std::optional<PackState> state() const override { return inner_->state(); }
  std::optional<PackStats> stats() const override { return inner_->stats(); }
  std::optional<BalanceSeen> balance() const override { return seen_->get(); }

 private:
  // The batch field `dummy_kinds` (uint8 [4]: image, video, audio, pointcloud, as
  // kBalanceKinds): 1 where every_rank lists the kind, the run has other ranks and the
  // batch holds no sample of it, so that a trainer whose model shards the kind's encoder
  // (FSDP, ZeRO-3) runs it on a dummy input rather than leave its collectives to the
  // other ranks (docs/balanced_steps.md). A sample whose kinds were not told counts as
  // holding none: a dummy too many costs little, one too few hangs the job.
  Status AddDummyKinds(Batch& batch) {
    const Tensor* index = batch.Find("index");
    const uint32_t held =
        index == nullptr ? 0
                         : kinds_->Take(batch.epoch, {index->data<int64_t>(),
                                                     static_cast<size_t>(index->numel())});
    constexpr int64_t kKinds = std::size(kBalanceKinds);
    HR_ASSIGN_OR_RETURN(Tensor field, Tensor::Allocate(DType::kU8, {kKinds}));
    for (int64_t k = 0; k < kKinds; ++k) {
      const uint32_t bit = ModalityBit(kBalanceKinds[k]);
      field.mutable_data<uint8_t>()[k] = (flagged_ & bit) != 0 && (held & bit) == 0;
    }
    batch.fields.emplace_back("dummy_kinds", std::move(field));
    return Status::Ok();
  }
  // The field kSampleKindsField: each sample's kinds as this run dealt them.
  Status AddSampleKinds(Batch& batch) {
    const Tensor* index = batch.Find("index");
    if (index == nullptr) return Status::Internal("balanced: a taken batch without 'index'");
    const std::vector<uint32_t> each =
        kinds_->TakeEach(batch.epoch,
                         {index->data<int64_t>(), static_cast<size_t>(index->numel())});
    HR_ASSIGN_OR_RETURN(Tensor field,
                        Tensor::Allocate(DType::kI32, {static_cast<int64_t>(each.size())}));
    std::copy(each.begin(), each.end(), field.mutable_data<int32_t>());
    batch.fields.emplace_back(std::string(kSampleKindsField), std::move(field));
    return Status::Ok();
  }

  const std::shared_ptr<StepRowsPlan> rows_plan_;
  const std::shared_ptr<const StepDealer> dealer_;
  const std::shared_ptr<BatchFormer> inner_;
  const std::string name_;
  const uint32_t every_rank_;
  const uint32_t flagged_;
  const bool consumer_forms_;
  const bool rows_;
  const std::shared_ptr<StepsSeen> seen_;
  const std::shared_ptr<SampleKinds> kinds_;
};

}  // namespace

Result<int> BalanceTokenField(const EngineInputs& inputs, const std::string& token_field) {
  const std::optional<int> field = TellingTokenField(inputs, token_field);
  if (!field.has_value()) {
    return Status::InvalidArgument(
        "batch.balance: the cost is told by the size pass of a chain that tokenizes "
        "(text.tokenize, unpadded) into batch field '" + token_field +
        "' (batch.pack.field); this pipeline's chain does not");
  }
  return *field;
}

bool BalanceDealsRows(const std::optional<PackOptions>& pack, int world) {
  return world > 1 && pack.has_value() && !pack->budget && pack->window > 0;
}

Result<std::shared_ptr<BatchFormer>> MakeBalancedFormer(FormingRun& run) {
  if (!run.balance.has_value()) return std::shared_ptr<BatchFormer>();
  const EngineInputs& inputs = *run.inputs;
  HR_ASSIGN_OR_RETURN(const int token_field, BalanceTokenField(inputs, run.balance->token_field));
  int world = run.engine->order.world_size;
  const bool on_demand = run.engine->schedule != Schedule::kSequential;
  if (on_demand) {
    // A Ray worker: any rank's batches, each rank's share of its step dealt here as the
    // rank's local run would deal it, and flagged (every_rank's dummy_kinds) as it leaves
    // (FinishTaken). With batch.pack or max_tokens the share leaves unpacked (the pack
    // formers take no on-demand run) and the rank packs it, as the local run packs its
    // own dealt shares.
    if (run.balance->ranks < 1) {
      return Status::InvalidArgument(
          "batch.balance: a Ray worker's on-demand run deals each step over the trainers' "
          "ranks: it needs their number (headrace.ray.Loader gives its workers its world "
          "size)");
    }
    world = run.balance->ranks;
  }
  HR_ASSIGN_OR_RETURN(StepCost cost, StepCost::Make(run.balance->cost));
  HR_ASSIGN_OR_RETURN(EpochOrder order, EpochOrder::Make(run.engine->order));
  // Sizes only: nothing kept for the samples' runs (the inner former's sizer, if any,
  // reads its own share again), vision tokens not located (no seq_len applies here).
  PackOptions sizing;
  sizing.seq_len = INT64_MAX;
  auto dealer = std::make_shared<const StepDealer>(
      std::make_shared<const EpochOrder>(std::move(order)), world, run.balance->index,
      SizeByTheSizePass(run.inputs, token_field, sizing, nullptr,
                        run.engine->io_budget_bytes, nullptr, run.engine->io_inflight),
      std::move(cost), run.balance->every_rank);
  auto seen = std::make_shared<StepsSeen>();
  auto kinds = std::make_shared<SampleKinds>();
  // With batch.pack and a window, each step's rows are planned over every rank's samples
  // and the rows dealt (PackPlanner::RowDeal).
  const bool rows = BalanceDealsRows(run.pack, world);
  std::shared_ptr<StepRowsPlan> rows_plan;
  if (rows && on_demand) {
    // A Ray worker: the rows' samples of whichever rank's batch it computes, from the plan
    // every rank makes (StepRowsPlan); the rank lays them out by its own plan.
    const std::optional<int> pack_field = TellingTokenField(inputs, run.pack->token_field);
    if (!pack_field.has_value()) {
      return Status::InvalidArgument(
          "batch.pack.window with batch.balance plans rows from the tokens the chain's size "
          "pass tells into batch.pack.field '" + run.pack->token_field + "'; it does not");
    }
    EpochOrderOptions ranks = run.engine->order;
    ranks.world_size = world;
    ranks.rank = 0;
    HR_ASSIGN_OR_RETURN(EpochOrder rank_order, EpochOrder::Make(ranks));
    PackOptions planning = *run.pack;
    planning.epoch_batches = rank_order.batches_per_rank_epoch();
    PackPlanner::Sizer sizer =
        SizeByTheSizePass(run.inputs, *pack_field, planning, nullptr, run.engine->io_budget_bytes,
                          nullptr, run.engine->io_inflight);
    const std::shared_ptr<const SizeIndex> index =
        run.sizes != nullptr ? run.sizes : run.balance->index;
    if (index != nullptr) sizer = SizeByTheIndex(index, planning.seq_len, std::move(sizer));
    rows_plan = std::make_shared<StepRowsPlan>(dealer, std::move(planning), std::move(sizer),
                                               seen);
  } else if (rows) {
    // A Ray rank (plan_packing off: its workers computed the rows' samples) plans each
    // step as its batch arrives, to lay it out as the workers' plan did.
    run.plans_at_push = !run.plan_packing;
    run.plan_packing = true;
    // The planned pack plans the whole step, and replays its window from whole steps.
    run.samples_of = [dealer](const BatchPosition& position) { return dealer->StepOf(position); };
    if (run.sizes == nullptr) run.sizes = run.balance->index;
    run.row_deal = PackPlanner::RowDeal{
        world, run.engine->order.rank,
        [dealer, seen, kinds, rank = run.engine->order.rank](
            int64_t epoch, std::span<const std::vector<int64_t>> step_rows,
            std::span<const std::vector<std::optional<PackPlanner::Told>>> told) {
          return dealer->RowsOf(rank, epoch, step_rows, told, *seen, *kinds);
        }};
  } else {
    // The formers below see the dealt samples wherever they ask for a batch's samples.
    run.samples_of = [dealer](const BatchPosition& position) {
      return dealer->SamplesOf(position, {}, nullptr);
    };
  }
  HR_ASSIGN_OR_RETURN(std::shared_ptr<BatchFormer> inner,
                      MakeFormerAfter(&MakeBalancedFormer, run));
  return std::shared_ptr<BatchFormer>(std::make_shared<BalancedFormer>(
      std::move(dealer), std::move(inner), run.balance->every_rank, world > 1,
      /*consumer_forms=*/on_demand && run.pack.has_value(), rows && !on_demand,
      std::move(seen), std::move(kinds), std::move(rows_plan)));
}

}  // namespace headrace
