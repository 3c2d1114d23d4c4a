#include "headrace/core/batch.h"

#include "headrace/core/ragged_rows.h"

namespace headrace {

std::string_view FieldLayoutName(FieldLayout layout) {
  switch (layout) {
    case FieldLayout::kFixed: return "fixed";
    case FieldLayout::kRagged: return "ragged";
    case FieldLayout::kItems: return "items";
    case FieldLayout::kLengths: return "lengths";
  }
  return "fixed";
}

Result<FieldLayout> ParseFieldLayout(std::string_view name) {
  for (FieldLayout l : {FieldLayout::kFixed, FieldLayout::kRagged, FieldLayout::kItems,
                        FieldLayout::kLengths}) {
    if (FieldLayoutName(l) == name) return l;
  }
  return Status::InvalidArgument("unknown field layout '" + std::string(name) +
                                 "' (allowed: fixed, ragged, items, lengths)");
}

std::string LengthsName(std::string_view name) { return std::string(name) + "_lengths"; }

int64_t Batch::size() const {
  const Tensor* rows = Find("index");
  if (rows == nullptr && !fields.empty()) rows = &fields.front().second;
  if (rows == nullptr || rows->shape().empty()) return 0;
  return rows->shape()[0];
}

const Tensor* Batch::Find(std::string_view name) const {
  for (const auto& [field_name, tensor] : fields) {
    if (field_name == name) return &tensor;
  }
  return nullptr;
}

Result<std::vector<int64_t>> SampleOffsets(const Batch& batch, const FieldSpec& field) {
  const int64_t n = batch.size();
  const auto missing = [&](std::string_view name) {
    return Status::InvalidArgument("the batch has no field '" + std::string(name) + "'");
  };
  const Tensor* tensor = batch.Find(field.name);
  if (tensor == nullptr) return missing(field.name);
  const int64_t rows = tensor->shape().empty() ? 0 : tensor->shape()[0];
  std::vector<int64_t> offsets(static_cast<size_t>(n) + 1, 0);
  // Entries per sample: its item count, or one.
  std::vector<int64_t> entries(static_cast<size_t>(n), 1);
  if (field.concatenated() && !field.count_field.empty()) {
    const Tensor* count = batch.Find(field.count_field);
    if (count == nullptr) return missing(field.count_field);
    if (count->numel() != n || count->dtype() != DType::kI64) {
      return Status::InvalidArgument("field '" + field.count_field + "' is not an i64 per sample");
    }
    entries.assign(count->data<int64_t>(), count->data<int64_t>() + n);
  }
  if (field.layout == FieldLayout::kFixed) {
    for (int64_t s = 0; s <= n; ++s) offsets[static_cast<size_t>(s)] = s;
  } else if (field.layout == FieldLayout::kItems || field.layout == FieldLayout::kLengths) {
    for (int64_t s = 0; s < n; ++s) offsets[s + 1] = offsets[s] + entries[s];
  } else {
    const std::string lengths_name = LengthsName(field.name);
    const Tensor* lengths = batch.Find(lengths_name);
    if (lengths == nullptr) return missing(lengths_name);
    const int32_t* length = lengths->data<int32_t>();
    int64_t entry = 0;
    for (int64_t s = 0; s < n; ++s) {
      int64_t sum = 0;
      for (int64_t e = 0; e < entries[s]; ++e, ++entry) {
        if (entry >= lengths->numel()) {
          return Status::InvalidArgument("field '" + lengths_name + "' has fewer entries than "
                                         "the batch's samples have");
        }
        sum += length[entry];
      }
      offsets[s + 1] = offsets[s] + sum;
    }
  }
  if (offsets.back() != rows) {
    return Status::InvalidArgument("field '" + field.name + "' has " + std::to_string(rows) +
                                   " rows, its samples " + std::to_string(offsets.back()));
  }
  return offsets;
}

size_t Batch::nbytes() const {
  size_t total = 0;
  for (const auto& field : fields) total += field.second.nbytes();
  for (const auto& rows : sample_rows) total += rows->held_bytes();
  return total;
}

}  // namespace headrace
