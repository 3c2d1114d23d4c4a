// plain: the engine's batches as they are, the former of every run that packs nothing
// (and of an on-demand engine's, whose consumer forms its own: a Ray rank).
#include "headrace/exec/batch_formers.h"

namespace headrace {
namespace {

class PlainFormer final : public BatchFormer {
 public:
  std::string_view name() const override { return "plain"; }
  Result<std::optional<Batch>> Next(BatchInput& input) override { return input.Next(); }
};

}  // namespace

Result<std::shared_ptr<BatchFormer>> MakePlainFormer(FormingRun&) {
  return std::shared_ptr<BatchFormer>(std::make_shared<PlainFormer>());
}

}  // namespace headrace
