// BatchRowsGate: one batch's samples' told rows held to the batch budget
// (RaggedRows::set_gate: each sample's, after its size pass, before it decodes).
//
// A batch is admitted with an estimate of its concatenated rows: the mean bytes a sample
// so far, times its samples (Engine::StartBatch). Each sample's told rows are drawn from
// that first, in whatever order the samples tell them; what passes it is charged to the
// batch once it fits the batch budget (Delivery::HoldRows, which may wait). Rows no size
// pass tells (ops that cannot tell them before they run) are not held here: they are
// charged when the batch is assembled, as before (SECURITY.md's allowance).
//
// Threads: Hold from the pool's threads, one call per sample; charged() once every
// sample of the batch is done.
#pragma once

#include <atomic>
#include <cstdint>

#include "headrace/core/ragged_rows.h"

namespace headrace {

class Delivery;

class BatchRowsGate final : public RowsGate {
 public:
  // Batch `batch` (its local index), admitted with `estimate` bytes for its samples'
  // concatenated rows; the charges past it go to `delivery`, which outlives the batch.
  void Start(Delivery* delivery, int64_t batch, int64_t estimate) {
    delivery_ = delivery;
    batch_ = batch;
    unclaimed_.store(estimate, std::memory_order_relaxed);
  }
  void Hold(size_t bytes) override;
  // What the batch was charged past its admission.
  int64_t charged() const { return charged_.load(std::memory_order_acquire); }

 private:
  Delivery* delivery_ = nullptr;
  int64_t batch_ = 0;
  std::atomic<int64_t> unclaimed_{0};  // of the estimate, not yet drawn
  std::atomic<int64_t> charged_{0};
};

}  // namespace headrace
