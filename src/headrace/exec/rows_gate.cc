#include "headrace/exec/rows_gate.h"

#include <algorithm>

#include "headrace/exec/delivery.h"

namespace headrace {

void BatchRowsGate::Hold(size_t bytes) {
  if (delivery_ == nullptr) return;
  int64_t want = static_cast<int64_t>(std::min<size_t>(bytes, INT64_MAX));
  // Drawn from the estimate first.
  int64_t left = unclaimed_.load(std::memory_order_relaxed);
  int64_t take = 0;
  do {
    take = std::clamp<int64_t>(left, 0, want);
  } while (take > 0 && !unclaimed_.compare_exchange_weak(left, left - take,
                                                         std::memory_order_relaxed));
  want -= take;
  if (want > 0 && delivery_->HoldRows(batch_, want)) {
    charged_.fetch_add(want, std::memory_order_release);
  }
}

}  // namespace headrace
