#include "headrace/exec/engine.h"

#include <algorithm>
#include <atomic>

#include "headrace/core/region_allocator.h"
#include "headrace/io/ranged_reader.h"

namespace headrace {
namespace {

// Validates the options and moves start_batch to count from the start of the run.
Status NormalizeStart(const EpochOrder& order, EngineOptions& options) {
  if (options.start_epoch < 0 ||
      options.start_epoch > EpochOrder::kUnboundedBatches / order.batches_per_rank_epoch()) {
    return Status::InvalidArgument("start epoch " + std::to_string(options.start_epoch) +
                                   " is outside any run");
  }
  const int64_t epoch_start = options.start_epoch * order.batches_per_rank_epoch();
  if (options.start_batch > 0 &&
      epoch_start > EpochOrder::kUnboundedBatches - options.start_batch) {
    return Status::InvalidArgument("start batch " + std::to_string(options.start_batch) +
                                   " of epoch " + std::to_string(options.start_epoch) +
                                   " is outside any run");
  }
  options.start_batch += epoch_start;
  options.start_epoch = 0;
  if (options.start_batch < 0 || options.start_batch > order.total_batches()) {
    return Status::InvalidArgument("start batch " + std::to_string(options.start_batch) +
                                   " is outside the run's " +
                                   std::to_string(order.total_batches()) + " batches");
  }
  return Status::Ok();
}

// Batch memory: the consumer's allocator behind a pool, so that steady-state batches
// reuse the blocks of delivered ones instead of faulting in fresh pages. A few batches'
// worth of freed blocks covers the steady state, where the consumer releases batch k
// about when batch k + depth is admitted. Memory from any other allocator (pinned for
// GPU copies) is costly to allocate and to free (cudaFreeHost synchronizes the device):
// the pool keeps all of it, up to the budget, in geometric classes, so that no
// steady-state batch allocates or frees any. A layout with concatenated fields (ragged
// rows, a list's items) makes batches whose size varies: geometric classes then too, and
// room for the budget, since its fixed part says little of its size (a VLM batch's
// patches are hundreds of MB: with a quarter, most of its tensors were fresh pages).
// The batch tensors' memory, and the rows samples append to concatenated fields until
// their batch is assembled (null when there are none). Both vary in size with ragged
// fields, and plain memory is then kept in regions (core/region_allocator.h: reused
// whole, grown in place as a sample's images come). Measured on bench/vlm_processor.py's
// pipeline (`headrace run`; the numbers are in bench/RESULTS.md):
// - A sample's rows: up to half the batch budget cached (a quarter had them mapped fresh
//   again: 47 against 54 samples/s, no more peak RSS). Rows the size pass sized (a
//   sample's patches, one image's or a list's: ReserveRows, RaggedRows::Reserve) take
//   the smallest region that holds them; rows that grow as they come take the largest
//   (they grow into it: 20% fewer page faults than the smallest that holds their first
//   image). Kept for a packer, rows that took the largest held about twice their bytes
//   (1.93 GB lent in a packed 3-epoch run, 3.7 GB mapped fresh); sized, packing went
//   from 0.92x to 0.99x the unpacked run. Rows kept for a packer (`rows_are_batches`:
//   BatchFormer::keeps_sample_rows, no batch ops) are what the joined batch tensors
//   would be, and live as long: they get the budget (the packed pipeline faulted 1.1 M
//   pages with half, 0.82 M with the budget; peak RSS 2035 -> 2261 MiB).
// - The batch tensors: up to the budget and a half cached. Rows are joined as samples
//   finish (AssembleStage::SampleDone), so a batch tensor is taken when its first sample
//   starts (room for twice the mean batch, its samples' told rows written in it in place:
//   exec/batch_placement.h; taking it at admission instead gave the cached pages to
//   batches admitted ahead, and the ones being written faulted fresh ones: peak RSS
//   1.34 -> 2.2 GB) or at its first sample's end, and grows in place to what it holds
//   plus 1.25x the mean sample still to come (AssembleStage::Join); once joined, the room
//   it did not use goes back
//   (Buffer::Settle), so the cap counts memory that exists. With half the budget 11 of
//   48 batches mapped fresh memory; with three quarters 4, but two regions freed at once
//   still outgrew it now and then: the budget took a 3-epoch run from 1.6 to 0.9 s of
//   system time (peak RSS 1360 -> 1400 MiB). The half above it is what a consumer holds
//   past the budget (delivered batches are no longer charged: the one it works on, the
//   one before it still referenced): when a Loader ends they are all freed at once, and
//   with the budget alone the next Loader of the process found ~100 K pages fewer kept
//   (a pass of 128 VLM samples: 113-116 -> 118-123 samples/s).
// - One pool for both was slower (the samples' small first requests took the batches'
//   large regions).
// - The regions outlive the engine (OnClose::kKeepForNext): the next engine of the
//   process starts on them (a Loader per pass of 128 samples: ~90 -> ~108 samples/s
//   after the first).
// Another allocator (pinned memory) serves the batches in geometric classes; batches of
// fixed fields are one size: a few blocks of it.
std::pair<std::shared_ptr<ReusingAllocator>, std::shared_ptr<ReusingAllocator>> BatchMemory(
    const EngineOptions& options, size_t full_batch, bool varying, bool rows_are_batches) {
  const auto budget = static_cast<size_t>(options.batch_budget_bytes);
  // Regions outlive the engine for the next one of the process (a Loader per epoch).
  constexpr auto kKeep = RegionAllocator::OnClose::kKeepForNext;
  std::shared_ptr<ReusingAllocator> segments =
      varying ? MakeVaryingPool(DefaultAllocator(), rows_are_batches ? budget : budget / 2,
                                RegionAllocator::Fit::kLargest, kKeep)
              : nullptr;
  if (options.allocator != DefaultAllocator()) {
    return {std::make_shared<PoolingAllocator>(options.allocator, budget,
                                               PoolingAllocator::SizeClasses::kGeometric),
            segments};
  }
  if (varying) {
    return {MakeVaryingPool(options.allocator, budget + budget / 2, RegionAllocator::Fit::kBest,
                            kKeep),
            segments};
  }
  return {std::make_shared<PoolingAllocator>(options.allocator,
                                             std::min<size_t>(budget / 2, 4 * full_batch),
                                             PoolingAllocator::SizeClasses::kPages),
          nullptr};
}

}  // namespace

bool RangedItem(const EngineInputs& inputs, const MediaRef& ref) {
  const auto f = static_cast<size_t>(ref.field);
  return f < inputs.ranged_fields.size() && inputs.ranged_fields[f] && ref.offset == 0 &&
         ref.length < 0;
}

bool RangedRecord(const EngineInputs& inputs, const SampleRecord& record) {
  if (inputs.ranged_fields.empty() || record.media.empty()) return false;
  return std::all_of(record.media.begin(), record.media.end(),
                     [&](const MediaRef& ref) { return RangedItem(inputs, ref); });
}

Engine::Engine(std::shared_ptr<const EngineInputs> inputs, EngineOptions options,
               EpochOrder order)
    : inputs_(std::move(inputs)),
      options_(std::move(options)),
      order_(std::move(order)),
      start_time_(Clock::now()) {
  DeliveryOptions delivery;
  delivery.prefetch_depth = options_.prefetch_depth;
  delivery.cpu_threads = options_.cpu_threads;
  delivery.batch_budget_bytes = options_.batch_budget_bytes;
  delivery.start_batch = options_.start_batch;
  delivery.total_batches = order_.total_batches();
  delivery.batches_per_epoch = order_.batches_per_rank_epoch();
  delivery.deliver_empty_batches = options_.deliver_empty_batches;
  delivery.budget = options_.budget;
  delivery.consumer_counts_losses = options_.former != nullptr && options_.former->counts_losses();
  for (const BadShard& bad : inputs_->source->info().bad_shards) {
    delivery.source_errors.push_back(SampleError{0, bad.shard, bad.uri, bad.status});
  }
  delivery.source_errors_batch =
      options_.schedule == Schedule::kSequential ? options_.start_batch : 0;
  const std::vector<std::string>& entries = inputs_->source->info().entries;
  if (!entries.empty()) {
    delivery.entry_of = [source = inputs_->source.get()](int64_t index) {
      return source->EntryOf(index);
    };
    delivery.budget.entries = entries;
    entry_bytes_ = std::make_unique<std::atomic<int64_t>[]>(entries.size());
  }
  delivery_ = Delivery::Make(options_.schedule, delivery, gauge_, stop_);
  const size_t full_batch = AssembleStage::RowBytes(inputs_->fields) *
                            static_cast<size_t>(options_.order.batch_size);
  const bool varying = RaggedRows::Needed(inputs_->fields);
  const bool keep_sample_rows = options_.former != nullptr && options_.former->keeps_sample_rows();
  auto [batches, segments] =
      BatchMemory(options_, full_batch, varying, keep_sample_rows && inputs_->batch_ops.empty());
  assemble_ = std::make_unique<AssembleStage>(inputs_->fields, inputs_->strings,
                                              inputs_->batch_ops, options_.order.seed,
                                              std::move(batches), std::move(segments),
                                              keep_sample_rows);
  read_ = std::make_unique<ReadStage>(
      inputs_->source->storage(),
      ReadStageOptions{options_.io_inflight, options_.io_budget_bytes,
                       static_cast<int>(options_.order.batch_size), options_.trace,
                       // A read bounded by the source's cache (a Parquet row group) may
                       // pass the I/O budget alone (formats/source.h, ReadPolicy).
                       /*fail_past_budget=*/inputs_->source->read_policy() ==
                           ReadPolicy::kHeldToIoBudget,
                       // A blend's entries read through their own storage (caches).
                       inputs_->source->info().entries.empty()
                           ? std::function<Storage*(int64_t)>()
                           : [source = inputs_->source.get()](int64_t index) {
                               return source->StorageFor(index);
                             }},
      gauge_, stop_.get_token(),
      [this](const std::shared_ptr<BatchJob>& job, int slot, Result<std::vector<Buffer>> bytes,
             int64_t charged) {
        if (!bytes.ok()) {
          FinishSample(job, slot, bytes.status());
        } else {
          if (entry_bytes_ != nullptr) {
            int64_t n = 0;
            for (const Buffer& b : *bytes) n += static_cast<int64_t>(b.size());
            const int e = inputs_->source->EntryOf(job->sample_indices[slot]);
            entry_bytes_[static_cast<size_t>(e)].fetch_add(n, std::memory_order_relaxed);
          }
          chain_->Submit(job, slot, *std::move(bytes), charged);
        }
      });
}

Result<std::unique_ptr<Engine>> Engine::Start(std::shared_ptr<const EngineInputs> inputs,
                                              EngineOptions options) {
  if (!inputs || !inputs->source) return Status::InvalidArgument("no source");
  if (inputs->chains.empty()) return Status::InvalidArgument("no chain of ops");
  const Source& source = *inputs->source;
  HR_RETURN_IF_ERROR(source.CheckRun(options.start_epoch, options.order.epochs));
  if (source.size() == 0) return Status::InvalidArgument("the dataset has no samples");
  if (inputs->reads_media && !source.storage()) return Status::InvalidArgument("no storage");
  if (options.cpu_threads < 1) return Status::InvalidArgument("cpu_threads must be >= 1");
  if (options.io_inflight < 1) return Status::InvalidArgument("io_inflight must be >= 1");
  if (options.prefetch_depth < 1) return Status::InvalidArgument("prefetch depth must be >= 1");
  if (options.scratch_retain_bytes < 0) {
    return Status::InvalidArgument("the scratch allowance must be >= 0");
  }
  options.order.num_samples = source.size();
  // A blend: its order shape (a caller may have set it already, with a continuation).
  if (source.order().blend.has_value() && !options.order.blend.has_value()) {
    options.order.blend = source.order().blend;
  }
  HR_ASSIGN_OR_RETURN(EpochOrder order, EpochOrder::Make(options.order));
  HR_RETURN_IF_ERROR(NormalizeStart(order, options));
  std::unique_ptr<Engine> engine(new Engine(std::move(inputs), options, std::move(order)));
  const auto full_batch = static_cast<int64_t>(engine->BatchBytes(options.order.batch_size));
  if (full_batch > options.batch_budget_bytes) {
    return Status::InvalidArgument("one batch needs " + std::to_string(full_batch) +
                                   " bytes but the memory budget for "
                                   "batches is " +
                                   std::to_string(options.batch_budget_bytes) +
                                   " bytes: raise memory.budget_bytes or lower batch.size");
  }
  // What a batch's concatenated rows may take (a sample's alone, and its batch's joined).
  engine->assemble_->set_max_concatenated_bytes(
      static_cast<size_t>(std::max<int64_t>(1, options.batch_budget_bytes - full_batch)));
  Engine* e = engine.get();
  const EngineInputs& in = *e->inputs_;
  e->chain_ = std::make_unique<ChainStage>(
      *in.source, in.chains,
      ChainStageOptions{options.cpu_threads, options.order.seed, options.scratch_retain_bytes,
                        options.trace, options.sizes, options.sizes_token_field},
      e->stop_.get_token(), [e](int64_t charged) { e->read_->Release(charged); },
      [e](const std::shared_ptr<BatchJob>& job, int slot, Status status) {
        e->FinishSample(job, slot, std::move(status));
      });
  // A sample waiting for room for its rows lets the oldest batch's queued sample run.
  e->chain_->set_on_queued([e] { e->delivery_->Queued(); });
  e->delivery_->set_first_queued([e] { return e->chain_->FirstQueuedBatch(); });
  e->driver_ = std::thread([e] { e->DriverLoop(); });
  return engine;
}

Engine::~Engine() {
  Cancel();
  if (driver_.joinable()) driver_.join();
  {
    MutexLock lock(drain_mu_);
    drained_cv_.wait(lock, [this] { return outstanding_.load(std::memory_order_acquire) == 0; });
  }
  chain_.reset();  // joins the CPU pool
}

void Engine::Cancel() { delivery_->Fail(Status::Cancelled("the run was cancelled")); }

void Engine::DriverLoop() {
  while (const std::optional<int64_t> j = delivery_->NextToStart()) {
    if (!StartBatch(*j)) break;
  }
  driver_done_ns_.store(NanosSince(start_time_));
}

bool Engine::StartBatch(int64_t j) {
  auto job = std::make_shared<BatchJob>();
  job->position = order_.Position(j);
  job->sample_indices = order_.SampleIndices(job->position);
  if (options_.former != nullptr) {
    if (std::optional<std::vector<int64_t>> composed =
            options_.former->Compose(job->position, job->sample_indices, stop_.get_token());
        composed.has_value()) {
      job->sample_indices = std::move(*composed);
    }
  }
  const auto n = static_cast<int64_t>(job->sample_indices.size());
  if (options_.former != nullptr) job->told.resize(static_cast<size_t>(n));
  // Concatenated fields are sized as the samples run: admission counts the mean so far,
  // each sample's told rows past it are charged as its size pass tells them (a sample
  // waits for them to fit: rows_gate, Delivery::HoldRows), and the charge becomes the
  // batch's real bytes once it is assembled (Ready). Before a
  // batch was assembled there is no mean: a batch is charged the whole budget, so that
  // it is admitted alone (8 samples of 600 MB of patches each, in prefetch_depth
  // batches admitted at once as batches of no concatenated bytes, took 4.8 GB against
  // 1 GiB). The first batch then overlaps no other; its samples keep the threads busy
  // until its tail.
  job->bytes = static_cast<int64_t>(BatchBytes(n)) + n * assemble_->ConcatenatedBytesPerSample();
  if (!assemble_->KnowsConcatenatedBytes()) {
    job->bytes = std::max(job->bytes, options_.batch_budget_bytes);
  }
  if (!delivery_->Admit(job->position.local_index, job->bytes, n)) return false;
  AddOutstanding(n);
  ResolveRecords(*job);
  if (Status allocated = assemble_->AllocateRows(*job); !allocated.ok()) {
    delivery_->Fail(allocated.WithContext("allocating a batch"));
    AddOutstanding(-n);
    return false;
  }
  // Each sample's told rows held to the budget past the batch's estimate of them.
  job->rows_gate.Start(delivery_.get(), job->position.local_index,
                       job->bytes - static_cast<int64_t>(BatchBytes(n)));
  for (RaggedRows& rows : job->ragged) rows.set_gate(&job->rows_gate);
  for (int s = 0; s < job->size(); ++s) IssueSample(job, s);
  if (n == 0) FinishBatch(*job);  // composed empty (a planned pack left them all out)
  return true;
}

void Engine::ResolveRecords(BatchJob& job) const {
  const RecordStore& store = inputs_->source->records(job.position.epoch);
  const size_t n = job.sample_indices.size();
  job.record_scratch.resize(n);
  job.records.resize(n);
  for (size_t s = 0; s < n; ++s) {
    job.records[s] = &store.Get(job.sample_indices[s], job.record_scratch[s]);
  }
}

void Engine::IssueSample(const std::shared_ptr<BatchJob>& job, int slot) {
  const SampleRecord& record = *job->records[slot];
  if (!record.status.ok()) {
    FinishSample(job, slot, record.status);
    return;
  }
  const bool nothing_to_read = !inputs_->reads_media || record.media.empty();
  const bool ranged = !nothing_to_read && RangedRecord(*inputs_, record);
  BatchFormer::HandedOver handed;
  if (options_.former != nullptr) {
    handed = options_.former->HandOver(job->position.epoch, job->sample_indices[slot],
                                       /*media=*/!nothing_to_read && !ranged);
    job->told[slot] = std::move(handed.told);
  }
  if (nothing_to_read) {
    // Nothing to read (a text-only record: the op that needs a media field says so).
    chain_->Submit(job, slot, {}, 0);
  } else if (ranged) {
    OpenReaders(job, slot);
  } else if (std::optional<std::vector<Buffer>>& media = handed.media;
             media.has_value() && media->size() == record.media.size()) {
    for (const Buffer& b : *media) {
      media_handed_bytes_.fetch_add(static_cast<int64_t>(b.size()), std::memory_order_relaxed);
    }
    chain_->Submit(job, slot, std::move(*media), 0);
  } else {
    read_->Issue(job, slot);
  }
}

// Each item's reader opened on the storage's threads (its size and head, an MP4's index
// at the end: io/ranged_reader.h), then the sample goes to the CPU pool with them: its op
// reads the rest as it runs, and no CPU thread waits for what every sample needs first.
void Engine::OpenReaders(const std::shared_ptr<BatchJob>& job, int slot) {
  const SampleRecord& record = *job->records[slot];
  struct Opening {
    std::vector<std::shared_ptr<MediaReader>> readers;  // each written by its item's open
    std::atomic<size_t> left{0};
    Mutex mu;
    Status status HR_GUARDED_BY(mu);  // the first item's error
  };
  auto opening = std::make_shared<Opening>();
  opening->readers.resize(record.media.size());
  opening->left.store(record.media.size());
  Storage* routed = inputs_->source->StorageFor(job->sample_indices[slot]);
  Storage& storage = routed != nullptr ? *routed : *inputs_->source->storage();
  for (size_t i = 0; i < record.media.size(); ++i) {
    OpenRangedReaderAsync(
        storage, record.media[i].uri, {.stop = stop_.get_token()},
        [this, job, slot, i, opening](Result<std::shared_ptr<MediaReader>> reader) {
          if (reader.ok()) {
            opening->readers[i] = *std::move(reader);
          } else {
            MutexLock lock(opening->mu);
            if (opening->status.ok()) opening->status = reader.status();
          }
          if (opening->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
          Status status;
          {
            MutexLock lock(opening->mu);
            status = opening->status;
          }
          if (!status.ok()) return FinishSample(job, slot, std::move(status));
          const size_t items = opening->readers.size();  // before the move below
          chain_->Submit(job, slot, std::vector<Buffer>(items), 0, std::move(opening->readers));
        });
  }
}

void Engine::FinishSample(const std::shared_ptr<BatchJob>& job, int slot, Status status) {
  job->status[slot] = std::move(status);
  // acq_rel: the last finisher sees every row the other threads wrote; with rows joined
  // as samples finish, the thread that joins the last (the join's mutex orders them).
  if (assemble_->joins() ? assemble_->SampleDone(*job, slot)
                         : job->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    FinishBatch(*job);
  }
  AddOutstanding(-1);
}

void Engine::FinishBatch(BatchJob& job) {
  bool cancelled = false;
  const int64_t admitted = job.bytes + job.rows_gate.charged();
  Batch batch = assemble_->Finish(job, cancelled);
  // A cancelled batch: the run is stopping; nobody will consume it.
  if (!cancelled) {
    delivery_->Ready(job.position.local_index, std::move(batch), admitted, job.bytes);
  } else {
    delivery_->Dropped(job.position.local_index, job.bytes - admitted);
  }
}

void Engine::AddOutstanding(int64_t delta) {
  // Every sample finishes here, on the pool's threads: a change that leaves samples
  // outstanding takes no lock. Only the driver adds, and it has stopped before the
  // destructor waits, so the count cannot leave zero while the destructor looks.
  int64_t seen = outstanding_.load(std::memory_order_relaxed);
  while (seen + delta != 0) {
    if (outstanding_.compare_exchange_weak(seen, seen + delta, std::memory_order_acq_rel,
                                           std::memory_order_relaxed)) {
      return;
    }
  }
  MutexLock lock(drain_mu_);
  if (outstanding_.fetch_add(delta, std::memory_order_acq_rel) + delta == 0) {
    drained_cv_.notify_all();
  }
}

EngineMetrics Engine::Metrics() const {
  EngineMetrics m;
  m.elapsed_s = SecondsSince(start_time_);
  const DeliveryMetrics d = delivery_->Metrics();
  m.samples_attempted = d.samples_attempted;
  m.samples_delivered = d.counts.delivered;
  m.samples_failed = d.counts.failed;
  m.neighbour_distance =
      d.neighbour_pairs > 0 ? d.neighbour_distance_sum / static_cast<double>(d.neighbour_pairs) : 0;
  for (size_t e = 0; e < d.entries.size(); ++e) {
    m.entries.push_back(EngineMetrics::Entry{
        d.entries[e].name, d.entries[e].counts.delivered, d.entries[e].counts.failed,
        entry_bytes_ != nullptr ? entry_bytes_[e].load(std::memory_order_relaxed) : 0});
  }
  m.batches_delivered = d.batches_delivered;
  m.ranged_reads = chain_->ranged_reads();
  m.stale_entries = chain_->stale_entries();
  m.bytes_read = read_->bytes_read() + media_handed_bytes_.load(std::memory_order_relaxed) +
                 m.ranged_reads.bytes;
  m.bytes_copied = assemble_->bytes_copied();
  m.budget_peak_bytes = gauge_.peak();
  m.budget_used_bytes = gauge_.used();
  m.batches_ready = d.batches_ready;
  m.reads_inflight = read_->reads_inflight();
  m.read_latency = read_->latency();
  m.next_wait = d.next_wait;
  m.io_budget_bytes = options_.io_budget_bytes;
  m.batch_budget_bytes = options_.batch_budget_bytes;
  // A full batch's fixed rows and, with concatenated fields, their mean so far.
  m.full_batch_bytes = static_cast<int64_t>(BatchBytes(options_.order.batch_size)) +
                       options_.order.batch_size * assemble_->ConcatenatedBytesPerSample();
  m.batch_memory_reused = assemble_->memory_reused();
  m.batch_memory_fresh = assemble_->memory_fresh();
  m.rows_waits = d.rows_waits;
  m.rows_wait_s = d.rows_wait_s;
  m.rows_waiting = d.rows_waiting;
  const ScratchMetrics scratch = chain_->Scratch();
  m.scratch_bytes = scratch.bytes;
  m.scratch_peak_bytes = scratch.peak_bytes;
  m.scratch_sample_peak_bytes = scratch.sample_peak_bytes;
  m.scratch_retain_bytes = options_.scratch_retain_bytes;
  m.errors_by_kind = d.errors_by_kind;
  m.first_errors = d.first_errors;

  // Idle time of a stage is "blocked" while admission waits for the consumer (nothing
  // new may start because the prefetch queue or the budget is full) and "starved"
  // otherwise. The split is an estimate: admission waits and idle periods are measured
  // apart, so the blocked share is capped by the stage's idle time.
  if (inputs_->reads_media) m.stages.push_back(read_->Metrics(m.elapsed_s, d.admit_blocked_s));
  m.stages.push_back(chain_->Metrics(m.elapsed_s, d.admit_blocked_s));
  // The batch stage's window ends when the driver has admitted the run's last batch.
  const int64_t done_ns = driver_done_ns_.load();
  const double window = done_ns >= 0 ? std::min(m.elapsed_s, done_ns * 1e-9) : m.elapsed_s;
  StageMetrics batch = StageMetrics::Of(StageKind::kAssemble, options_.prefetch_depth);
  batch.items = d.batches_delivered;
  batch.busy_s = assemble_->busy_s();
  batch.blocked_s = d.admit_blocked_s;
  batch.starved_s = std::max(0.0, window - batch.busy_s - batch.blocked_s);
  batch.queue_fill = d.queue_fill;
  m.stages.push_back(batch);
  m.ops = chain_->OpsMetrics();
  for (OpMetrics& op : assemble_->OpsMetrics(chain_->samples_run())) m.ops.push_back(std::move(op));
  return m;
}

}  // namespace headrace
