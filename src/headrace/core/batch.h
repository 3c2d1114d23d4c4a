// Batch: the named tensors of one batch, with where it sits in the run.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/core/sample.h"
#include "headrace/core/tensor.h"

namespace headrace {

// One field of a batch: each sample contributes a row of `sample_shape`.
struct FieldSpec {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> sample_shape;
  size_t sample_bytes() const {
    size_t n = DTypeSize(dtype);
    for (int64_t d : sample_shape) n *= static_cast<size_t>(d);
    return n;
  }
};

struct Batch {
  int64_t global_index = 0;  // position in the run: epoch * batches_per_epoch + index_in_epoch
  int64_t epoch = 0;
  int64_t index_in_epoch = 0;
  // Fields in a fixed order (the order the pipeline declares them); every tensor's first
  // dimension is the number of samples in this batch.
  std::vector<std::pair<std::string, Tensor>> fields;
  // Per-sample strings, in the same row order: each sample's id ("id") and the
  // source's text and string fields. A row holds the field's items (one for a single
  // field; none when the record lacks it).
  struct Strings {
    std::string name;
    bool list = false;  // a list field (max_items > 0): every row is a list
    std::vector<std::vector<std::string>> rows;
  };
  std::vector<Strings> strings;
  // Samples skipped from this batch, in epoch order.
  std::vector<SampleError> errors;

  int64_t size() const;  // samples in the batch (first dimension of its tensors)
  // The field named `name`, or null.
  const Tensor* Find(std::string_view name) const;
  size_t nbytes() const;
};

}  // namespace headrace
