// ForEachItemOp: the ops over a list of media, run once per item.
//
// A source field may hold a list of media (`max_items: N`: the views of a multi-image
// conversation). An op that reads an item of such a list is *mapped* over it (the
// planner decides this from what the op declares: op_plan.h): it runs once per item.
// Each fixed batch field it writes becomes the list's items concatenated over the batch
// (FieldLayout::kItems), or [N, ...] per sample when the list pads them
// (SourceField::pad_items); a ragged field gets one entry per item. The op itself is
// unchanged; this op runs it. The planner gathers every mapped op of one list, in chain
// order, into one ForEachItemOp at the place of the last of them, which for each item:
//   - puts the item's encoded bytes in the list's source slot,
//   - points each fixed field row the inner ops write at the item's place: a row
//     appended to the sample's items (kItems), or the item's part of the sample's
//     padded row,
//   - gives them a random stream per item (the item's position keys it), and a nested
//     scratch arena, so that they never overwrite an image the rest of the chain holds;
// then zero-fills the padded rows of the items the sample lacks and writes the sample's
// item count into `<list>_count`.
//
// Running a list's ops item by item (rather than each op over every item) keeps one
// item's intermediate images in scratch at a time. It is sound because what a mapped op
// writes is an item of its list, which only mapped ops of the same list can read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/ops/op.h"

namespace headrace {

class ForEachItemOp final : public Op {
 public:
  // A fixed batch field the inner ops write: its row index, the bytes of one item, and
  // whether the sample's row holds max_items of them (padded) or each item is appended
  // to the batch's items (FieldLayout::kItems).
  struct ItemField {
    int row = 0;
    size_t item_bytes = 0;
    bool padded = false;
  };
  struct Options {
    std::string list;      // the source field's name ("views"), for names and messages
    int source_field = 0;  // its index (MediaRef::field)
    int slot = -1;         // the value slot its items are read from
    int max_items = 0;
    std::vector<ItemField> fields;
    int count_row = -1;  // the `<list>_count` i64 field, -1 if none
  };

  ForEachItemOp(Options options, std::vector<std::unique_ptr<Op>> ops);

  // "views[*]: image.decode, image.resize, image.normalize"
  std::string_view name() const override { return name_; }
  Status Run(SampleContext& ctx) const override;
  // The size pass over the items: each item's ops' Predict in turn, so that a sample's
  // patches are reserved as the total of its images' (ReserveRows), not grown image by
  // image; false as soon as one cannot tell.
  bool Predict(SizePass& pass) const override;
  Telling Tells() const override {
    for (const auto& op : ops_) {
      if (op->Tells() == Telling::kNothing) return Telling::kNothing;
    }
    return Telling::kRows;
  }

  const std::vector<std::unique_ptr<Op>>& ops() const { return ops_; }

 private:
  Options options_;
  std::vector<std::unique_ptr<Op>> ops_;
  std::string name_;
  int num_rows_ = 0;  // rows to copy for the per-item view: the largest row index + 1
};

}  // namespace headrace
