// AssembleStage: a batch's buffers, and the batch once its last sample is done.
//
// - AllocateRows (driver thread, at admission): one tensor per field, the engine's
//   "index" field among them like any other, from a pool of batch memory (steady-state
//   batches reuse the blocks of delivered ones); each sample's slots point at its rows.
// - SampleDone (the thread of each sample, as it finishes), with concatenated fields
//   (FieldLayout: ragged rows, a list's items, their `<name>_lengths`): each kept
//   sample's RaggedRows joined into the batch's tensors in slot order, as soon as the
//   samples before it are done, and its rows freed. Rows the size pass told were
//   written in the batch tensor already, in a window lent before the sample ran
//   (LendWindows, exec/batch_placement.h): those are not copied; the others are, once. Joining as they finish rather than all at the end keeps a
//   sample's rows alive for about one sample's time instead of its batch's: with
//   hundreds of MB of patches a batch, the rows' regions were then mapped fresh again
//   (page faults: 10% of the VLM pipeline's CPU), and the last sample's thread copied
//   the whole batch alone while the consumer waited. The batch tensor's first block is
//   lent from (LendWindows says its size: from regions, twice the mean batch so far) or
//   taken at the first join (1.25x the mean), and grows in place (a region,
//   core/region_allocator.h) once no window of it is still being written.
// - Finish (the thread of the batch's last sample, or the one that joined it): the rows
//   of the samples that succeeded compacted to the front, in order (a copy of sample
//   bytes only for failed samples), the joined tensors, the strings collected, the batch
//   ops run (a failing one empties the batch and names each of its samples). With
//   `keep_sample_rows` (a packer lays the samples out itself: exec/packer.h) the
//   concatenated fields are not joined: each kept sample's RaggedRows goes into
//   Batch::sample_rows instead, and the fields' tensors have no rows.
//
// Threads: AllocateRows from one thread at a time; SampleDone from any (each sample
// once); Finish from any (each job once).
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "headrace/core/batch.h"
#include "headrace/core/histogram.h"
#include "headrace/core/pooling_allocator.h"
#include "headrace/exec/batch_job.h"
#include "headrace/exec/chain_stage.h"
#include "headrace/exec/stage.h"
#include "headrace/ops/op.h"

namespace headrace {

// Per-sample strings collected into Batch::strings, in this order: field -1 is the
// record's id, else the Attribute values of that source field.
struct StringField {
  std::string name;
  int field = -1;
  bool list = false;
};

class AssembleStage {
 public:
  // `fields`, `strings` and `batch_ops` live as long as the stage (the engine's inputs).
  // Batch tensors come from `memory`; the samples' rows of concatenated fields, until
  // their batch is assembled, from `segments`.
  AssembleStage(const std::vector<FieldSpec>& fields, const std::vector<StringField>& strings,
                const std::vector<std::unique_ptr<BatchOp>>& batch_ops, uint64_t seed,
                std::shared_ptr<ReusingAllocator> memory,
                std::shared_ptr<ReusingAllocator> segments, bool keep_sample_rows = false);

  // Bytes of one batch row of the chain's fixed `fields`, the "index" field included.
  static size_t RowBytes(const std::vector<FieldSpec>& fields);
  // Bytes of one batch's fixed buffers at `samples` rows (its concatenated fields are
  // known once it is assembled: BatchJob::bytes).
  size_t BatchBytes(int64_t samples) const { return row_bytes_ * static_cast<size_t>(samples); }
  Status AllocateRows(BatchJob& job) const;
  // What a batch's concatenated fields may hold (0: no limit; set before the run
  // starts): the batch budget less a full batch's fixed fields. A sample whose rows
  // alone take more fails in its size pass, before decoding (RaggedRows::max_bytes);
  // one whose rows would take the batch's joined rows past it fails at its join, in
  // slot order, so that which samples fail depends on the data and not on timing.
  void set_max_concatenated_bytes(size_t max_bytes) { max_concatenated_bytes_ = max_bytes; }
  // Whether samples' rows are joined as they finish (SampleDone), rather than counted
  // down by BatchJob::pending.
  bool joins() const { return concatenates_ && !keep_sample_rows_; }
  // Sample `slot` of `job` is done (its status set). Joins it, and those after it that
  // are done, unless the samples before it are not all done (the thread that finishes
  // the last of those will) or another thread is joining (it will). True for exactly one
  // call per job: the one after which every sample is joined; its caller calls Finish.
  bool SampleDone(BatchJob& job, int slot);
  // The complete batch of `job`, and job.bytes set to what it holds; `cancelled` set
  // when one of its samples was cancelled (the run is stopping: nobody will consume it).
  Batch Finish(BatchJob& job, bool& cancelled);
  // Bytes of concatenated fields per sample so far (a mean over the assembled batches):
  // what admission adds to a batch's fixed bytes.
  int64_t ConcatenatedBytesPerSample() const;
  // Whether that mean is known: no field is concatenated, or a batch holding samples
  // was assembled.
  bool KnowsConcatenatedBytes() const {
    return !concatenates_ || concatenated_samples_.load(std::memory_order_relaxed) > 0;
  }

  int64_t bytes_copied() const { return bytes_copied_.load(std::memory_order_relaxed); }
  double busy_s() const { return busy_ns_.load(std::memory_order_relaxed) * 1e-9; }
  int64_t memory_reused() const { return memory_->hits(); }
  int64_t memory_fresh() const { return memory_->misses(); }
  // The batch ops' metrics, reported per sample like the chain's ops so that costs add up.
  std::vector<OpMetrics> OpsMetrics(int64_t samples_run) const;

 private:
  void CollectStrings(const BatchJob& job, Batch& batch) const;
  void RunBatchOps(const BatchJob& job, Batch& batch);
  // Sample `s`'s rows appended to each concatenated field's joined bytes (nothing copied
  // for rows written in place).
  Status Join(BatchJob& job, int s);
  // kResourceExhausted when sample `s`'s rows would take the batch's joined rows past
  // max_concatenated_bytes_.
  Status FitsBatch(const BatchJob& job, int s) const;
  // The first blocks of `job`'s ragged and item tensors, and the windows of them its
  // samples' rows take before they run (BatchPlacement).
  void LendWindows(BatchJob& job) const;
  // Field f's bytes per sample over the assembled batches (0: none yet).
  double MeanJoinedBytes(size_t f) const;
  // Joins sample `s` if it and the join so far succeeded (the first failure into
  // job.join.status), then frees its rows. Called by the one joining thread.
  void JoinAndFree(BatchJob& job, int s);
  // The batch tensor of concatenated field `f` from its joined bytes; those into *bytes.
  Result<Tensor> Joined(BatchJob& job, size_t f, int64_t* bytes) const;
  // Drops the batch: every sample that succeeded fails with `status`, every field has
  // no rows.
  void FailBatch(BatchJob& job, const Status& status, Batch& batch) const;

  std::vector<FieldSpec> fields_;  // the batch layout: the chain's fields, then "index"
  size_t row_bytes_ = 0;
  const std::vector<StringField>& strings_;
  const std::vector<std::unique_ptr<BatchOp>>& batch_ops_;
  const uint64_t seed_;
  const std::shared_ptr<ReusingAllocator> memory_;
  const std::shared_ptr<ReusingAllocator> segments_;
  const bool concatenates_;  // some field is concatenated
  const bool regions_;       // memory_ is a RegionAllocator (pages given back: Settle)
  const bool keep_sample_rows_;
  size_t max_concatenated_bytes_ = 0;
  std::vector<std::atomic<int64_t>> batch_op_ns_;
  std::unique_ptr<LatencyHistogram[]> batch_op_latency_;
  std::atomic<int64_t> busy_ns_{0};
  std::atomic<int64_t> bytes_copied_{0};
  std::atomic<int64_t> concatenated_bytes_{0};    // over the assembled batches
  std::atomic<int64_t> concatenated_samples_{0};  // their kept samples
  // Per field, the bytes its joined tensors held over the assembled batches: a new
  // batch's first size (Join).
  std::unique_ptr<std::atomic<int64_t>[]> joined_bytes_;
  // Per field, the most bytes one joined tensor held (a first block's size: LendWindows).
  std::unique_ptr<std::atomic<int64_t>[]> largest_joined_;
};

}  // namespace headrace
