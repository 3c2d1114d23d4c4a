#include "headrace/core/batch.h"

namespace headrace {

int64_t Batch::size() const {
  if (fields.empty() || fields.front().second.shape().empty()) return 0;
  return fields.front().second.shape()[0];
}

const Tensor* Batch::Find(std::string_view name) const {
  for (const auto& [field_name, tensor] : fields) {
    if (field_name == name) return &tensor;
  }
  return nullptr;
}

size_t Batch::nbytes() const {
  size_t total = 0;
  for (const auto& field : fields) total += field.second.nbytes();
  return total;
}

}  // namespace headrace
