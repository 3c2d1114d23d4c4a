#include "headrace/ops/absent_fields.h"

#include <cstring>

namespace headrace {

AbsentFieldsOp::AbsentFieldsOp(Options options) : options_(std::move(options)) {
  name_ = "absent:";
  for (size_t i = 0; i < options_.names.size(); ++i) {
    name_ += (i == 0 ? " " : ", ") + options_.names[i];
  }
}

Status AbsentFieldsOp::Run(SampleContext& ctx) const {
  for (const auto& [row, bytes] : options_.zero) {
    std::memset(ctx.rows[row], 0, bytes);
  }
  for (int row : options_.empty) {
    HR_RETURN_IF_ERROR(ctx.AppendRows(row, 0).status());
  }
  return Status::Ok();
}

}  // namespace headrace
