#include "headrace/exec/assemble_stage.h"

#include <algorithm>
#include <cstring>

#include "headrace/core/atomic_max.h"
#include "headrace/core/clock.h"
#include "headrace/core/region_allocator.h"
#include "headrace/ops/chain_runner.h"

namespace headrace {

AssembleStage::AssembleStage(const std::vector<FieldSpec>& fields,
                             const std::vector<StringField>& strings,
                             const std::vector<std::unique_ptr<BatchOp>>& batch_ops, uint64_t seed,
                             std::shared_ptr<ReusingAllocator> memory,
                             std::shared_ptr<ReusingAllocator> segments,
                             bool keep_sample_rows)
    : fields_(fields),
      strings_(strings),
      batch_ops_(batch_ops),
      seed_(seed),
      memory_(std::move(memory)),
      segments_(std::move(segments)),
      concatenates_(RaggedRows::Needed(fields)),
      regions_(dynamic_cast<const RegionAllocator*>(memory_.get()) != nullptr),
      // Batch ops work on assembled batches: with any, the fields are joined as usual.
      keep_sample_rows_(keep_sample_rows && concatenates_ && batch_ops.empty()),
      batch_op_ns_(batch_ops.size()),
      batch_op_latency_(std::make_unique<LatencyHistogram[]>(batch_ops.size())) {
  // Each row's dataset index, a field like the others (the planner refuses a clash).
  fields_.push_back(FieldSpec{"index", DType::kI64, {}});
  row_bytes_ = RowBytes(fields);
  joined_bytes_ = std::make_unique<std::atomic<int64_t>[]>(fields_.size());
  largest_joined_ = std::make_unique<std::atomic<int64_t>[]>(fields_.size());
}

size_t AssembleStage::RowBytes(const std::vector<FieldSpec>& fields) {
  size_t bytes = sizeof(int64_t);  // "index"
  for (const FieldSpec& f : fields) bytes += f.fixed_bytes();
  return bytes;
}

Status AssembleStage::AllocateRows(BatchJob& job) const {
  const auto n = static_cast<int64_t>(job.sample_indices.size());
  for (const FieldSpec& f : fields_) {
    if (f.concatenated()) {  // assembled at Finish
      job.tensors.emplace_back();
      continue;
    }
    std::vector<int64_t> shape{n};
    shape.insert(shape.end(), f.sample_shape.begin(), f.sample_shape.end());
    HR_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(f.dtype, std::move(shape), memory_));
    job.tensors.push_back(std::move(tensor));
  }
  job.slots.resize(n);
  job.status.resize(n);
  if (concatenates_) {
    job.ragged.assign(static_cast<size_t>(n), RaggedRows(fields_, segments_));
    for (RaggedRows& r : job.ragged) r.set_max_bytes(max_concatenated_bytes_);
  }
  if (joins()) {
    {
      MutexLock lock(job.join.mu);  // before any sample runs: uncontended
      job.join.done.assign(static_cast<size_t>(n), 0);
    }
    job.join.fields.resize(fields_.size());
    LendWindows(job);
  }
  if (!strings_.empty()) job.parsed_attributes.resize(n);
  job.pending.store(static_cast<int>(n));
  const size_t chain_fields = fields_.size() - 1;  // the chain writes all but "index"
  int64_t* index_row = job.tensors.back().mutable_data<int64_t>();
  for (int64_t s = 0; s < n; ++s) {
    index_row[s] = job.sample_indices[s];
    auto& row = job.slots[s];
    row.resize(chain_fields);
    for (size_t f = 0; f < chain_fields; ++f) {
      row[f] = fields_[f].concatenated()
                   ? nullptr
                   : job.tensors[f].mutable_data<uint8_t>() + s * fields_[f].sample_bytes();
    }
  }
  return Status::Ok();
}

double AssembleStage::MeanJoinedBytes(size_t f) const {
  const int64_t samples = concatenated_samples_.load(std::memory_order_relaxed);
  if (samples <= 0) return 0.0;
  return static_cast<double>(joined_bytes_[f].load(std::memory_order_relaxed)) /
         static_cast<double>(samples);
}

void AssembleStage::LendWindows(BatchJob& job) const {
  const int n = job.size();
  std::vector<size_t> capacities(fields_.size(), 0);
  bool any = false;
  for (size_t f = 0; f < fields_.size(); ++f) {
    const FieldLayout layout = fields_[f].layout;
    if (layout != FieldLayout::kRagged && layout != FieldLayout::kItems) continue;
    // From regions, what the rows do not use of the first block was never touched, and
    // goes back when the batch is joined (Joined: Settle): 2x the mean batch so far, at
    // least 1.25x the largest, and before any batch was assembled twice the first
    // window's sample's rows for each sample from it on (BatchPlacement::kGuess). Other
    // memory (pinned) is all there once allocated: the 1.25x the mean the join starts
    // with without windows, and none before a mean. A batch whose rows outgrow it has
    // its last samples copied, and the block grown. (VLM pipeline, 3 epochs, with 1.0x /
    // 1.5x / 2x the mean alone: 5.7 / 1.9 / 1.3 MB copied a sample of 26.5; a 128-sample
    // pass of a new Loader, its first batches by a mean of few samples: 8.2 at 1.5x.)
    const double mean = MeanJoinedBytes(f);
    if (regions_) {
      const double largest =
          static_cast<double>(largest_joined_[f].load(std::memory_order_relaxed));
      capacities[f] = mean <= 0.0 ? BatchPlacement::kGuess
                                  : static_cast<size_t>(std::max(2.0 * mean * n, 1.25 * largest)) +
                                        kBufferAlignment;
    } else {
      if (mean <= 0.0) continue;
      capacities[f] = static_cast<size_t>(1.25 * mean * n) + kBufferAlignment;
    }
    any = true;
  }
  if (!any) return;
  job.placement.Start(std::move(capacities), memory_, n);
  for (int s = 0; s < n; ++s) job.ragged[static_cast<size_t>(s)].Place(&job.placement, s);
}

Batch AssembleStage::Finish(BatchJob& job, bool& cancelled) {
  const auto start = Clock::now();
  const auto n = static_cast<int64_t>(job.sample_indices.size());
  Batch batch;
  batch.global_index = job.position.local_index;
  batch.epoch = job.position.epoch;
  batch.index_in_epoch = job.position.index_in_epoch;
  if (joins()) {
    // Samples not joined yet (a caller that finished them without SampleDone): now.
    MutexLock lock(job.join.mu);
    for (; job.join.next < n; ++job.join.next) JoinAndFree(job, job.join.next);
  }
  job.placement.Close();  // the joined tensors are the batch's alone (they settle)
  int64_t kept = 0;
  int64_t copied = 0;
  for (int64_t s = 0; s < n; ++s) {
    if (!job.status[s].ok()) continue;
    if (kept != s) {
      for (size_t f = 0; f < fields_.size(); ++f) {
        if (fields_[f].concatenated()) continue;
        const size_t row = fields_[f].sample_bytes();
        uint8_t* base = job.tensors[f].mutable_data<uint8_t>();
        std::memmove(base + kept * row, base + s * row, row);
        copied += static_cast<int64_t>(row);
      }
    }
    ++kept;
  }
  int64_t concatenated = 0;
  Status assembled;
  for (size_t f = 0; f < fields_.size(); ++f) {
    if (!fields_[f].concatenated()) {
      const Tensor& t = job.tensors[f];
      std::vector<int64_t> shape = t.shape();
      shape[0] = kept;
      const size_t row = fields_[f].sample_bytes();
      batch.fields.emplace_back(
          fields_[f].name, Tensor(t.dtype(), std::move(shape), t.buffer().Slice(0, row * kept)));
      continue;
    }
    if (keep_sample_rows_) {  // the samples' rows go into batch.sample_rows, below
      std::vector<int64_t> shape{0};
      shape.insert(shape.end(), fields_[f].sample_shape.begin(), fields_[f].sample_shape.end());
      batch.fields.emplace_back(fields_[f].name, Tensor(fields_[f].dtype, std::move(shape), Buffer()));
      continue;
    }
    if (assembled.ok()) assembled = job.join.status;
    Result<Tensor> t = assembled.ok() ? Joined(job, f, &concatenated) : assembled;
    if (!t.ok()) {
      assembled = t.status();
      t = Tensor();
    }
    batch.fields.emplace_back(fields_[f].name, *std::move(t));
  }
  copied += job.join.copied;
  if (keep_sample_rows_) {
    for (int64_t s = 0; s < n; ++s) {
      if (!job.status[s].ok()) continue;
      concatenated += static_cast<int64_t>(job.ragged[s].held_bytes());
      batch.sample_rows.push_back(std::make_shared<const RaggedRows>(std::move(job.ragged[s])));
    }
  }
  job.tensors.clear();
  job.ragged.clear();  // the samples' rows are in the batch now
  job.bytes = static_cast<int64_t>(BatchBytes(n)) + concatenated;
  if (concatenates_ && kept > 0 && assembled.ok()) {
    concatenated_bytes_.fetch_add(concatenated, std::memory_order_relaxed);
    concatenated_samples_.fetch_add(kept, std::memory_order_relaxed);
  }
  if (!assembled.ok()) {
    // No memory for its concatenated fields: the batch is dropped, each of its samples
    // an error with that status.
    FailBatch(job, assembled.WithContext("assembling batch " +
                                         std::to_string(batch.index_in_epoch) + " of epoch " +
                                         std::to_string(batch.epoch)),
              batch);
  }
  for (int64_t s = 0; s < n; ++s) {
    const Status& st = job.status[s];
    if (!st.ok() && st.code() != StatusCode::kCancelled) {
      batch.errors.push_back(
          SampleError{job.position.epoch, job.sample_indices[s], job.records[s]->uri(), st});
    }
  }
  CollectStrings(job, batch);
  if (batch.size() > 0) RunBatchOps(job, batch);
  cancelled = std::any_of(job.status.begin(), job.status.end(), [](const Status& s) {
    return s.code() == StatusCode::kCancelled;
  });
  busy_ns_.fetch_add(NanosSince(start), std::memory_order_relaxed);
  bytes_copied_.fetch_add(copied, std::memory_order_relaxed);
  return batch;
}

bool AssembleStage::SampleDone(BatchJob& job, int slot) {
  BatchJob::Join& join = job.join;
  const int n = job.size();
  MutexLock lock(join.mu);
  join.done[static_cast<size_t>(slot)] = 1;
  if (join.joining) return false;
  join.joining = true;
  while (join.next < n && join.done[static_cast<size_t>(join.next)]) {
    const int s = join.next;
    lock.unlock();  // the copy runs while other samples finish
    JoinAndFree(job, s);
    lock.lock();
    ++join.next;
  }
  join.joining = false;
  return join.next == n;
}

void AssembleStage::JoinAndFree(BatchJob& job, int s) {
  if (job.status[s].ok() && job.join.status.ok()) {
    if (Status fits = FitsBatch(job, s); !fits.ok()) {
      job.status[s] = std::move(fits);  // the sample's thread is done with it
    } else {
      job.join.status = Join(job, s);
    }
  }
  job.ragged[s] = RaggedRows();  // its rows freed for the next samples
}

Status AssembleStage::FitsBatch(const BatchJob& job, int s) const {
  if (max_concatenated_bytes_ == 0) return Status::Ok();
  const RaggedRows& r = job.ragged[s];
  size_t joined = 0;
  size_t adds = 0;
  for (size_t f = 0; f < fields_.size(); ++f) {
    const FieldLayout layout = fields_[f].layout;
    if (layout != FieldLayout::kRagged && layout != FieldLayout::kItems) continue;
    joined += job.join.fields[f].used;
    adds += r.bytes(static_cast<int>(f)).size();
  }
  if (joined + adds <= max_concatenated_bytes_) return Status::Ok();
  return Status::ResourceExhausted(
      "the sample's rows (" + std::to_string(adds) + " bytes) and those of the samples " +
      "before it in its batch (" + std::to_string(joined) + " bytes) are more than a " +
      "batch may hold (" + std::to_string(max_concatenated_bytes_) +
      " bytes: the batch budget less a full batch's fixed fields); raise " +
      "memory.budget_bytes, lower batch.size, or form batches by batch.max_tokens");
}

Status AssembleStage::Join(BatchJob& job, int s) {
  const RaggedRows& r = job.ragged[s];
  for (size_t f = 0; f < fields_.size(); ++f) {
    const FieldSpec& field = fields_[f];
    if (!field.concatenated()) continue;
    const bool lengths = field.layout == FieldLayout::kLengths;
    // A lengths field follows its ragged field (PlanContext::AddField).
    const int column = static_cast<int>(lengths ? f - 1 : f);
    const std::span<const uint8_t> from =
        lengths ? std::span(reinterpret_cast<const uint8_t*>(r.lengths(column).data()),
                            r.lengths(column).size_bytes())
                : r.bytes(column);
    BatchJob::Join::Field& to = job.join.fields[f];
    to.rows += lengths ? static_cast<int64_t>(r.lengths(column).size()) : r.rows(column);
    if (from.empty()) continue;
    if (to.bytes.empty()) {  // the field's first rows: the block windows were lent from, if any
      to.bytes = job.placement.Adopt(f);
      to.lent = !to.bytes.empty();
    }
    const size_t end = to.used + from.size();
    if (end <= to.bytes.size() && from.data() == to.bytes.data() + to.used) {
      to.used = end;  // written in place, in the window lent to it (BatchPlacement)
      continue;
    }
    // Where a later sample's window lies, the batch moves to a block of its own.
    const bool fits = end <= to.bytes.size() && (!to.lent || job.placement.MayWrite(f, s, end));
    if (!fits) {
      // First 1.25x the mean batch so far; grown to what it holds plus 1.25x the mean of
      // each sample still to come (by half before any batch was assembled). Growing by half
      // each time left regions 1.5x the batches: two of them freed at once outgrew the
      // cache, and each batch after faulted in fresh pages.
      const double mean = MeanJoinedBytes(f);
      size_t capacity = end;
      if (mean <= 0.0) {
        capacity = std::max(end, to.bytes.size() + to.bytes.size() / 2);
      } else if (to.bytes.empty()) {
        capacity = std::max(end, static_cast<size_t>(1.25 * mean * job.size()));
      } else {
        const int still = job.size() - s - 1;  // samples join in slot order
        capacity = end + static_cast<size_t>(1.25 * mean * still);
      }
      // Held by a later sample's window too, the block is not grown but left: a new one
      // takes the rows joined so far (Buffer::Grow copies them).
      const bool shared = to.bytes.use_count() > 1;
      HR_ASSIGN_OR_RETURN(to.bytes, Buffer::Grow(std::move(to.bytes), to.used, capacity, memory_));
      if (shared) job.join.copied += static_cast<int64_t>(to.used);
      to.lent = false;
    }
    // memmove: the rows may lie in the same block, in this sample's window past them
    // (a sample before it failed, or wrote fewer rows than it told).
    std::memmove(to.bytes.mutable_data() + to.used, from.data(), from.size());
    job.join.copied += static_cast<int64_t>(from.size());
    to.used = end;
  }
  return Status::Ok();
}

Result<Tensor> AssembleStage::Joined(BatchJob& job, size_t f, int64_t* bytes) const {
  const FieldSpec& field = fields_[f];
  BatchJob::Join::Field& joined = job.join.fields[f];
  std::vector<int64_t> shape{joined.rows};
  shape.insert(shape.end(), field.sample_shape.begin(), field.sample_shape.end());
  if (joined.bytes.empty()) return Tensor::Allocate(field.dtype, std::move(shape), memory_);
  joined_bytes_[f].fetch_add(static_cast<int64_t>(joined.used), std::memory_order_relaxed);
  StoreMax(largest_joined_[f], static_cast<int64_t>(joined.used));
  *bytes += static_cast<int64_t>(joined.used);
  // Its capacity past the rows (the room left for samples still to come) goes back, so
  // that the batch pool's cap counts memory that exists (RegionAllocator::Settle).
  joined.bytes.Settle(joined.used);
  return Tensor(field.dtype, std::move(shape), std::move(joined.bytes).Slice(0, joined.used));
}

void AssembleStage::FailBatch(BatchJob& job, const Status& status, Batch& batch) const {
  for (Status& st : job.status) {
    if (st.ok()) st = status;
  }
  for (size_t f = 0; f < batch.fields.size(); ++f) {
    std::vector<int64_t> shape{0};
    shape.insert(shape.end(), fields_[f].sample_shape.begin(), fields_[f].sample_shape.end());
    batch.fields[f].second = Tensor(fields_[f].dtype, std::move(shape), Buffer());
  }
}

int64_t AssembleStage::ConcatenatedBytesPerSample() const {
  const int64_t samples = concatenated_samples_.load(std::memory_order_relaxed);
  return samples == 0 ? 0 : concatenated_bytes_.load(std::memory_order_relaxed) / samples;
}

void AssembleStage::CollectStrings(const BatchJob& job, Batch& batch) const {
  const auto n = static_cast<int64_t>(job.sample_indices.size());
  for (const StringField& f : strings_) {
    Batch::Strings& column = batch.strings.emplace_back();
    column.name = f.name;
    column.list = f.list;
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
}

void AssembleStage::RunBatchOps(const BatchJob& job, Batch& batch) {
  for (size_t i = 0; i < batch_ops_.size(); ++i) {
    const BatchOp& op = *batch_ops_[i];
    const auto start = Clock::now();
    Status status = op.Run(batch, BatchSeed(seed_, batch.epoch, batch.index_in_epoch, i));
    const int64_t op_ns = NanosSince(start);
    batch_op_ns_[i].fetch_add(op_ns, std::memory_order_relaxed);
    batch_op_latency_[i].Record(op_ns);
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

std::vector<OpMetrics> AssembleStage::OpsMetrics(int64_t samples_run) const {
  std::vector<OpMetrics> out;
  for (size_t i = 0; i < batch_ops_.size(); ++i) {
    out.push_back(OpMetrics{std::string(batch_ops_[i]->name()), "", samples_run,
                            batch_op_ns_[i].load() * 1e-9, batch_op_latency_[i].Snapshot()});
  }
  return out;
}

}  // namespace headrace
