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
#include "headrace/io/storage.h"
#include "headrace/pipeline/spec.h"

namespace headrace {

struct PipelinePlan {
  std::vector<std::unique_ptr<Op>> ops;
  std::vector<FieldSpec> fields;  // the batch layout, without the engine's "index"
  // Per field, for messages: the key, with its value, that sets the field's size
  // ("ops[2].image.center_crop.size 224", "ops[4].text.tokenize.max_length 128").
  std::vector<std::string> field_sources;
  std::vector<std::unique_ptr<BatchOp>> batch_ops;
  // Per-sample strings for Batch::strings: the id, then the source's text fields.
  std::vector<EngineInputs::StringField> strings;
  bool reads_media = false;  // the chain starts with image.decode
};

// Builds the operators and the batch layout. Files an operator needs (the tokenizer
// model) are read through `storage`, so they may live wherever the data does: a local
// path (relative to the current directory), s3:// or http(s)://. Fails with
// kInvalidArgument, naming the op, when the chain cannot produce fixed-size batches or
// such a file does not exist; a file that cannot be read for another reason keeps its
// Status code (kIoError, ...), with the op, key and URI in the message.
Result<PipelinePlan> PlanPipeline(const PipelineSpec& spec, Storage& storage);

// Checks that one full batch (spec.batch.size rows of every field, plus the engine's
// int64 index) fits `batch_budget_bytes`, what memory.budget_bytes leaves for batches
// after execution.io_budget_bytes. Every product (height × width × channels × dtype ×
// batch) is checked for overflow. Fails with kInvalidArgument naming the key whose
// fields take the most bytes, its value, the batch's bytes and the budget.
Status CheckBatchFitsBudget(const PipelineSpec& spec, const PipelinePlan& plan,
                            int64_t batch_budget_bytes);

// The name of an op spec as written in configs ("image.resize").
std::string OpSpecName(const OpSpec& op);

}  // namespace headrace
