// StoreMax: target = max(target, value), for peaks that many threads update.
#pragma once

#include <atomic>

namespace headrace {

template <typename T>
void StoreMax(std::atomic<T>& target, T value,
              std::memory_order order = std::memory_order_relaxed) {
  T seen = target.load(order);
  while (seen < value && !target.compare_exchange_weak(seen, value, order)) {
  }
}

}  // namespace headrace
