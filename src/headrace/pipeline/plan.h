// Planning: from a validated PipelineSpec to the operator chain and batch layout the
// engine runs.
//
// The planner is where specs become operators (one line per operator kind), where the
// image geometry is followed through the chain so that batch shapes are known before
// any work starts, and where cross-operator decisions are made: the decoder is told
// the smallest size the next resize needs, so that it can scale in the DCT domain.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "headrace/exec/engine.h"
#include "headrace/pipeline/spec.h"

namespace headrace {

struct PipelinePlan {
  std::vector<std::unique_ptr<Op>> ops;
  std::vector<FieldSpec> fields;  // the batch layout, without the engine's "index"
  std::vector<std::unique_ptr<BatchOp>> batch_ops;
  bool reads_media = false;       // the chain starts with image.decode
};

// Builds the operators (loading the tokenizer model) and the batch layout. Fails with
// kInvalidArgument, naming the op, when the chain cannot produce fixed-size batches.
Result<PipelinePlan> PlanPipeline(const PipelineSpec& spec);

// The name of an op spec as written in configs ("image.resize").
std::string OpSpecName(const OpSpec& op);

}  // namespace headrace
