// AbsentFieldsOp: a sample's rows of the batch fields its chain does not write.
//
// A blend whose entries have ops of their own (source.mix[i].ops) fills one batch layout
// from several chains (pipeline/plan.h): an image entry writes pixel_values and
// image_grid_thw, a video entry pixel_values_videos and video_grid_thw, and a batch may
// hold samples of both. Each sample must still have a row of every field, and one that
// says "none": the planner puts this op first in each entry's chain, for the fields only
// other entries write. It writes
//   - zeros into the sample's row of each such fixed field (a list's `<list>_count`
//     among them: no items),
//   - one empty entry into each such ragged field with one entry per sample (a token
//     sequence: its `<field>_lengths` then says 0),
// and nothing into a list's concatenated fields (their count, zeroed, says no items).
// First, so that the shared ops after it (text.tokenize reading a grid field back) see
// the sample as the batch will hold it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/ops/op.h"

namespace headrace {

class AbsentFieldsOp final : public Op {
 public:
  struct Options {
    std::vector<std::pair<int, size_t>> zero;  // fixed fields: row, bytes of a sample's row
    std::vector<int> empty;                    // ragged per-sample fields: row
    std::vector<std::string> names;            // every field it stands in for, for name()
  };

  explicit AbsentFieldsOp(Options options);

  // "absent: pixel_values_videos, video_grid_thw, video_count"
  std::string_view name() const override { return name_; }
  Status Run(SampleContext& ctx) const override;

 private:
  Options options_;
  std::string name_;
};

}  // namespace headrace
