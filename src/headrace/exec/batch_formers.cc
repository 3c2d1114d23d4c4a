#include "headrace/exec/batch_formers.h"

#include <algorithm>
#include <span>

namespace headrace {

// The policies, each in its own file, in the order they are tried.
Result<std::shared_ptr<BatchFormer>> MakeBalancedFormer(FormingRun& run);     // balanced_former.cc
Result<std::shared_ptr<BatchFormer>> MakePlannedPackFormer(FormingRun& run);  // planned_pack_former.cc
Result<std::shared_ptr<BatchFormer>> MakePackFormer(FormingRun& run);         // pack_former.cc
Result<std::shared_ptr<BatchFormer>> MakePlainFormer(FormingRun& run);        // plain_former.cc

namespace {
constexpr MakeFormer kFormers[] = {
    &MakeBalancedFormer,
    &MakePlannedPackFormer,
    &MakePackFormer,
    &MakePlainFormer,
};

Result<std::shared_ptr<BatchFormer>> MakeFormerFrom(std::span<const MakeFormer> policies,
                                                    FormingRun& run) {
  for (MakeFormer make : policies) {
    HR_ASSIGN_OR_RETURN(std::shared_ptr<BatchFormer> former, make(run));
    if (former != nullptr) return former;
  }
  return Status::Internal("no batch-forming policy took the run");
}

}  // namespace

Result<std::shared_ptr<BatchFormer>> MakeBatchFormer(FormingRun& run) {
  return MakeFormerFrom(kFormers, run);
}

Result<std::shared_ptr<BatchFormer>> MakeFormerAfter(MakeFormer policy, FormingRun& run) {
  const std::span<const MakeFormer> all(kFormers);
  const auto at = std::find(all.begin(), all.end(), policy);
  return MakeFormerFrom(at == all.end() ? all : all.subspan(at - all.begin() + 1), run);
}

}  // namespace headrace
