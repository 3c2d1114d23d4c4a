#include "headrace/pipeline/prepared.h"

#include <algorithm>
#include <optional>

#include "headrace/exec/blend_order.h"
#include "headrace/exec/batch_formers.h"
#include "headrace/exec/pack_sizer.h"
#include "headrace/exec/size_index.h"
#include "headrace/formats/source_kinds.h"
#include "headrace/io/object_storage.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/loader.h"
#include "headrace/pipeline/plan.h"
#include "headrace/pipeline/source_fields.h"

namespace headrace {
namespace {

// The folder local media must be beneath: the kind's media root (formats/source_kinds.h:
// a manifest's root; a blend's, the deepest folder above its entries'); "" for a kind
// that reads no loose media by path.
Result<std::string> LocalMediaRoot(const SourceSpec& src) {
  const SourceKind& kind = SourceKindOf(src);
  if (kind.media_root == nullptr) return std::string();
  return kind.media_root(src);
}

// The storage a spec reads through when the caller gives none: local paths, s3:// and
// http(s):// URIs, each backend opened on first use.
Result<std::shared_ptr<Storage>> DefaultStorage(const PipelineSpec& spec) {
  LocalStorageOptions local;
  local.threads = spec.execution.io_threads > 0 ? spec.execution.io_threads : 2;
  const SourceSpec& src = spec.source;
  if (!spec.storage.follow_symlinks) {
    // Local media are opened beneath the dataset root (storage.follow_symlinks); for a
    // blend, beneath the folder that holds every manifest entry's root.
    HR_ASSIGN_OR_RETURN(std::string root, LocalMediaRoot(src));
    if (!root.empty() && root.front() == '/') local.root = std::move(root);
  }
  StorageSpec storage = spec.storage;
  // Media are held to the I/O budget by the read stage; this caps every read, the
  // manifest's and a tokenizer's too (io/storage_spec.h).
  if (storage.max_object_bytes == 0) {
    storage.max_object_bytes = std::max(spec.memory.budget_bytes, int64_t{1} << 30);
  }
  return OpenStorage(storage, local);
}

// The budget errors, naming the cache that took the memory when there is one.
Status BudgetTooSmall(const PipelineSpec& spec, const Source& source, int64_t io_budget) {
  const std::string budget = std::to_string(spec.memory.budget_bytes);
  const std::string cache = std::to_string(source.info().cache_bytes);
  const std::string io = std::to_string(io_budget);
  if (source.read_policy() == ReadPolicy::kBoundedByCache) {  // a Parquet row-group cache
    return Status::InvalidArgument(
        "memory.budget_bytes (" + budget + ") cannot hold the Parquet row-group cache (" + cache +
        " bytes: source.cache_bytes) plus execution.io_budget_bytes (" + io +
        "): raise memory.budget_bytes or lower source.cache_bytes");
  }
  if (source.info().cache_bytes > 0) {
    return Status::InvalidArgument(
        "memory.budget_bytes (" + budget + ") cannot hold the shard block cache (" + cache +
        " bytes: source.cache_bytes, sized by source.shuffle_window) plus "
        "execution.io_budget_bytes (" + io +
        "): raise memory.budget_bytes, or lower source.shuffle_window or source.cache_bytes");
  }
  return Status::InvalidArgument("execution.io_budget_bytes must be below memory.budget_bytes");
}

// batch.pack as the packer runs it: the sequence's pads and vision ids from the op that
// writes it (a materialization keeps them in materialized.json). A layout packing cannot
// use is a config error now, before work starts.
Result<PackOptions> PackOptionsOf(const BatchSpec& batch, const PipelinePlan& plan) {
  PackOptions o = batch.pack_options();
  for (const TokenSequence& s : plan.sequences) {
    if (s.field != o.token_field) continue;
    if (batch.pack.pad_id < 0) o.pad_id = s.pad_id;
    o.ignore_index = s.ignore_index;
    o.vision_token_ids = s.vision_token_ids;
  }
  HR_RETURN_IF_ERROR(Packer::Make(plan.fields, o).status());
  return o;
}

// The size index `spec` names (batch.balance.index or batch.pack.index: one file, checked
// equal by validation), read and checked against the pipeline; null when none is named.
// Refused before any work, saying what to run, when it is missing, cut short or built for
// another pipeline or dataset.
Result<std::shared_ptr<const SizeIndex>> SizeIndexOf(const PipelineSpec& spec,
                                                     const EngineInputs& inputs) {
  const bool balanced = !spec.batch.balance.index.empty();
  const std::string& path = balanced ? spec.batch.balance.index : spec.batch.pack.index;
  if (path.empty()) return std::shared_ptr<const SizeIndex>();
  const std::string key = balanced ? "batch.balance.index: " : "batch.pack.index: ";
  const std::string rebuild = "; build it with `headrace index sizes CONFIG --out " + path + "`";
  Result<SizeIndex> index = SizeIndex::Read(path);
  if (!index.ok()) return Status::InvalidArgument(key + index.status().message() + rebuild);
  const std::string fingerprint = SizeFingerprint(spec);
  if (index->fingerprint() != fingerprint || index->size() != inputs.source->size()) {
    return Status::InvalidArgument(
        key + path + " was built for another pipeline or dataset (" +
        std::to_string(index->size()) + " samples, fingerprint " + index->fingerprint() +
        "; this one: " + std::to_string(inputs.source->size()) + " samples, " + fingerprint +
        ")" + rebuild);
  }
  return std::make_shared<const SizeIndex>(*std::move(index));
}

// batch.balance as `spec`'s runs deal: its cost and the size index (`sizes`, null: none);
// refused before any work when the chain cannot tell tokens.
Result<BalanceOptions> BalanceOptionsOf(const PipelineSpec& spec, const EngineInputs& inputs,
                                        std::shared_ptr<const SizeIndex> sizes) {
  HR_ASSIGN_OR_RETURN(StepCostOptions cost, StepCostOptionsOf(spec.batch.balance));
  BalanceOptions balance{.cost = cost, .token_field = spec.batch.pack.field};
  HR_ASSIGN_OR_RETURN(balance.every_rank, EveryRankOf(spec.batch.balance));
  HR_RETURN_IF_ERROR(BalanceTokenField(inputs, balance.token_field).status());
  balance.index = std::move(sizes);
  return balance;
}

}  // namespace

Result<std::shared_ptr<const PreparedPipeline>> PreparedPipeline::Make(
    const PipelineSpec& spec, std::shared_ptr<Storage> storage) {
  HR_RETURN_IF_ERROR(ValidatePipelineSpec(spec));
  std::shared_ptr<PreparedPipeline> prepared(new PreparedPipeline());
  prepared->spec_ = spec;
  if (!storage) {
    HR_ASSIGN_OR_RETURN(storage, DefaultStorage(spec));
  }
  prepared->storage_ = storage;

  SourceOptions source_options;
  source_options.shuffle = spec.shuffle;
  source_options.seed = spec.seed;
  source_options.epochs = spec.epochs;
  source_options.samples_in_flight = int64_t{spec.prefetch.depth} * spec.batch.size;
  source_options.memory_budget_bytes = spec.memory.budget_bytes;
  source_options.fail_on_bad_shard = spec.errors.on_bad_shard == BadShardPolicy::kFail;
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const Source> source,
                      OpenSource(spec.source, source_options, std::move(storage)));
  // A blend's epoch (its length, its weights) is a configuration error now, not at Run.
  // Its order is held whole (exec/blend_order.h): 4 bytes a position, and the parts'
  // choices beside it while it is made. An epoch whose order would not fit the memory
  // budget is refused here (until: samples 1e9 took 7.7 GB; 6.9e10 aborted).
  if (const std::optional<BlendOptions>& blend = source->order().blend; blend.has_value()) {
    constexpr int64_t kOrderBytesPerPosition = 8;
    const int64_t most = spec.memory.budget_bytes / kOrderBytesPerPosition;
    // Walked no further than the budget holds (a long exhausted epoch took minutes).
    HR_ASSIGN_OR_RETURN(const int64_t positions, BlendEpochLength(*blend, most + 1));
    if (positions > most) {
      const char* key = blend->until == BlendUntil::kSamples    ? "source.samples"
                        : blend->until == BlendUntil::kEpochized ? "source.mix[*].repeat"
                                                                 : "source.mix[*].weight";
      return Status::InvalidArgument(
          std::string(key) + ": an epoch of " + std::to_string(positions) +
          " positions or more, whose order is held in memory (" +
          std::to_string(kOrderBytesPerPosition) + " bytes a position while it is made), "
          "needs more than memory.budget_bytes " + std::to_string(spec.memory.budget_bytes) +
          ": shorten the epoch or raise the budget");
    }
  }

  PipelinePlan plan;
  if (const MaterializedInfo* rows = source->materialized(); rows != nullptr) {
    plan = MaterializedPlan(*rows);
  } else {
    // The planner sees the fields the source resolved (a Parquet file's columns).
    PipelineSpec planned = spec;
    planned.source = source->spec();
    HR_ASSIGN_OR_RETURN(plan, PlanPipeline(planned, *source->storage()));
  }
  const ExecutionSpec& ex = spec.execution;
  const int64_t io_budget = ex.io_budget_bytes > 0 ? ex.io_budget_bytes : spec.memory.budget_bytes / 8;
  const int64_t batch_budget = spec.memory.budget_bytes - io_budget - source->info().cache_bytes;
  if (batch_budget <= 0) return BudgetTooSmall(spec, *source, io_budget);
  HR_RETURN_IF_ERROR(CheckBatchFitsBudget(spec, plan, batch_budget));
  prepared->io_budget_bytes_ = io_budget;
  prepared->batch_budget_bytes_ = batch_budget;
  prepared->cpu_threads_ = ex.cpu_threads > 0 ? ex.cpu_threads : AvailableCores();
  prepared->io_inflight_ = ResolveIoInflight(ex, prepared->cpu_threads_);

  if (spec.batch.regroups()) {
    HR_ASSIGN_OR_RETURN(prepared->pack_, PackOptionsOf(spec.batch, plan));
  }
  prepared->sequences_ = plan.sequences;
  auto in = std::make_shared<EngineInputs>();
  in->chains = std::move(plan.chains);
  in->fields = std::move(plan.fields);
  in->batch_ops = std::move(plan.batch_ops);
  in->reads_media = plan.reads_media || source->values_need_reads();
  // Sources whose samples come with their reads (shard members, row groups), and reads
  // bounded by a cache rather than the budget, read whole.
  if (!source->values_need_reads() && source->read_policy() == ReadPolicy::kHeldToIoBudget) {
    in->ranged_fields = std::move(plan.ranged_fields);
  }
  in->strings = std::move(plan.strings);
  in->source = std::move(source);
  prepared->inputs_ = std::move(in);
  HR_ASSIGN_OR_RETURN(prepared->sizes_, SizeIndexOf(spec, *prepared->inputs_));
  if (spec.batch.balance.enabled()) {
    HR_ASSIGN_OR_RETURN(prepared->balance_,
                        BalanceOptionsOf(spec, *prepared->inputs_, prepared->sizes_));
  }
  return std::shared_ptr<const PreparedPipeline>(std::move(prepared));
}

Result<std::vector<int64_t>> PreparedPipeline::BlendPicks(
    int64_t epoch, int64_t positions, const std::optional<EpochRemainder>& remainder,
    const std::vector<int64_t>& blend_start) const {
  if (!source().order().blend.has_value()) return std::vector<int64_t>();
  HR_ASSIGN_OR_RETURN(EpochOrder order, RunWideOrder(remainder, blend_start));
  return order.BlendPicks(epoch, positions);
}

Result<EpochOrderOptions> PreparedPipeline::OrderOptions(
    const std::optional<EpochRemainder>& remainder,
    const std::vector<int64_t>& blend_start) const {
  EpochOrderOptions o;
  o.num_samples = source().size();
  o.batch_size = spec_.batch.size;
  o.drop_last = spec_.batch.drop_last;
  o.shuffle = spec_.shuffle;
  o.seed = spec_.seed;
  o.epochs = spec_.epochs;
  o.shard_samples = source().order().shard_samples;
  o.shuffle_window = source().order().shuffle_window;
  o.blend = source().order().blend;
  if (!blend_start.empty()) {
    if (!o.blend.has_value()) {
      return Status::InvalidArgument("state dict: blend picks given for a source that is not a "
                                     "blend (source.mix)");
    }
    o.blend->start = blend_start;
  }
  o.remainder = remainder;
  return o;
}

Result<EpochOrder> PreparedPipeline::RunWideOrder(const std::optional<EpochRemainder>& remainder,
                                                  const std::vector<int64_t>& blend_start) const {
  HR_ASSIGN_OR_RETURN(EpochOrderOptions o, OrderOptions(remainder, blend_start));
  o.epochs = std::nullopt;
  return EpochOrder::Make(o);
}

Result<EpochOrder> PreparedPipeline::RankOrder(int world_size,
                                               const std::optional<EpochRemainder>& remainder,
                                               const std::vector<int64_t>& blend_start) const {
  HR_ASSIGN_OR_RETURN(EpochOrderOptions o, OrderOptions(remainder, blend_start));
  o.world_size = world_size;
  return EpochOrder::Make(o);
}

RunBudgetOptions RunBudgetOptionsOf(const PipelineSpec& spec) {
  RunBudgetOptions budget;
  budget.max_error_rate = spec.errors.max_error_rate;
  budget.min_samples = spec.errors.min_samples;
  budget.max_kept_errors = spec.errors.max_logged;
  for (const MixEntrySpec& e : spec.source.mix) {
    budget.entries.push_back(e.name);
    budget.entry_max_error_rate.push_back(e.max_error_rate);
  }
  return budget;
}

EngineOptions PreparedPipeline::EngineOptionsFor(const LoaderOptions& options,
                                                 EpochOrderOptions order) const {
  EngineOptions opt;
  opt.order = std::move(order);
  opt.io_budget_bytes = io_budget_bytes_;
  opt.batch_budget_bytes = batch_budget_bytes_;
  opt.cpu_threads = cpu_threads_;
  opt.io_inflight = io_inflight_;
  opt.prefetch_depth = spec_.prefetch.depth;
  opt.order.rank = options.rank;
  opt.order.world_size = options.world_size;
  opt.start_epoch = options.start_epoch;
  opt.start_batch = options.start_batch;
  opt.deliver_empty_batches = options.deliver_empty_batches;
  opt.schedule = options.schedule;
  opt.budget = RunBudgetOptionsOf(spec_);
  opt.scratch_retain_bytes = spec_.memory.scratch_bytes_per_thread;
  if (options.allocator != nullptr) opt.allocator = options.allocator;
  opt.trace = options.trace;
  return opt;
}

Result<PreparedPipeline::Forming> PreparedPipeline::Form(const LoaderOptions& options) const {
  if (options.remainder.has_value() && options.start_epoch != options.remainder->epoch) {
    return Status::InvalidArgument("the rest of epoch " +
                                   std::to_string(options.remainder->epoch) +
                                   " starts a run at that epoch, not at " +
                                   std::to_string(options.start_epoch));
  }
  HR_ASSIGN_OR_RETURN(EpochOrderOptions order, OrderOptions(options.remainder, options.blend_start));
  Forming out{.engine = EngineOptionsFor(options, std::move(order))};
  if (sizes_ != nullptr) {
    // Each sample's tokens checked against its entry as it runs (the chain tells them:
    // the index was read for it).
    out.engine.sizes_token_field =
        TellingTokenField(*inputs_, spec_.batch.pack.field).value_or(-1);
    out.engine.sizes = sizes_;
  }
  // The policy may move the start.
  FormingRun forming{.inputs = inputs_, .pack = pack_, .engine = &out.engine,
                     .resume = options.pack_state, .plan_packing = options.plan_packing,
                     .allocator = options.allocator, .sizes = sizes_};
  forming.balance = balance_;
  if (forming.balance.has_value()) forming.balance->ranks = options.balance_ranks;
  HR_ASSIGN_OR_RETURN(out.former, MakeBatchFormer(forming));
  return out;
}

Result<std::unique_ptr<Loader>> PreparedPipeline::Run(const LoaderOptions& options,
                                                      Clock::time_point started) const {
  HR_ASSIGN_OR_RETURN(Forming forming, Form(options));
  std::shared_ptr<BatchFormer> former = forming.former;
  forming.engine.former = former;
  HR_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                      Engine::Start(inputs_, std::move(forming.engine)));
  return std::unique_ptr<Loader>(new Loader(shared_from_this(), std::move(engine),
                                            std::move(former), options.trace, started));
}

}  // namespace headrace
