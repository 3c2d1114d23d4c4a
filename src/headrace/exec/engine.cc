#include "headrace/exec/engine.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace headrace {
namespace {

// Scratch images of the sample currently running on this thread; reused, so a
// steady-state sample allocates nothing. Counted in the engine's scratch_usage_: pool
// threads belong to one engine and exit before it is destroyed.
thread_local ScratchArena tls_scratch;
// The named values of the sample running on this thread (SampleContext::values):
// sized once per engine, so a steady-state sample allocates nothing.
thread_local std::vector<Value> tls_values;
// Whether this thread has named its row of the trace.
thread_local bool tls_trace_named = false;

// target = max(target, value), for peaks updated by many threads.
void StoreMax(std::atomic<int64_t>& target, int64_t value) {
  int64_t seen = target.load(std::memory_order_relaxed);
  while (seen < value && !target.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

// One batch in production. Rows are written by many threads, each its own row; the
// job is complete when `pending` reaches zero.
struct Engine::BatchJob {
  BatchPosition position;
  std::vector<int64_t> sample_indices;
  std::vector<Tensor> tensors;               // one per field, then "index"
  std::vector<std::vector<uint8_t*>> slots;  // per sample: the row pointer per field
  std::vector<Status> status;                // per sample
  // Per sample: the text values its source parsed at run time (Sample::attributes, when
  // they are not the record's), for FinishBatch's strings; nullopt: the record's. Each
  // written by its sample's thread.
  std::vector<std::optional<std::vector<Attribute>>> parsed_attributes;
  // Per sample: its record, looked up once when the batch starts (ResolveRecords); a
  // store that builds records on request fills `record_scratch` (sized once: `records`
  // may point into it).
  std::vector<const SampleRecord*> records;
  std::vector<SampleRecord> record_scratch;
  std::atomic<int> pending{0};
  int64_t bytes = 0;
};

Engine::Engine(std::shared_ptr<const EngineInputs> inputs, EngineOptions options,
               EpochOrder order)
    : inputs_holder_(std::move(inputs)),
      inputs_(*inputs_holder_),
      options_(std::move(options)),
      order_(std::move(order)),
      start_time_(Clock::now()),
      op_ns_(inputs_.ops.size()),
      op_gil_wait_ns_(inputs_.ops.size()),
      op_takes_gil_(inputs_.ops.size()),
      batch_op_ns_(inputs_.batch_ops.size()),
      op_latency_(std::make_unique<LatencyHistogram[]>(inputs_.ops.size() +
                                                       inputs_.batch_ops.size())),
      chain_(inputs_.ops, inputs_.source_values, inputs_.num_values, options_.order.seed) {
  next_ = options_.start_batch;
}

Result<std::unique_ptr<Engine>> Engine::Start(std::shared_ptr<const EngineInputs> inputs,
                                             EngineOptions options) {
  if (!inputs || !inputs->source) return Status::InvalidArgument("no source");
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
  HR_ASSIGN_OR_RETURN(EpochOrder order, EpochOrder::Make(options.order));
  if (options.start_epoch < 0 ||
      options.start_epoch > EpochOrder::kUnboundedBatches / order.batches_per_rank_epoch()) {
    return Status::InvalidArgument("start epoch " + std::to_string(options.start_epoch) +
                                   " is outside any run");
  }
  // From here on, start_batch counts from the start of the run.
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
  std::unique_ptr<Engine> engine(new Engine(std::move(inputs), options, std::move(order)));
  const auto full_batch = static_cast<int64_t>(engine->BatchBytes(options.order.batch_size));
  if (full_batch > options.batch_budget_bytes) {
    return Status::InvalidArgument("one batch needs " + std::to_string(full_batch) +
                                   " bytes but the memory budget for "
                                   "batches is " +
                                   std::to_string(options.batch_budget_bytes) +
                                   " bytes: raise memory.budget_bytes or lower batch.size");
  }
  // A few batches' worth of freed blocks covers the steady state, where the consumer
  // releases batch k about when batch k + depth is admitted. Memory from any other
  // allocator (pinned for GPU copies) is costly to allocate and to free (cudaFreeHost
  // synchronizes the device): the pool keeps all of it, up to the budget, in geometric
  // classes, so that no steady-state batch allocates or frees any.
  const bool costly = options.allocator != DefaultAllocator();
  engine->batch_memory_ = std::make_shared<PoolingAllocator>(
      options.allocator,
      costly ? static_cast<size_t>(options.batch_budget_bytes)
             : std::min<size_t>(options.batch_budget_bytes / 2,
                                4 * static_cast<size_t>(full_batch)),
      costly ? PoolingAllocator::SizeClasses::kGeometric
             : PoolingAllocator::SizeClasses::kPages);
  engine->pool_ = std::make_unique<ThreadPool>(options.cpu_threads);
  engine->driver_ = std::thread([e = engine.get()] { e->DriverLoop(); });
  return engine;
}

Engine::~Engine() {
  Cancel();
  if (driver_.joinable()) driver_.join();
  {
    // Every read callback and task refers to this engine: wait until all have run.
    std::unique_lock lock(mu_);
    drained_cv_.wait(lock, [this] { return outstanding_ == 0; });
  }
  pool_.reset();
}

void Engine::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  if (!stop_) {
    stop_ = true;
    if (failure_.ok()) failure_ = Status::Cancelled("the run was cancelled");
  }
  driver_cv_.notify_all();
  consumer_cv_.notify_all();
}

int64_t Engine::TraceId(const BatchJob& job, int slot) const {
  return job.position.local_index * options_.order.batch_size + slot;
}

size_t Engine::BatchBytes(int64_t samples) const {
  size_t per_sample = sizeof(int64_t);  // the "index" field
  for (const FieldSpec& f : inputs_.fields) per_sample += f.sample_bytes();
  return per_sample * static_cast<size_t>(samples);
}

void Engine::DriverLoop() {
  if (options_.schedule == Schedule::kSequential) {
    const int64_t total = order_.total_batches();
    for (int64_t j = options_.start_batch; j < total; ++j) {
      if (!StartBatch(j)) break;
    }
  } else {
    while (true) {
      int64_t j = 0;
      {
        std::unique_lock lock(mu_);
        driver_cv_.wait(lock, [this] { return stop_ || !submitted_.empty(); });
        if (stop_) break;
        j = submitted_.front();
        submitted_.pop_front();
      }
      if (!StartBatch(j)) break;
    }
  }
  std::lock_guard lock(mu_);
  driver_done_ = true;
  driver_done_s_ = SecondsSince(start_time_);
  consumer_cv_.notify_all();
}

bool Engine::StartBatch(int64_t j) {
  auto job = std::make_shared<BatchJob>();
  job->position = order_.Position(j);
  job->sample_indices = order_.SampleIndices(job->position);
  job->bytes = static_cast<int64_t>(BatchBytes(job->sample_indices.size()));
  if (!Admit(*job)) return false;
  ResolveRecords(*job);
  if (Status allocated = AllocateRows(*job); !allocated.ok()) {
    std::lock_guard lock(mu_);
    if (failure_.ok()) failure_ = allocated.WithContext("allocating a batch");
    stop_ = true;
    cancelled_.store(true, std::memory_order_relaxed);
    outstanding_ -= static_cast<int64_t>(job->sample_indices.size());
    consumer_cv_.notify_all();
    drained_cv_.notify_all();
    return false;
  }
  for (size_t s = 0; s < job->sample_indices.size(); ++s) IssueSample(job, static_cast<int>(s));
  return true;
}

bool Engine::Admit(const BatchJob& job) {
  std::unique_lock lock(mu_);
  const auto wait_start = Clock::now();
  const int64_t consumer_wait_before = ConsumerWaitNanosLocked();
  driver_cv_.wait(lock, [&] {
    return stop_ ||
           (admitted_ahead_ < options_.prefetch_depth &&
            (batch_bytes_ + job.bytes <= options_.batch_budget_bytes || admitted_ahead_ == 0));
  });
  // The wait is the consumer's doing only while the consumer was not itself waiting
  // for a batch; the rest of it is waiting for batches in production.
  admit_blocked_ns_ += std::max<int64_t>(
      0, NanosSince(wait_start) - (ConsumerWaitNanosLocked() - consumer_wait_before));
  if (stop_) return false;
  const auto n = static_cast<int64_t>(job.sample_indices.size());
  ++admitted_ahead_;
  batch_bytes_ += job.bytes;
  budget_peak_ = std::max(budget_peak_, batch_bytes_ + undecoded_bytes_);
  outstanding_ += n;
  samples_attempted_ += n;
  return true;
}

Status Engine::AllocateRows(BatchJob& job) {
  const auto n = static_cast<int64_t>(job.sample_indices.size());
  for (const FieldSpec& f : inputs_.fields) {
    std::vector<int64_t> shape{n};
    shape.insert(shape.end(), f.sample_shape.begin(), f.sample_shape.end());
    HR_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(f.dtype, std::move(shape), batch_memory_));
    job.tensors.push_back(std::move(tensor));
  }
  HR_ASSIGN_OR_RETURN(Tensor index, Tensor::Allocate(DType::kI64, {n}, batch_memory_));
  job.tensors.push_back(std::move(index));
  job.slots.resize(n);
  job.status.resize(n);
  if (!inputs_.strings.empty()) job.parsed_attributes.resize(n);
  job.pending.store(static_cast<int>(n));
  int64_t* index_row = job.tensors.back().mutable_data<int64_t>();
  for (int64_t s = 0; s < n; ++s) {
    index_row[s] = job.sample_indices[s];
    auto& row = job.slots[s];
    row.resize(inputs_.fields.size());
    for (size_t f = 0; f < inputs_.fields.size(); ++f) {
      row[f] = job.tensors[f].mutable_data<uint8_t>() + s * inputs_.fields[f].sample_bytes();
    }
  }
  return Status::Ok();
}

void Engine::IssueSample(const std::shared_ptr<BatchJob>& job, int slot) {
  const SampleRecord& record = *job->records[slot];
  if (!record.status.ok()) {
    FinishSample(job, slot, record.status);
    return;
  }
  if (!inputs_.reads_media || record.media.empty()) {
    // Nothing to read (a text-only record: the op that needs a media field says so).
    if (!pool_->Submit([this, job, slot] { RunChain(job, slot, {}, 0); })) {
      FinishSample(job, slot, Status::Cancelled("the run was cancelled"));
    }
    return;
  }
  auto charge = std::make_shared<ReadCharge>();
  charge->sample = std::make_shared<SampleReads>();
  charge->sample->bytes.resize(record.media.size());
  {  // Read capacity: requests in flight, and the I/O budget's charge.
    std::unique_lock lock(mu_);
    const auto wait_start = Clock::now();
    bool waited_on_budget = false;
    driver_cv_.wait(lock, [&] {
      if (stop_) return true;
      if (reads_inflight_ >= options_.io_inflight) return false;
      // Parked reads go first; a first read of unknown size goes alone.
      if (!parked_.empty() || (read_estimate_ < 0 && reads_inflight_ > 0) ||
          !ReadFitsLocked(std::max<int64_t>(read_estimate_, 0))) {
        waited_on_budget = true;
        return false;
      }
      return true;
    });
    if (waited_on_budget) read_blocked_ns_ += NanosSince(wait_start);
    if (stop_) {
      lock.unlock();
      FinishSample(job, slot, Status::Cancelled("the run was cancelled"));
      return;
    }
    ChargeReadLocked(*charge, std::max<int64_t>(read_estimate_, 0));
  }
  StartRead(job, slot, std::move(charge));
}

bool Engine::ReadFitsLocked(int64_t bytes) const {
  return reads_inflight_ < options_.io_inflight &&
         (undecoded_bytes_ + bytes <= options_.io_budget_bytes ||
          (undecoded_bytes_ == 0 && reads_inflight_ == 0));
}

void Engine::ChargeReadLocked(ReadCharge& charge, int64_t bytes) {
  charge.bytes = bytes;
  charge.refused = -1;
  charge.sized = false;
  undecoded_bytes_ += bytes;
  charge.sample->charged += bytes;
  budget_peak_ = std::max(budget_peak_, batch_bytes_ + undecoded_bytes_);
  if (reads_inflight_++ == 0) reads_busy_since_ = Clock::now();
}

void Engine::StartRead(const std::shared_ptr<BatchJob>& job, int slot,
                       std::shared_ptr<ReadCharge> charge) {
  if (options_.trace != nullptr)
    options_.trace->AsyncBegin("read", TraceId(*job, slot), Clock::now());
  const MediaRef& ref = job->records[slot]->media[charge->item];
  charge->issued = Clock::now();
  ReadGate gate = [this, charge](int64_t size) { return OnReadSize(*charge, size); };
  ReadCallback done = [this, job, slot, charge](Result<Buffer> bytes) {
    OnRead(job, slot, charge, std::move(bytes));
  };
  if (ref.offset == 0 && ref.length < 0) {
    inputs_.source->storage()->ReadAsyncGated(ref.uri, std::move(done), std::move(gate));
  } else {
    inputs_.source->storage()->ReadRangeAsyncGated(ref.uri, ref.offset, ref.length,
                                                   std::move(done), std::move(gate));
  }
}

void Engine::NoteReadSizeLocked(int64_t size) {
  read_estimate_ = std::max(size, read_estimate_ - read_estimate_ / 16);
}

bool Engine::OnReadSize(ReadCharge& charge, int64_t size) {
  // Asked by the storage while a read waits: a cancelled run wants none of its reads.
  if (size == kReadStillWanted) return !cancelled_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  NoteReadSizeLocked(size);
  charge.sized = true;
  SampleReads& sample = *charge.sample;
  const int64_t others = undecoded_bytes_ - charge.bytes;
  // A later item of a sample is never refused: the sample holds its earlier items.
  const bool first = sample.charged == charge.bytes;
  if (first && others > 0 && others + size > options_.io_budget_bytes) {
    charge.refused = size;
    return false;
  }
  undecoded_bytes_ = others + size;
  sample.charged += size - charge.bytes;
  charge.bytes = size;
  budget_peak_ = std::max(budget_peak_, batch_bytes_ + undecoded_bytes_);
  driver_cv_.notify_all();  // a reservation larger than the object frees budget
  return true;
}

std::vector<Engine::ParkedRead> Engine::TakeParkedLocked() {
  std::vector<ParkedRead> out;
  while (!parked_.empty() && (stop_ || ReadFitsLocked(parked_.front().charge->refused))) {
    if (!stop_) ChargeReadLocked(*parked_.front().charge, parked_.front().charge->refused);
    out.push_back(std::move(parked_.front()));
    parked_.pop_front();
  }
  return out;
}

void Engine::RestartParked(std::vector<ParkedRead> reads) {
  for (ParkedRead& read : reads) {
    if (read.charge->refused >= 0) {
      // The run stopped while it was parked; a parked read is a sample's first, so the
      // sample holds nothing.
      FinishSample(read.job, read.slot, Status::Cancelled("the run was cancelled"));
    } else {
      StartRead(read.job, read.slot, std::move(read.charge));
    }
  }
}

void Engine::ReleaseReadBytes(int64_t bytes) {
  std::vector<ParkedRead> restart;
  {
    std::lock_guard lock(mu_);
    undecoded_bytes_ -= bytes;
    restart = TakeParkedLocked();
    driver_cv_.notify_all();
  }
  RestartParked(std::move(restart));
}

void Engine::OnRead(const std::shared_ptr<BatchJob>& job, int slot,
                    const std::shared_ptr<ReadCharge>& charge, Result<Buffer> bytes) {
  if (options_.trace != nullptr)
    options_.trace->AsyncEnd("read", TraceId(*job, slot), Clock::now());
  SampleReads& sample = *charge->sample;
  const bool refused = charge->refused >= 0;  // its gate ran on this thread, before
  const int items = static_cast<int>(sample.bytes.size());
  const bool more = bytes.ok() && charge->item + 1 < items;
  std::shared_ptr<ReadCharge> next;  // the sample's next item, already charged
  std::vector<ParkedRead> restart;
  Status failed;
  int64_t release = 0;  // the sample's charge, once it failed
  {
    std::lock_guard lock(mu_);
    if (--reads_inflight_ == 0) read_busy_ns_ += NanosSince(reads_busy_since_);
    if (!refused) read_latency_.Record(NanosSince(charge->issued));
    if (refused) {
      // Nothing was allocated: wait until the object's size fits (or nothing else is
      // charged), then read it again.
      undecoded_bytes_ -= charge->bytes;
      sample.charged -= charge->bytes;
      charge->bytes = 0;
      parked_.push_back(ParkedRead{job, slot, charge});
    } else {
      ++reads_done_;
      if (bytes.ok()) {
        // The charge becomes the buffer's size (it differs when the storage ignored the
        // gate, or the object changed between its size and its bytes).
        const auto size = static_cast<int64_t>(bytes->size());
        bytes_read_ += size;
        undecoded_bytes_ += size - charge->bytes;
        sample.charged += size - charge->bytes;
        charge->bytes = size;
        if (!charge->sized) NoteReadSizeLocked(size);
        read_fill_sum_ += std::min(1.0, static_cast<double>(undecoded_bytes_) /
                                            static_cast<double>(options_.io_budget_bytes));
        budget_peak_ = std::max(budget_peak_, batch_bytes_ + undecoded_bytes_);
        sample.bytes[charge->item] = *std::move(bytes);
      } else {
        failed = bytes.status();
      }
      if (more && stop_) failed = Status::Cancelled("the run was cancelled");
      if (!failed.ok()) {
        release = sample.charged;  // this item's reservation and the items before it
        sample.charged = 0;
        undecoded_bytes_ -= release;
      } else if (more) {
        next = std::make_shared<ReadCharge>();
        next->sample = charge->sample;
        next->item = charge->item + 1;
        ChargeReadLocked(*next, std::max<int64_t>(read_estimate_, 0));
      }
    }
    restart = TakeParkedLocked();
    driver_cv_.notify_all();
  }
  RestartParked(std::move(restart));
  if (refused) return;
  if (!failed.ok()) {
    sample.bytes.clear();
    FinishSample(job, slot, std::move(failed));
    return;
  }
  if (next != nullptr) {
    StartRead(job, slot, std::move(next));
    return;
  }
  const int64_t charged = sample.charged;
  std::vector<Buffer> media = std::move(sample.bytes);
  const bool submitted =
      pool_->Submit([this, job, slot, media = std::move(media), charged]() mutable {
        RunChain(job, slot, std::move(media), charged);
      });
  if (!submitted) {
    ReleaseReadBytes(charged);
    FinishSample(job, slot, Status::Cancelled("the run was cancelled"));
  }
}

void Engine::RunChain(const std::shared_ptr<BatchJob>& job, int slot, std::vector<Buffer> media,
                      int64_t charged) {
  Status status;
  bool stopped;
  {
    std::lock_guard lock(mu_);
    stopped = stop_;
  }
  if (stopped) {
    status = Status::Cancelled("the run was cancelled");
  } else {
    const int64_t index = job->sample_indices[slot];
    Sample sample;
    sample.epoch = job->position.epoch;
    sample.index = index;
    sample.record = job->records[slot];
    status = inputs_.source->Fill(std::move(media), sample);
    if (options_.trace != nullptr && !tls_trace_named) {
      tls_trace_named = true;
      options_.trace->NameThread("cpu worker");
    }
    tls_scratch.Account(&scratch_usage_);
    if (status.ok()) {
      status = chain_.Run(sample, job->slots[slot].data(), tls_scratch, tls_values,
                          [&](size_t i, Clock::time_point start, Clock::time_point end,
                              const SampleContext& ctx) { CountOp(i, start, end, ctx, index); });
    }
    if (status.ok() && !job->parsed_attributes.empty() &&
        sample.attributes.data() != sample.record->attributes.data()) {
      job->parsed_attributes[slot].emplace(sample.attributes.begin(), sample.attributes.end());
    }
    samples_run_.fetch_add(1, std::memory_order_relaxed);
    SettleScratch();
    // The encoded bytes die here (the last handle), before the budget is released.
  }
  media.clear();
  if (charged > 0) ReleaseReadBytes(charged);
  FinishSample(job, slot, std::move(status));
}

void Engine::CountOp(size_t i, Clock::time_point start, Clock::time_point end,
                     const SampleContext& ctx, int64_t index) {
  const int64_t op_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
  op_ns_[i].fetch_add(op_ns, std::memory_order_relaxed);
  op_latency_[i].Record(op_ns);
  if (ctx.gil_wait_ns >= 0) {
    op_gil_wait_ns_[i].fetch_add(ctx.gil_wait_ns, std::memory_order_relaxed);
    op_takes_gil_[i].store(true, std::memory_order_relaxed);
  }
  if (options_.trace != nullptr) {
    // Op names are string_views into the ops' static names: stable for the run.
    options_.trace->Span(inputs_.ops[i]->name().data(), "cpu", start, end, index);
  }
}

void Engine::ResolveRecords(BatchJob& job) const {
  const RecordStore& store = inputs_.source->records(job.position.epoch);
  const size_t n = job.sample_indices.size();
  job.record_scratch.resize(n);
  job.records.resize(n);
  for (size_t s = 0; s < n; ++s) {
    job.records[s] = &store.Get(job.sample_indices[s], job.record_scratch[s]);
  }
}

void Engine::SettleScratch() {
  StoreMax(scratch_sample_peak_, static_cast<int64_t>(tls_scratch.capacity()));
  tls_scratch.Trim(static_cast<size_t>(options_.scratch_retain_bytes));
}

void Engine::FinishSample(const std::shared_ptr<BatchJob>& job, int slot, Status status) {
  job->status[slot] = std::move(status);
  // acq_rel: the last finisher sees every row the other threads wrote.
  if (job->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) FinishBatch(*job);
  std::lock_guard lock(mu_);
  if (--outstanding_ == 0) drained_cv_.notify_all();
}

void Engine::FinishBatch(BatchJob& job) {
  const auto start = Clock::now();
  const auto n = static_cast<int64_t>(job.sample_indices.size());
  Batch batch;
  batch.global_index = job.position.local_index;
  batch.epoch = job.position.epoch;
  batch.index_in_epoch = job.position.index_in_epoch;

  // Compact the rows of the samples that succeeded to the front, in order. This is the
  // only copy of sample bytes in the engine, and it happens only for failed samples.
  int64_t kept = 0;
  int64_t copied = 0;
  for (int64_t s = 0; s < n; ++s) {
    const Status& st = job.status[s];
    if (!st.ok()) {
      if (st.code() != StatusCode::kCancelled) {
        batch.errors.push_back(
            SampleError{job.position.epoch, job.sample_indices[s], job.records[s]->uri(), st});
      }
      continue;
    }
    if (kept != s) {
      for (size_t f = 0; f < job.tensors.size(); ++f) {
        const size_t row =
            f < inputs_.fields.size() ? inputs_.fields[f].sample_bytes() : sizeof(int64_t);
        uint8_t* base = job.tensors[f].mutable_data<uint8_t>();
        std::memmove(base + kept * row, base + s * row, row);
        copied += static_cast<int64_t>(row);
      }
    }
    ++kept;
  }
  for (size_t f = 0; f < job.tensors.size(); ++f) {
    const Tensor& t = job.tensors[f];
    std::vector<int64_t> shape = t.shape();
    shape[0] = kept;
    const size_t row =
        f < inputs_.fields.size() ? inputs_.fields[f].sample_bytes() : sizeof(int64_t);
    const std::string& name = f < inputs_.fields.size() ? inputs_.fields[f].name : "index";
    batch.fields.emplace_back(name,
                              Tensor(t.dtype(), std::move(shape), t.buffer().Slice(0, row * kept)));
  }
  job.tensors.clear();
  for (const EngineInputs::StringField& f : inputs_.strings) {
    Batch::Strings& column = batch.strings.emplace_back();
    column.name = f.name;
    column.list = f.list;
    column.rows.reserve(static_cast<size_t>(kept));
    for (int64_t s = 0; s < n; ++s) {
      if (!job.status[s].ok()) continue;
      const SampleRecord& record = *job.records[s];
      std::vector<std::string>& row = column.rows.emplace_back();
      if (f.field < 0) {
        row.push_back(record.id);
        continue;
      }
      const auto& parsed = job.parsed_attributes[s];
      for (const Attribute& a : parsed ? *parsed : record.attributes) {
        if (a.field != f.field) continue;
        if (const auto* text = std::get_if<std::string>(&a.value)) row.push_back(*text);
      }
    }
  }
  if (kept > 0) RunBatchOps(job, batch);
  const bool cancelled = std::any_of(job.status.begin(), job.status.end(), [](const Status& s) {
    return s.code() == StatusCode::kCancelled;
  });

  std::lock_guard lock(mu_);
  assemble_ns_ += NanosSince(start);
  bytes_copied_ += copied;
  if (cancelled) return;  // the run is stopping; nobody will consume this batch
  ready_.emplace(job.position.local_index, ReadyBatch{std::move(batch), job.bytes});
  consumer_cv_.notify_all();
}

void Engine::RunBatchOps(const BatchJob& job, Batch& batch) {
  for (size_t i = 0; i < inputs_.batch_ops.size(); ++i) {
    const BatchOp& op = *inputs_.batch_ops[i];
    const auto start = Clock::now();
    Status status = op.Run(batch, BatchSeed(options_.order.seed, batch.epoch,
                                            batch.index_in_epoch, i));
    const int64_t op_ns = NanosSince(start);
    batch_op_ns_[i].fetch_add(op_ns, std::memory_order_relaxed);
    op_latency_[inputs_.ops.size() + i].Record(op_ns);
    if (status.ok()) continue;
    // The batch is dropped: each of its samples is an error with the op's status.
    status = status.WithContext(std::string(op.name()) + " on batch " +
                                std::to_string(batch.index_in_epoch) + " of epoch " +
                                std::to_string(batch.epoch));
    // The batch's rows are the job's samples that succeeded, in slot order.
    for (size_t s = 0; s < job.sample_indices.size(); ++s) {
      if (!job.status[s].ok()) continue;
      batch.errors.push_back(SampleError{job.position.epoch, job.sample_indices[s],
                                         job.records[s]->uri(), status});
    }
    for (auto& [name, tensor] : batch.fields) {
      std::vector<int64_t> shape = tensor.shape();
      shape[0] = 0;
      tensor = Tensor(tensor.dtype(), std::move(shape), tensor.buffer().Slice(0, 0));
    }
    for (Batch::Strings& column : batch.strings) column.rows.clear();
    return;
  }
}

Status Engine::CheckErrorBudgetLocked(bool at_end) const {
  const int64_t attempted = samples_delivered_ + samples_failed_;
  if (samples_failed_ == 0 || attempted == 0) return Status::Ok();
  if (!at_end && attempted < options_.min_samples) return Status::Ok();
  const double rate = static_cast<double>(samples_failed_) / static_cast<double>(attempted);
  if (rate <= options_.max_error_rate) return Status::Ok();
  const auto percent = [](double v, int digits) {
    char text[32];
    std::snprintf(text, sizeof text, "%.*g%%", digits, v * 100);
    return std::string(text);
  };
  int digits = 3;  // more only where 3 would print the rate equal to the limit it exceeds
  while (digits < 17 && percent(rate, digits) == percent(options_.max_error_rate, digits)) ++digits;
  std::string message = "too many bad samples: " + std::to_string(samples_failed_) + " of " +
                        std::to_string(attempted) + " samples failed (" + percent(rate, digits) +
                        "), above errors.max_error_rate " +
                        percent(options_.max_error_rate, digits) + "; by kind:";
  for (const auto& [kind, count] : errors_by_kind_) {
    message += " " + kind + "=" + std::to_string(count);
  }
  if (!first_errors_.empty()) message += "; first: " + first_errors_.front().ToString();
  return Status::ResourceExhausted(std::move(message));
}

bool Engine::ReadyLocked() const {
  return !failure_.ok() || next_ >= order_.total_batches() || ready_.count(next_) > 0;
}

bool Engine::WaitReady(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(mu_);
  if (ReadyLocked()) return true;
  consumer_waiting_ = true;
  consumer_waiting_since_ = Clock::now();
  const bool ready = consumer_cv_.wait_for(lock, timeout, [&] { return ReadyLocked(); });
  consumer_waiting_ = false;
  consumer_wait_ns_ += NanosSince(consumer_waiting_since_);
  return ready;
}

Result<std::optional<Batch>> Engine::Next() {
  if (options_.schedule != Schedule::kSequential) {
    return Status::InvalidArgument("Next() on an on-demand engine: use Submit() and Take()");
  }
  std::unique_lock lock(mu_);
  ++next_calls_;
  batch_fill_sum_ += static_cast<double>(ready_.size()) / options_.prefetch_depth;
  while (true) {
    const int64_t total = order_.total_batches();
    consumer_waiting_ = true;
    consumer_waiting_since_ = Clock::now();
    consumer_cv_.wait(lock, [&] { return ReadyLocked(); });
    consumer_waiting_ = false;
    const int64_t waited = NanosSince(consumer_waiting_since_);
    consumer_wait_ns_ += waited;
    next_wait_.Record(waited);
    if (!failure_.ok()) return failure_;
    if (next_ >= total) {
      Status budget = CheckErrorBudgetLocked(/*at_end=*/true);
      if (!budget.ok()) {
        failure_ = budget;
        return failure_;
      }
      return std::optional<Batch>();
    }
    auto it = ready_.find(next_);
    Batch batch = std::move(it->second.batch);
    batch_bytes_ -= it->second.bytes;
    ready_.erase(it);
    ++next_;
    --admitted_ahead_;
    driver_cv_.notify_all();
    // Errors are counted here, in batch order, so that whether and where the error
    // budget stops a run does not depend on which thread finished first.
    CountDeliveredLocked(batch);
    // An epoch's end is a verdict point too: a run without an end (or a long one) must
    // not go on for epochs with every sample failing just because min_samples is large.
    const bool epoch_end = next_ % order_.batches_per_rank_epoch() == 0;
    Status budget = CheckErrorBudgetLocked(/*at_end=*/epoch_end);
    if (!budget.ok()) {
      failure_ = budget;
      stop_ = true;
      cancelled_.store(true, std::memory_order_relaxed);
      driver_cv_.notify_all();
      return failure_;
    }
    // Every sample failed: nothing to deliver, unless the consumer follows positions.
    if (batch.size() == 0 && !options_.deliver_empty_batches) continue;
    ++batches_delivered_;
    return std::optional<Batch>(std::move(batch));
  }
}

void Engine::CountDeliveredLocked(const Batch& batch) {
  samples_failed_ += static_cast<int64_t>(batch.errors.size());
  samples_delivered_ += batch.size();
  for (const SampleError& e : batch.errors) {
    ++errors_by_kind_[std::string(StatusCodeName(e.status.code()))];
    if (static_cast<int>(first_errors_.size()) < options_.max_kept_errors) {
      first_errors_.push_back(e);
    }
  }
}

Status Engine::Submit(int64_t batch) {
  if (options_.schedule != Schedule::kOnDemand) {
    return Status::InvalidArgument("Submit() on a sequential engine");
  }
  if (batch < 0 || batch >= order_.total_batches()) {
    return Status::InvalidArgument("batch " + std::to_string(batch) + " is outside the run's " +
                                   std::to_string(order_.total_batches()) + " batches");
  }
  std::lock_guard lock(mu_);
  if (!failure_.ok()) return failure_;
  if (!untaken_.insert(batch).second) {
    return Status::InvalidArgument("batch " + std::to_string(batch) +
                                 " is already submitted and not yet taken");
  }
  submitted_.push_back(batch);
  driver_cv_.notify_all();
  return Status::Ok();
}

bool Engine::WaitTakeable(int64_t batch, std::chrono::nanoseconds timeout) {
  std::unique_lock lock(mu_);
  return consumer_cv_.wait_for(lock, timeout, [&] {
    return !failure_.ok() || untaken_.count(batch) == 0 || ready_.count(batch) > 0;
  });
}

Result<Batch> Engine::Take(int64_t batch) {
  if (options_.schedule != Schedule::kOnDemand) {
    return Status::InvalidArgument("Take() on a sequential engine: use Next()");
  }
  std::unique_lock lock(mu_);
  if (untaken_.count(batch) == 0) {
    return Status::InvalidArgument("batch " + std::to_string(batch) +
                                      " was not submitted, or was taken already");
  }
  consumer_cv_.wait(lock, [&] { return !failure_.ok() || ready_.count(batch) > 0; });
  if (!failure_.ok()) return failure_;
  auto it = ready_.find(batch);
  Batch out = std::move(it->second.batch);
  batch_bytes_ -= it->second.bytes;
  ready_.erase(it);
  untaken_.erase(batch);
  --admitted_ahead_;
  driver_cv_.notify_all();
  CountDeliveredLocked(out);
  ++batches_delivered_;
  ++next_calls_;
  return out;
}

int64_t Engine::ConsumerWaitNanosLocked() const {
  return consumer_wait_ns_ + (consumer_waiting_ ? NanosSince(consumer_waiting_since_) : 0);
}

int64_t Engine::next_batch() const {
  std::lock_guard lock(mu_);
  return next_;
}

EngineMetrics Engine::Metrics() const {
  std::lock_guard lock(mu_);
  EngineMetrics m;
  m.elapsed_s = SecondsSince(start_time_);
  const double elapsed = m.elapsed_s;
  m.samples_attempted = samples_attempted_;
  m.samples_delivered = samples_delivered_;
  m.samples_failed = samples_failed_;
  m.batches_delivered = batches_delivered_;
  m.bytes_read = bytes_read_;
  m.bytes_copied = bytes_copied_;
  m.budget_peak_bytes = budget_peak_;
  m.budget_used_bytes = batch_bytes_ + undecoded_bytes_;
  m.batches_ready = static_cast<int64_t>(ready_.size());
  m.reads_inflight = reads_inflight_;
  m.read_latency = read_latency_.Snapshot();
  m.next_wait = next_wait_.Snapshot();
  m.io_budget_bytes = options_.io_budget_bytes;
  m.batch_budget_bytes = options_.batch_budget_bytes;
  m.full_batch_bytes = static_cast<int64_t>(BatchBytes(options_.order.batch_size));
  m.batch_memory_reused = batch_memory_->hits();
  m.batch_memory_fresh = batch_memory_->misses();
  m.scratch_bytes = scratch_usage_.held();
  m.scratch_peak_bytes = scratch_usage_.peak();
  m.scratch_sample_peak_bytes = scratch_sample_peak_.load(std::memory_order_relaxed);
  m.scratch_retain_bytes = options_.scratch_retain_bytes;
  m.errors_by_kind = errors_by_kind_;
  m.first_errors = first_errors_;

  // Idle time of a stage is "blocked" while admission waits for the consumer (nothing
  // new may start because the prefetch queue or the budget is full) and "starved"
  // otherwise. The split is an estimate: admission waits and idle periods are measured
  // apart, so the blocked share is capped by the stage's idle time.
  const double admit_blocked = admit_blocked_ns_ * 1e-9;
  int64_t read_busy = read_busy_ns_;
  if (reads_inflight_ > 0) read_busy += NanosSince(reads_busy_since_);
  StageMetrics read{"read", "io", options_.io_inflight, reads_done_, read_busy * 1e-9, 0, 0};
  read.queue_fill = reads_done_ > 0 ? read_fill_sum_ / reads_done_ : 0.0;
  read.mean_latency_ms = 1e3 * m.read_latency.Mean();  // the histogram: every read done
  {
    const double idle = std::max(0.0, elapsed - read.busy_s);
    read.blocked_s = std::min(idle, read_blocked_ns_ * 1e-9 + admit_blocked);
    read.starved_s = idle - read.blocked_s;
  }

  const int threads = pool_ ? pool_->size() : 1;
  StageMetrics cpu{
      "cpu", "cpu", threads, samples_run_.load(), pool_ ? pool_->busy_seconds() / threads : 0.0,
      0,     0};
  {
    const double idle = std::max(0.0, elapsed - cpu.busy_s);
    cpu.blocked_s = std::min(idle, admit_blocked);
    cpu.starved_s = idle - cpu.blocked_s;
  }

  // The batch stage's window ends when the driver has admitted the run's last batch.
  const double window = driver_done_ ? std::min(elapsed, driver_done_s_) : elapsed;
  StageMetrics batch{
      "batch", "assembly",   options_.prefetch_depth, batches_delivered_, assemble_ns_ * 1e-9,
      0,       admit_blocked};
  batch.starved_s = std::max(0.0, window - batch.busy_s - batch.blocked_s);
  batch.queue_fill = next_calls_ > 0 ? std::min(1.0, batch_fill_sum_ / next_calls_) : 0.0;

  if (inputs_.reads_media) m.stages.push_back(read);
  m.stages.push_back(cpu);
  m.stages.push_back(batch);
  for (size_t i = 0; i < inputs_.ops.size(); ++i) {
    m.ops.push_back(OpMetrics{std::string(inputs_.ops[i]->name()), samples_run_.load(),
                              op_ns_[i].load() * 1e-9, op_latency_[i].Snapshot(),
                              op_takes_gil_[i].load() ? op_gil_wait_ns_[i].load() * 1e-9 : -1});
  }
  for (size_t i = 0; i < inputs_.batch_ops.size(); ++i) {
    // Reported per sample, like the other ops, so that costs add up.
    m.ops.push_back(OpMetrics{std::string(inputs_.batch_ops[i]->name()), samples_run_.load(),
                              batch_op_ns_[i].load() * 1e-9,
                              op_latency_[inputs_.ops.size() + i].Snapshot()});
  }
  return m;
}

}  // namespace headrace
