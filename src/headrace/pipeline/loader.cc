#include "headrace/pipeline/loader.h"

#include <algorithm>

#include <limits>

#include "headrace/formats/manifest_lines.h"
#include "headrace/formats/materialized.h"
#include "headrace/formats/parquet_records.h"
#include "headrace/formats/parquet_row_groups.h"
#include "headrace/formats/parquet_source.h"
#include "headrace/formats/shard_source.h"
#include "headrace/io/block_cache.h"
#include "headrace/io/object_storage.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/plan.h"
#include "headrace/pipeline/source_fields.h"

namespace headrace {

int ResolveIoInflight(const ExecutionSpec& execution, int cpu_threads) {
  if (execution.io_inflight > 0) return execution.io_inflight;
  // In 64 bits: cpu_threads is validated, but this is public and must not overflow.
  const int64_t automatic = int64_t{kAutoIoInflightPerThread} * std::max(cpu_threads, 1);
  return static_cast<int>(std::clamp<int64_t>(automatic, kMinAutoIoInflight, kMaxAutoIoInflight));
}

Result<int64_t> BlockCacheBytes(const PipelineSpec& spec, const ShardSource& shards) {
  const SourceSpec& src = spec.source;
  const int64_t block = src.block_bytes;
  // A shard's blocks hold exactly its bytes: the last block is cut at its size.
  int64_t largest = 0;
  int64_t total = 0;
  for (const int64_t bytes : shards.shard_bytes) {
    largest = std::max(largest, bytes);
    total += bytes;
  }
  const int64_t one_block = std::max<int64_t>(1, std::min(block, largest));
  const auto window = std::min<int64_t>(src.shuffle_window,
                                        static_cast<int64_t>(shards.shard_bytes.size()));
  // Shuffled, a window's samples come in any order: every block of its shards is in use
  // until the window ends. In order, a member's one or two blocks are.
  const int64_t needed = spec.shuffle ? window * largest : std::min(total, 2 * one_block);
  if (src.cache_bytes > 0) {
    if (src.cache_bytes < needed) {
      return Status::InvalidArgument(
          "source.cache_bytes (" + std::to_string(src.cache_bytes) + ") cannot hold a window of " +
          std::to_string(window) + " shards (source.shuffle_window) of up to " +
          std::to_string(largest) + " bytes: it needs " +
          std::to_string(needed) +
          "; raise source.cache_bytes, lower source.shuffle_window, or write smaller shards");
    }
    return src.cache_bytes;
  }
  // One shard more than the window: the next window's first blocks load while the last
  // samples of this one are still read.
  const int64_t automatic = spec.shuffle ? std::min(total, (window + 1) * largest)
                                         : std::min(total, 4 * one_block);
  return std::max<int64_t>(automatic, 1);
}

Result<int64_t> RowGroupCacheBytes(const PipelineSpec& spec, const ParquetSource& source) {
  const SourceSpec& src = spec.source;
  int64_t largest = 0;  // what one group holds at most: its bytes, then its cells
  int64_t total = 0;
  int64_t fewest_rows = std::numeric_limits<int64_t>::max();
  for (size_t g = 0; g < source.groups.size(); ++g) {
    const ParquetSource::Group& group = source.groups[g];
    const ParquetRowGroup& rg = source.layouts[group.file].row_groups[group.row_group];
    // A decoded cell costs its bytes plus its slot (ParquetValue).
    const int64_t held =
        std::max(rg.length, rg.uncompressed_bytes + rg.rows * int64_t{sizeof(ParquetValue)});
    largest = std::max(largest, held);
    total += held;
    if (rg.rows > 0) fewest_rows = std::min(fewest_rows, rg.rows);
  }
  if (src.cache_bytes > 0) return src.cache_bytes;
  // The groups the samples in flight span: the batches admitted ahead (prefetch depth) in
  // order, plus a shuffle window, whose samples come in any order.
  const int64_t in_flight = int64_t{spec.prefetch.depth} * spec.batch.size;
  const int64_t groups_in_flight =
      (fewest_rows == std::numeric_limits<int64_t>::max() ? 1 : in_flight / fewest_rows + 2) +
      (spec.shuffle ? src.shuffle_window : 0);
  int64_t automatic = largest;
  if (groups_in_flight > 0 && largest <= total / groups_in_flight) {
    automatic = groups_in_flight * largest;
  } else {
    automatic = total;
  }
  // At most half the budget: the rest is batches and the I/O budget. A group that does
  // not fit is each of its samples' error, naming the sizes (parquet_row_groups.h).
  return std::max<int64_t>(1, std::min(automatic, spec.memory.budget_bytes / 2));
}

namespace {

// The records each epoch of the run reads from a materialization: one set for every
// epoch, or the set of each epoch. A config that does not match what was materialized
// (another seed, an epoch not written) is refused naming its key.
Result<std::vector<std::shared_ptr<const std::vector<SampleRecord>>>> MaterializedEpochs(
    const PipelineSpec& spec, const LoaderOptions& options, MaterializedSource& source) {
  const MaterializedInfo& info = source.info;
  std::vector<std::shared_ptr<const std::vector<SampleRecord>>> epochs;
  if (!info.per_epoch()) {
    epochs.push_back(
        std::make_shared<const std::vector<SampleRecord>>(std::move(source.records[0])));
    return epochs;
  }
  std::string written;
  for (const auto& set : info.sets) {
    written += (written.empty() ? "" : ", ") + std::to_string(set.epoch.value_or(-1));
  }
  const std::string why = source.uri + " was materialized per epoch (random ops: " +
                          info.random_ops[0] + (info.random_ops.size() > 1 ? ", ..." : "") +
                          "), epochs " + written;
  if (spec.seed != info.seed) {
    return Status::InvalidArgument("seed: " + why + " with seed " + std::to_string(info.seed) +
                                   ", not " + std::to_string(spec.seed) +
                                   ": set seed: " + std::to_string(info.seed) +
                                   " or materialize again with this seed");
  }
  if (!spec.epochs) {
    return Status::InvalidArgument("epochs: " + why + ": a run of it needs a bounded epochs");
  }
  for (int64_t e = 0; e < *spec.epochs; ++e) {
    size_t found = info.sets.size();
    for (size_t i = 0; i < info.sets.size(); ++i) {
      if (info.sets[i].epoch == e) found = i;
    }
    if (found == info.sets.size()) {
      if (e < options.start_epoch && !epochs.empty()) {  // never read: the run starts later
        epochs.push_back(epochs.back());
        continue;
      }
      if (e >= options.start_epoch) {
        return Status::InvalidArgument("epochs: " + why + "; this run (epochs: " +
                                       std::to_string(*spec.epochs) + ") needs epoch " +
                                       std::to_string(e) + " too: materialize it (--epochs)");
      }
      found = 0;  // an epoch before the start: any set stands in
    }
    epochs.push_back(
        std::make_shared<const std::vector<SampleRecord>>(source.records[found]));
  }
  return epochs;
}

}  // namespace

Result<std::unique_ptr<Loader>> Loader::Make(const PipelineSpec& spec,
                                             const LoaderOptions& options) {
  HR_RETURN_IF_ERROR(ValidatePipelineSpec(spec));
  std::unique_ptr<Loader> loader(new Loader());
  loader->created_ = Clock::now();
  loader->spec_ = spec;
  const ExecutionSpec& ex = spec.execution;
  loader->storage_ = options.storage;
  if (!loader->storage_) {
    // Local paths, s3:// and http(s):// URIs, each backend opened on first use.
    LocalStorageOptions local;
    local.threads = ex.io_threads > 0 ? ex.io_threads : 2;
    if (!spec.storage.follow_symlinks && spec.source.shards.empty() &&
        spec.source.parquet.empty() && spec.source.materialized.empty()) {
      // Local media are opened beneath the dataset root (storage.follow_symlinks).
      Result<std::string> root = ManifestRoot(spec.source);
      if (!root.ok()) return root.status();
      if (!root->empty() && root->front() == '/') local.root = *std::move(root);
    }
    loader->storage_ = OpenStorage(spec.storage, local);
  }
  EngineOptions opt;
  int64_t cache_bytes = 0;  // the shard source's block cache, part of the budget
  // The spec the planner sees: a Parquet source's fields are resolved from its columns.
  PipelineSpec planned = spec;
  std::shared_ptr<ParquetRowGroupCache> row_groups;
  std::shared_ptr<const ShardFieldMap> shard_fields;  // the shard source's, for its prepare hook
  std::vector<std::shared_ptr<const std::vector<SampleRecord>>> epoch_records;
  std::optional<PipelinePlan> materialized_plan;
  if (!spec.source.materialized.empty()) {
    HR_ASSIGN_OR_RETURN(MaterializedSource source,
                        LoadMaterializedSource(*loader->storage_, spec.source.materialized));
    HR_ASSIGN_OR_RETURN(epoch_records, MaterializedEpochs(spec, options, source));
    const MaterializedInfo& info = source.info;
    std::string epochs = "all";
    if (info.per_epoch()) {
      epochs.clear();
      for (const auto& set : info.sets) {
        epochs += (epochs.empty() ? "" : ",") + std::to_string(set.epoch.value_or(-1));
      }
    }
    loader->source_ = "materialized " + spec.source.materialized + " (" +
                      std::to_string(info.dataset_samples) + " samples, epochs " + epochs +
                      ", written by headrace " + info.headrace_version + ")";
    opt.order.shard_samples = info.shard_samples;
    opt.order.shuffle_window = info.shuffle_window;
    auto manifest = std::make_shared<Manifest>();
    manifest->path = spec.source.materialized;
    manifest->records = *epoch_records.front();
    for (const SampleRecord& r : manifest->records) manifest->bad_lines += r.status.ok() ? 0 : 1;
    loader->manifest_ = std::move(manifest);
    loader->manifest_bytes_ = static_cast<int64_t>(
        RecordsHeapBytes(loader->manifest_->records) * std::max<size_t>(1, info.sets.size()));
    materialized_plan = MaterializedPlan(info);
    if (!info.per_epoch()) epoch_records.clear();  // one set: `records` serves every epoch
  } else if (!spec.source.parquet.empty()) {
    // Compact: a regular row's record is made when its batch starts (parquet_records.h).
    HR_ASSIGN_OR_RETURN(ParquetSource parquet,
                        LoadParquetSource(*loader->storage_, spec.source, /*compact=*/true));
    HR_ASSIGN_OR_RETURN(cache_bytes, RowGroupCacheBytes(spec, parquet));
    planned.source.fields = parquet.fields;
    loader->manifest_bytes_ = static_cast<int64_t>(ParquetSourceMemoryBytes(parquet));
    loader->source_ = "parquet " + spec.source.parquet + " (" +
                      std::to_string(parquet.files.size()) + " files, " +
                      std::to_string(parquet.groups.size()) + " row groups)";
    opt.order.shard_samples = parquet.group_rows;
    opt.order.shuffle_window = spec.source.shuffle_window;
    auto manifest = std::make_shared<Manifest>();  // the path and bad count; records_ has them
    manifest->path = spec.source.parquet;
    manifest->bad_lines = parquet.bad_records;
    loader->manifest_ = std::move(manifest);
    auto source = std::make_shared<const ParquetSource>(std::move(parquet));
    loader->records_ = std::make_shared<ParquetRecords>(source);
    row_groups = std::make_shared<ParquetRowGroupCache>(loader->storage_, std::move(source),
                                                        spec.source, cache_bytes);
    loader->storage_ = row_groups;
    loader->row_group_cache_ = row_groups;
  } else if (spec.source.shards.empty()) {
    HR_ASSIGN_OR_RETURN(ManifestRecords manifest,
                        LoadManifestRecords(*loader->storage_, spec.source));
    loader->manifest_ = std::move(manifest.manifest);
    loader->records_ = std::move(manifest.records);
    loader->manifest_bytes_ = manifest.heap_bytes;
    loader->manifest_mapped_bytes_ = manifest.mapped_bytes;
    loader->source_ = "manifest " + spec.source.manifest +
                      (loader->manifest_->records.empty() ? " (kept as lines)" : "");
  } else {
    // The records compact (~70 bytes a sample, not ~400), each built when its batch starts.
    auto compact = std::make_shared<ShardRecords>();
    HR_ASSIGN_OR_RETURN(ShardSource shards,
                        LoadShardSource(*loader->storage_, spec.source, compact.get()));
    HR_ASSIGN_OR_RETURN(cache_bytes, BlockCacheBytes(spec, shards));
    auto cache = std::make_shared<BlockCache>(
        loader->storage_, BlockCacheOptions{spec.source.block_bytes, cache_bytes});
    for (size_t i = 0; i < shards.shards.size(); ++i) {
      cache->SetObjectSize(shards.shards[i], shards.shard_bytes[i]);
    }
    loader->storage_ = cache;
    loader->block_cache_ = std::move(cache);
    loader->manifest_bytes_ =
        static_cast<int64_t>(ShardSourceMemoryBytes(shards)) + compact->Memory().heap_bytes;
    loader->records_ = std::move(compact);
    loader->source_ = "shards " + spec.source.shards + " (" +
                      std::to_string(shards.shards.size()) + " shards, " +
                      std::to_string(shards.indexed_shards) + " indexed, " +
                      std::to_string(shards.scanned_shards) + " scanned)";
    shard_fields = std::make_shared<const ShardFieldMap>(std::move(shards.map));
    opt.order.shard_samples = std::move(shards.shard_samples);
    opt.order.shuffle_window = spec.source.shuffle_window;
    auto manifest = std::make_shared<Manifest>();  // the path and bad count; records_ has them
    manifest->path = spec.source.shards;
    manifest->bad_lines = shards.bad_samples;
    loader->manifest_ = std::move(manifest);
  }
  PipelinePlan plan;
  if (materialized_plan) {
    plan = std::move(*materialized_plan);
  } else {
    HR_ASSIGN_OR_RETURN(plan, PlanPipeline(planned, *loader->storage_));
  }
  opt.io_budget_bytes = ex.io_budget_bytes > 0 ? ex.io_budget_bytes : spec.memory.budget_bytes / 8;
  opt.batch_budget_bytes = spec.memory.budget_bytes - opt.io_budget_bytes - cache_bytes;
  if (opt.batch_budget_bytes <= 0) {
    if (row_groups != nullptr) {
      return Status::InvalidArgument(
          "memory.budget_bytes (" + std::to_string(spec.memory.budget_bytes) +
          ") cannot hold the Parquet row-group cache (" + std::to_string(cache_bytes) +
          " bytes: source.cache_bytes) plus execution.io_budget_bytes (" +
          std::to_string(opt.io_budget_bytes) +
          "): raise memory.budget_bytes or lower source.cache_bytes");
    }
    if (cache_bytes > 0) {
      return Status::InvalidArgument(
          "memory.budget_bytes (" + std::to_string(spec.memory.budget_bytes) +
          ") cannot hold the shard block cache (" + std::to_string(cache_bytes) +
          " bytes: source.cache_bytes, sized by source.shuffle_window) plus "
          "execution.io_budget_bytes (" + std::to_string(opt.io_budget_bytes) +
          "): raise memory.budget_bytes, or lower source.shuffle_window or source.cache_bytes");
    }
    return Status::InvalidArgument("execution.io_budget_bytes must be below memory.budget_bytes");
  }
  HR_RETURN_IF_ERROR(CheckBatchFitsBudget(spec, plan, opt.batch_budget_bytes));

  EngineInputs in;
  if (loader->records_ == nullptr) {
    // The records live as long as the manifest; the engine shares ownership.
    loader->records_ = std::make_shared<VectorRecords>(
        std::shared_ptr<const std::vector<SampleRecord>>(loader->manifest_,
                                                         &loader->manifest_->records),
        loader->manifest_bytes_);
  }
  in.records = loader->records_;
  for (auto& records : epoch_records) {
    in.epoch_records.push_back(std::make_shared<VectorRecords>(std::move(records)));
  }
  in.ops = std::move(plan.ops);
  in.fields = std::move(plan.fields);
  in.batch_ops = std::move(plan.batch_ops);
  // A shard's or a row group's values (conversation, text, scalars) come with its media
  // reads, so those sources read even when no op reads a media field.
  in.reads_media = plan.reads_media || row_groups != nullptr || shard_fields != nullptr;
  in.num_values = plan.num_values;
  in.source_values = std::move(plan.source_values);
  in.strings = std::move(plan.strings);
  in.storage = loader->storage_;
  if (row_groups != nullptr) {
    in.prepare_sample = [row_groups](Sample& sample) { return row_groups->Prepare(sample); };
  } else if (!spec.source.materialized.empty()) {
    in.prepare_sample = PrepareMaterializedSample;
  } else if (shard_fields != nullptr) {
    in.prepare_sample = [source = spec.source, shard_fields](Sample& sample) {
      return PrepareShardSample(sample, source, *shard_fields);
    };
  }

  loader->cpu_threads_ = ex.cpu_threads > 0 ? ex.cpu_threads : AvailableCores();
  opt.cpu_threads = loader->cpu_threads_;
  loader->io_inflight_ = ResolveIoInflight(ex, loader->cpu_threads_);
  opt.io_inflight = loader->io_inflight_;
  opt.prefetch_depth = spec.prefetch.depth;
  opt.order.batch_size = spec.batch.size;
  opt.order.drop_last = spec.batch.drop_last;
  opt.order.shuffle = spec.shuffle;
  opt.order.seed = spec.seed;
  opt.order.epochs = spec.epochs;
  opt.order.rank = options.rank;
  opt.order.world_size = options.world_size;
  opt.start_epoch = options.start_epoch;
  opt.start_batch = options.start_batch;
  opt.deliver_empty_batches = options.deliver_empty_batches;
  opt.schedule = options.schedule;
  opt.max_error_rate = spec.errors.max_error_rate;
  opt.min_samples = spec.errors.min_samples;
  opt.max_kept_errors = spec.errors.max_logged;
  opt.scratch_retain_bytes = spec.memory.scratch_bytes_per_thread;
  if (options.allocator != nullptr) opt.allocator = options.allocator;
  opt.trace = options.trace;
  loader->trace_ = options.trace;
  HR_ASSIGN_OR_RETURN(loader->engine_, Engine::Start(std::move(in), opt));
  return loader;
}

Loader::~Loader() = default;

bool Loader::WaitReady(std::chrono::nanoseconds timeout) {
  if (!wait_started_) wait_started_ = Clock::now();
  return engine_->WaitReady(timeout);
}

Result<std::optional<Batch>> Loader::Next() {
  const auto call = wait_started_.value_or(Clock::now());
  wait_started_.reset();
  if (returned_any_) {
    std::lock_guard lock(stats_mu_);
    stats_.busy_s += std::chrono::duration<double>(call - last_return_at_).count();
  }
  auto batch = engine_->Next();
  const auto now = Clock::now();
  if (trace_ != nullptr) {
    if (!returned_any_ && stats_.batches == 0) trace_->NameThread("consumer");
    if (returned_any_) trace_->Span("step", "consumer", last_return_at_, call);
    trace_->Span("wait", "consumer", call, now);
  }
  const double waited = std::chrono::duration<double>(now - call).count();
  // A metrics endpoint or progress line reads stats_ from its own thread.
  std::lock_guard lock(stats_mu_);
  if (!returned_any_) {
    if (batch.ok() && batch->has_value()) {
      returned_any_ = true;
      first_batch_at_ = now;
      stats_.time_to_first_batch_s = std::chrono::duration<double>(now - created_).count();
    }
  } else {
    stats_.wait_s += waited;
    stats_.steady_s = std::chrono::duration<double>(now - first_batch_at_).count();
  }
  last_return_at_ = now;
  stats_.elapsed_s = std::chrono::duration<double>(now - created_).count();
  if (batch.ok() && batch->has_value() && (*batch)->size() > 0) {
    ++stats_.batches;
    stats_.samples += (*batch)->size();
  }
  return batch;
}

ConsumerStats Loader::consumer_stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

}  // namespace headrace
