// Planning: from a validated PipelineSpec to the operator chain and batch layout the
// engine runs.
//
// The planner knows no operator by name. It walks the chain three times, through the
// description each operator type carries (ops/op_plan.h): Declare forward, checking
// that every value an op reads exists with the kind it asks for (and, for images, the
// shape known at that point), giving each value name a slot and each batch field a
// row; Hint backward (what later ops need of a value: image.resize tells image.decode
// its size, so that JPEGs scale in the DCT domain); Make forward, building the ops.
// The source's fields are the chain's first values (SourceFieldsOf, formats/source_spec.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "headrace/exec/engine.h"
#include "headrace/io/storage.h"
#include "headrace/ops/op_plan.h"
#include "headrace/pipeline/spec.h"

namespace headrace {

// A blend whose entries have ops of their own (source.mix[i].ops, PipelineSpec::mix_ops)
// has one chain per entry: the entry's ops, then the shared ones (spec.ops), planned
// over the entry's samples. Their batch fields join into one layout: a field several
// chains write must be the same in each (dtype, shape, layout: a configuration error
// naming both writers otherwise), and a sample has rows of the fields its chain does not
// write, which say "none" (ops/absent_fields.h: zeros for a fixed field, no rows for a
// ragged one). A shared op that reads back a field only other entries write (text.tokenize
// reading image_grid_thw on a video entry) reads it as the entry's samples have it, with
// no rows; a fixed one would read zeros as a value, so that is refused, with advice.
struct PipelinePlan {
  // The chain of every sample, or one per blend entry (in entry order) as above.
  std::vector<OpChain> chains;
  std::vector<FieldSpec> fields;  // the batch layout, without the engine's "index"
  // Per field, for messages: the key, with its value, that sets the field's size
  // ("ops[2].image.center_crop.size 224", "ops[4].text.tokenize.max_length 128").
  std::vector<std::string> field_sources;
  std::vector<std::unique_ptr<BatchOp>> batch_ops;
  // Per-sample strings for Batch::strings: the id, then the source's text fields.
  std::vector<EngineInputs::StringField> strings;
  bool reads_media = false;  // an op of some chain reads a media field of the source
  // Per source field: read in byte ranges by its op (EngineInputs::ranged_fields).
  std::vector<bool> ranged_fields;
  // The unpadded token sequences (text.tokenize {pad: false}): what packing pads.
  std::vector<TokenSequence> sequences;
};

// Builds the operators and the batch layout. Files an operator needs (the tokenizer
// model) are read through `storage`, so they may live wherever the data does: a local
// path (relative to the current directory), s3:// or http(s)://. Fails with
// kInvalidArgument, naming the op, when the chain does not check (CheckOpChain) or such
// a file does not exist; a file that cannot be read for another reason keeps its
// Status code (kIoError, ...), with the op, key and URI in the message.
Result<PipelinePlan> PlanPipeline(const PipelineSpec& spec, Storage& storage);

// The declaration pass alone, building nothing and reading no file: every op's
// parameters pass its Validate, every op reads
// values that exist with the kind (and, where it needs one, the fixed shape) it asks
// for, and batch field names are unique and not the engine's "index". kInvalidArgument
// naming the op's key ("ops[1].image.resize: reads 'image' as an image, but at this
// point 'image' is encoded bytes: add image.decode before it"). ValidatePipelineSpec
// runs it. PlanPipeline also requires that no op's output is dropped unread and that
// the chain writes a batch field (a config may be validated in parts).
Status CheckOpChain(const PipelineSpec& spec);

// Checks that one full batch (spec.batch.size rows of every field, plus the engine's
// int64 index) fits `batch_budget_bytes`, what memory.budget_bytes leaves for batches
// after execution.io_budget_bytes. Every product (height × width × channels × dtype ×
// batch) is checked for overflow. Fails with kInvalidArgument naming the key whose
// fields take the most bytes, its value, the batch's bytes and the budget.
Status CheckBatchFitsBudget(const PipelineSpec& spec, const PipelinePlan& plan,
                            int64_t batch_budget_bytes);

namespace internal {
// The three passes over `ops` from `state` (whose values are the chain's inputs),
// without the whole-chain checks of CheckOpChain: for the op conformance battery,
// which plans one op at a time. Appends the built ops to `built`.
Status PlanOps(const std::vector<OpSpec>& ops, PlanState& state,
               std::vector<std::unique_ptr<Op>>* built);
}  // namespace internal

}  // namespace headrace
