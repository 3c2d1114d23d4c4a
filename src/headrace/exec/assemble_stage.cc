#include "headrace/exec/assemble_stage.h"

#include <algorithm>
#include <cstring>

#include "headrace/core/clock.h"
#include "headrace/ops/chain_runner.h"

namespace headrace {

AssembleStage::AssembleStage(const std::vector<FieldSpec>& fields,
                             const std::vector<StringField>& strings,
                             const std::vector<std::unique_ptr<BatchOp>>& batch_ops, uint64_t seed,
                             std::shared_ptr<PoolingAllocator> memory)
    : fields_(fields),
      strings_(strings),
      batch_ops_(batch_ops),
      seed_(seed),
      memory_(std::move(memory)),
      batch_op_ns_(batch_ops.size()),
      batch_op_latency_(std::make_unique<LatencyHistogram[]>(batch_ops.size())) {
  // Each row's dataset index, a field like the others (the planner refuses a clash).
  fields_.push_back(FieldSpec{"index", DType::kI64, {}});
  row_bytes_ = RowBytes(fields);
}

size_t AssembleStage::RowBytes(const std::vector<FieldSpec>& fields) {
  size_t bytes = sizeof(int64_t);  // "index"
  for (const FieldSpec& f : fields) bytes += f.sample_bytes();
  return bytes;
}

Status AssembleStage::AllocateRows(BatchJob& job) const {
  const auto n = static_cast<int64_t>(job.sample_indices.size());
  for (const FieldSpec& f : fields_) {
    std::vector<int64_t> shape{n};
    shape.insert(shape.end(), f.sample_shape.begin(), f.sample_shape.end());
    HR_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(f.dtype, std::move(shape), memory_));
    job.tensors.push_back(std::move(tensor));
  }
  job.slots.resize(n);
  job.status.resize(n);
  if (!strings_.empty()) job.parsed_attributes.resize(n);
  job.pending.store(static_cast<int>(n));
  const size_t chain_fields = fields_.size() - 1;  // the chain writes all but "index"
  int64_t* index_row = job.tensors.back().mutable_data<int64_t>();
  for (int64_t s = 0; s < n; ++s) {
    index_row[s] = job.sample_indices[s];
    auto& row = job.slots[s];
    row.resize(chain_fields);
    for (size_t f = 0; f < chain_fields; ++f) {
      row[f] = job.tensors[f].mutable_data<uint8_t>() + s * fields_[f].sample_bytes();
    }
  }
  return Status::Ok();
}

Batch AssembleStage::Finish(BatchJob& job, bool& cancelled) {
  const auto start = Clock::now();
  const auto n = static_cast<int64_t>(job.sample_indices.size());
  Batch batch;
  batch.global_index = job.position.local_index;
  batch.epoch = job.position.epoch;
  batch.index_in_epoch = job.position.index_in_epoch;
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
      for (size_t f = 0; f < fields_.size(); ++f) {
        const size_t row = fields_[f].sample_bytes();
        uint8_t* base = job.tensors[f].mutable_data<uint8_t>();
        std::memmove(base + kept * row, base + s * row, row);
        copied += static_cast<int64_t>(row);
      }
    }
    ++kept;
  }
  for (size_t f = 0; f < fields_.size(); ++f) {
    const Tensor& t = job.tensors[f];
    std::vector<int64_t> shape = t.shape();
    shape[0] = kept;
    const size_t row = fields_[f].sample_bytes();
    batch.fields.emplace_back(fields_[f].name,
                              Tensor(t.dtype(), std::move(shape), t.buffer().Slice(0, row * kept)));
  }
  job.tensors.clear();
  CollectStrings(job, batch);
  if (kept > 0) RunBatchOps(job, batch);
  cancelled = std::any_of(job.status.begin(), job.status.end(), [](const Status& s) {
    return s.code() == StatusCode::kCancelled;
  });
  busy_ns_.fetch_add(NanosSince(start), std::memory_order_relaxed);
  bytes_copied_.fetch_add(copied, std::memory_order_relaxed);
  return batch;
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
    out.push_back(OpMetrics{std::string(batch_ops_[i]->name()), samples_run,
                            batch_op_ns_[i].load() * 1e-9, batch_op_latency_[i].Snapshot()});
  }
  return out;
}

}  // namespace headrace
