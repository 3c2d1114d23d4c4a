// Batch: the named tensors of one batch, with where it sits in the run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/core/sample.h"
#include "headrace/core/tensor.h"

namespace headrace {

class RaggedRows;

// How the values the samples of a batch write for one field make its tensor.
enum class FieldLayout {
  // One value of `sample_shape` per sample: [samples, ...sample_shape]. An op writes it
  // in place, at the sample's row of the batch buffer (SampleContext::rows).
  kFixed,
  // Any number of rows of `sample_shape` per sample (a `[?, D]` field), appended in
  // entries: one per sample, or one per item of a list. The batch concatenates them,
  // [rows, ...sample_shape], and adds `<name>_lengths` (i32 [entries]: the rows of each
  // entry, in batch order). An op appends with SampleContext::AppendRows.
  kRagged,
  // The items of a media list, one value of `sample_shape` each, concatenated:
  // [items, ...sample_shape]. The list's `<list>_count` says how many each sample has.
  kItems,
  // `<name>_lengths` of the kRagged field just before it in the layout: i32, one value
  // per entry. The assemble stage writes it; no op does.
  kLengths,
};

// One field of a batch.
struct FieldSpec {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> sample_shape;
  FieldLayout layout = FieldLayout::kFixed;
  // For a list's concatenated fields (its kItems, its kRagged and their kLengths): the
  // fixed i64 field that holds each sample's item count ("views_count"), so that a
  // sample's items, or entries, are told apart. Empty: one entry per sample.
  std::string count_field{};
  // For a ragged per-sample field with one row per token of a sequence (input_ids
  // itself, its labels and position ids, the M-RoPE ids): that sequence field's name.
  // Packing (exec/packer.h) lays these fields out as rows of `batch.pack.seq_len` tokens.
  std::string tokens_of{};

  // Bytes of one value of `sample_shape`: a sample's row of a fixed field, one row of a
  // ragged one, one item of a list's.
  size_t sample_bytes() const {
    size_t n = DTypeSize(dtype);
    for (int64_t d : sample_shape) n *= static_cast<size_t>(d);
    return n;
  }
  // Whether the samples' values are concatenated (kRagged, kItems, kLengths) rather than
  // one row each.
  bool concatenated() const { return layout != FieldLayout::kFixed; }
  // The bytes this field takes in the fixed part of a sample's row: 0 when concatenated.
  size_t fixed_bytes() const { return concatenated() ? 0 : sample_bytes(); }
};

// "fixed", "ragged", "items", "lengths"; and back (kInvalidArgument for another name).
std::string_view FieldLayoutName(FieldLayout layout);
Result<FieldLayout> ParseFieldLayout(std::string_view name);

// The name of the lengths field of ragged field `name`: "<name>_lengths".
std::string LengthsName(std::string_view name);


struct Batch {
  int64_t global_index = 0;  // position in the run: epoch * batches_per_epoch + index_in_epoch
  int64_t epoch = 0;
  int64_t index_in_epoch = 0;
  // Fields in a fixed order (the order the pipeline declares them). A fixed field's first
  // dimension is the number of samples; a concatenated one's (FieldLayout) its rows or
  // items, with `<name>_lengths` or `<list>_count` beside it. "index" is always there.
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
  // Only for a consumer that lays the samples out itself (EngineOptions::keep_sample_rows:
  // the packer): each kept sample's rows of the concatenated fields, one per row of the
  // batch, in place of those fields' tensors (which then have no rows). So the bytes of
  // a packed batch's patches and tokens are copied once, as an unpacked batch's are.
  std::vector<std::shared_ptr<const RaggedRows>> sample_rows;

  // Samples in the batch: the first dimension of "index" (of the first field when a
  // batch built by hand has no "index").
  int64_t size() const;
  // The field named `name`, or null.
  const Tensor* Find(std::string_view name) const;
  // Bytes of its tensors, and of its sample_rows.
  size_t nbytes() const;
};

// Where each sample's values of `field` are in `batch`'s tensor of it, as offsets along
// its first dimension (size() + 1 of them): sample s has [offsets[s], offsets[s + 1]).
// Rows for kFixed (s), kItems (its items) and kRagged (its entries' rows); entries for
// kLengths. kInvalidArgument when the batch lacks a field this needs (the field, its
// lengths, its count) or they disagree with its tensor.
Result<std::vector<int64_t>> SampleOffsets(const Batch& batch, const FieldSpec& field);

}  // namespace headrace
