// pack planned: batch.pack / batch.max_tokens decided before the samples run
// (exec/pack_planner.h), from the sizes the chain's size pass tells (exec/pack_sizer.h):
// the engine computes each packed batch's samples, in row order, so that their rows are
// written where the packed batch holds them. Taken where batches leave in order and the
// chain can tell the tokens (ChainTellsTokens), unless LoaderOptions::plan_packing is off.
#include <algorithm>

#include "headrace/exec/pack_former.h"
#include "headrace/exec/pack_planner.h"
#include "headrace/exec/pack_sizer.h"
#include "headrace/exec/size_index.h"

namespace headrace {
namespace {

class PlannedPackFormer final : public PackFormer {
 public:
  // `plan_at_push`: each input batch's plan is made as it arrives, from `batch_of` (a Ray
  // rank with rows dealt: its workers computed the rows' samples; Compose is not called).
  PlannedPackFormer(PackingQueue queue, bool deliver_empty, std::shared_ptr<PackPlanner> planner,
                    std::shared_ptr<ReadMedia> read, std::shared_ptr<ToldSequences> told,
                    int64_t per_epoch, std::optional<PackPlanner::InputBatch> plan_at_push)
      : PackFormer(std::move(queue), deliver_empty),
        planner_(std::move(planner)),
        read_(std::move(read)),
        told_(std::move(told)),
        per_epoch_(per_epoch),
        plan_at_push_(std::move(plan_at_push)) {}

  std::string_view name() const override { return "pack planned"; }
  std::optional<std::vector<int64_t>> Compose(const BatchPosition& p,
                                              std::span<const int64_t> samples,
                                              std::stop_token stop) override {
    const int64_t position = p.local_index - p.epoch * per_epoch_;
    return planner_->Plan(p.epoch, position, p.local_index, position + 1 == per_epoch_, samples,
                          std::move(stop));
  }
  HandedOver HandOver(int64_t epoch, int64_t index, bool media) override {
    return {media ? read_->Take(epoch, index) : std::nullopt, told_->Take(epoch, index)};
  }
  // The samples' rows are laid out where the plan put them: batches leave joined.
  bool keeps_sample_rows() const override { return false; }

 private:
  Status Push(const Batch& in, int64_t position, bool last, BatchInput&) override {
    // The engine's batch holds the packed batch's samples, in row order.
    if (plan_at_push_.has_value()) HR_RETURN_IF_ERROR(PlanArrived(in, position, last));
    std::optional<PlannedPack> plan = planner_->Take(in.global_index);
    if (!plan.has_value()) {
      return Status::Internal("packing: no plan for batch " + std::to_string(in.global_index));
    }
    return queue_.PushPlanned(in, position, plan->rows, std::move(plan->skipped),
                              std::move(plan->failed), plan->before, plan->after);
  }

  // Plans input batch `position` as it arrives; its samples must be the plan's, in row
  // order (the plan the workers computed them by).
  Status PlanArrived(const Batch& in, int64_t position, bool last) {
    const std::vector<int64_t> planned = planner_->Plan(
        in.epoch, position, in.global_index, last, (*plan_at_push_)(in.epoch, position));
    const Tensor* index = in.Find("index");
    if (index == nullptr ||
        !std::equal(planned.begin(), planned.end(), index->data<int64_t>(),
                    index->data<int64_t>() + index->numel())) {
      return Status::Internal(
          "packing: batch " + std::to_string(in.global_index) + " does not hold the samples "
          "its rows were planned with (a worker sized them otherwise: give the run a size "
          "index, batch.balance.index, so that every process plans from the same sizes)");
    }
    return Status::Ok();
  }

  const std::shared_ptr<PackPlanner> planner_;
  const std::shared_ptr<ReadMedia> read_;
  const std::shared_ptr<ToldSequences> told_;  // run-scoped: this run's samples' only
  const int64_t per_epoch_;
  const std::optional<PackPlanner::InputBatch> plan_at_push_;
};

}  // namespace

Result<std::shared_ptr<BatchFormer>> MakePlannedPackFormer(FormingRun& run) {
  if (!run.pack.has_value() || !run.plan_packing ||
      run.engine->schedule != Schedule::kSequential) {
    return std::shared_ptr<BatchFormer>();
  }
  const EngineInputs& inputs = *run.inputs;
  const std::optional<int> token_field = TellingTokenField(inputs, run.pack->token_field);
  if (!token_field.has_value()) return std::shared_ptr<BatchFormer>();

  EngineOptions& engine = *run.engine;
  const PackOptions pack = PackFormer::OptionsFor(run);
  HR_ASSIGN_OR_RETURN(Packer packer, Packer::Make(inputs.fields, pack));
  PackingQueue queue(std::move(packer));
  const bool deliver_empty = engine.deliver_empty_batches;
  engine.deliver_empty_batches = true;

  HR_ASSIGN_OR_RETURN(EpochOrder order, EpochOrder::Make(engine.order));
  const int64_t per_epoch = std::max<int64_t>(order.batches_per_rank_epoch(), 1);
  PackOptions planning = pack;
  planning.epoch_batches = order.batches_per_rank_epoch();
  // The media the sizer reads, kept for the samples' runs (not read twice) up to the I/O
  // budget's worth: outside it (the budget counts reads in flight), an allowance.
  auto read = std::make_shared<ReadMedia>(engine.io_budget_bytes);
  // The tokens the sizer's size pass tokenized, for the samples' own size passes: a
  // sample is tokenized once (outside the budgets too: at most kToldBytes).
  auto told = std::make_shared<ToldSequences>(kToldBytes, kToldSamples);
  // Rows dealt over the ranks: the driver sizes every rank's samples of each step, most
  // of which other ranks run: nothing is kept for the runs (this rank's own samples are
  // read again by their runs; a size index spares the reads).
  const bool dealt = run.row_deal.has_value();
  PackPlanner::Sizer sizer =
      SizeByTheSizePass(run.inputs, *token_field, pack, dealt ? nullptr : read,
                        engine.io_budget_bytes, dealt ? nullptr : told, engine.io_inflight);
  // With a size index, the samples that fit a row are planned by their entries: the
  // driver reads nothing ahead of the run and tokenizes nothing (each sample's run does).
  if (run.sizes != nullptr) sizer = SizeByTheIndex(run.sizes, pack.seq_len, std::move(sizer));
  auto planner = std::make_shared<PackPlanner>(planning, std::move(sizer), run.row_deal);
  const auto shared_order = std::make_shared<const EpochOrder>(std::move(order));
  const PackPlanner::InputBatch batch_of = [shared_order, per_epoch,
                                             samples_of = run.samples_of](int64_t epoch,
                                                                          int64_t position) {
    const BatchPosition p = shared_order->Position(epoch * per_epoch + position);
    return samples_of ? samples_of(p) : shared_order->SampleIndices(p);
  };
  if (run.resume.has_value()) {
    HR_RETURN_IF_ERROR(planner->Restore(*run.resume, batch_of));
    queue.ResumePlanned(*run.resume);
    engine.start_epoch = run.resume->epoch;
    engine.start_batch = run.resume->next_batch;
  } else if (engine.start_epoch > 0 || engine.start_batch > 0) {
    // The window as an unbroken run has it at the start.
    const int64_t from = engine.start_epoch * per_epoch + engine.start_batch;
    engine.start_epoch = from / per_epoch;
    engine.start_batch = from % per_epoch;
    planner->Skip(engine.start_epoch, engine.start_batch, batch_of);
  }
  return std::shared_ptr<BatchFormer>(std::make_shared<PlannedPackFormer>(
      std::move(queue), deliver_empty, std::move(planner), std::move(read), std::move(told),
      per_epoch,
      run.plans_at_push ? std::optional<PackPlanner::InputBatch>(batch_of) : std::nullopt));
}

}  // namespace headrace
