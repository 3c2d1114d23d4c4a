#include "headrace/exec/batch_formers.h"

namespace headrace {

// The policies, each in its own file, in the order they are tried.
Result<std::shared_ptr<BatchFormer>> MakePlannedPackFormer(FormingRun& run);  // planned_pack_former.cc
Result<std::shared_ptr<BatchFormer>> MakePackFormer(FormingRun& run);         // pack_former.cc
Result<std::shared_ptr<BatchFormer>> MakePlainFormer(FormingRun& run);        // plain_former.cc

namespace {
constexpr MakeFormer kFormers[] = {
    &MakePlannedPackFormer,
    &MakePackFormer,
    &MakePlainFormer,
};
}  // namespace

Result<std::shared_ptr<BatchFormer>> MakeBatchFormer(FormingRun& run) {
  for (MakeFormer make : kFormers) {
    HR_ASSIGN_OR_RETURN(std::shared_ptr<BatchFormer> former, make(run));
    if (former != nullptr) return former;
  }
  return Status::Internal("no batch-forming policy took the run");
}

}  // namespace headrace
