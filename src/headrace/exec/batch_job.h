// BatchJob: one batch in production, as the stages pass it along (engine.h).
//
// Made by the driver (positions, records, rows), then shared by every task of its
// samples. Each sample's row, status and parsed strings are written by the one thread
// that runs that sample; the job is complete when `pending` reaches zero, and the last
// finisher (which sees every row: acq_rel) assembles it. With concatenated fields, the
// samples' rows are joined as they finish instead (`join`, AssembleStage::SampleDone),
// and the thread that joins the last assembles it.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/ragged_rows.h"
#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/core/tensor.h"
#include "headrace/exec/batch_placement.h"
#include "headrace/exec/epoch_order.h"
#include "headrace/exec/rows_gate.h"
#include "headrace/exec/thread_annotations.h"

namespace headrace {

struct BatchJob {
  BatchPosition position;
  std::vector<int64_t> sample_indices;
  std::vector<Tensor> tensors;               // one per field, then "index" (empty: concatenated)
  std::vector<std::vector<uint8_t*>> slots;  // per sample: the row pointer per field
  // Per sample: its rows of the concatenated fields (empty when the layout has none).
  std::vector<RaggedRows> ragged;
  std::vector<Status> status;                // per sample
  // Per sample: the text values its source parsed at run time (Sample::attributes, when
  // they are not the record's), for the batch's strings; nullopt: the record's.
  std::vector<std::optional<std::vector<Attribute>>> parsed_attributes;
  // Per sample: its record, looked up once when the batch starts; a store that builds
  // records on request fills `record_scratch` (sized once: `records` may point into it).
  std::vector<const SampleRecord*> records;
  std::vector<SampleRecord> record_scratch;
  // Per sample (sized as the batch starts when the run has a former): the token sequence
  // its former handed over (BatchFormer::HandOver), for its chain (Sample::told).
  std::vector<std::optional<ToldSequence>> told;
  std::atomic<int> pending{0};
  // The concatenated fields joined in slot order as the samples finish.
  struct Join {
    struct Field {
      Buffer bytes;  // capacity; the first `used` bytes are rows
      size_t used = 0;
      int64_t rows = 0;
      // Whether `bytes` is the block `placement` lends windows of (the join checks
      // where it writes: BatchPlacement::MayWrite).
      bool lent = false;
    };
    Mutex mu;
    std::vector<char> done HR_GUARDED_BY(mu);  // per sample: its status and rows are final
    int next HR_GUARDED_BY(mu) = 0;            // the samples before it are joined
    bool joining HR_GUARDED_BY(mu) = false;    // a thread is joining
    std::vector<Field> fields;  // per batch field: the joining thread's (one at a time)
    Status status;              // the joining thread's: the first failure to join
    int64_t copied = 0;         // the joining thread's: bytes copied (not found in place)
  } join;
  // Windows of the concatenated tensors lent to the samples before they run, so that
  // their rows are written in place (AssembleStage::AllocateRows).
  BatchPlacement placement;
  // The batch's buffers, charged to the batch budget: at admission, its fixed rows plus
  // an estimate of its concatenated ones (and, as its samples tell their rows, what
  // passes that estimate: rows_gate); once assembled, what it holds.
  int64_t bytes = 0;
  BatchRowsGate rows_gate;

  int size() const { return static_cast<int>(sample_indices.size()); }
};

}  // namespace headrace
