// BudgetGauge: what memory.budget_bytes is charged with now, and its peak: the buffers of
// admitted batches (the delivery's batch budget) plus the I/O budget's undecoded bytes
// (the read stage's). Two stages with locks of their own add to it; the peak is of the
// sum, exact because both adds and reads are sequentially consistent (of two concurrent
// increments, at least one sees the other's).
#pragma once

#include <atomic>
#include <cstdint>

#include "headrace/core/atomic_max.h"

namespace headrace {

class BudgetGauge {
 public:
  void AddBatches(int64_t delta) { Add(batches_, undecoded_, delta); }
  void AddUndecoded(int64_t delta) { Add(undecoded_, batches_, delta); }
  int64_t used() const { return batches_.load() + undecoded_.load(); }
  int64_t peak() const { return peak_.load(); }

 private:
  void Add(std::atomic<int64_t>& mine, const std::atomic<int64_t>& other, int64_t delta) {
    const int64_t sum = mine.fetch_add(delta) + delta + other.load();
    if (delta > 0) StoreMax(peak_, sum, std::memory_order_seq_cst);
  }

  std::atomic<int64_t> batches_{0};
  std::atomic<int64_t> undecoded_{0};
  std::atomic<int64_t> peak_{0};
};

}  // namespace headrace
