// `headrace materialize`: runs a pipeline once and writes its preprocessed samples as
// tar shards that `source.materialized` reads back (layout: formats/materialized.h).
//
// Each copy is one pass over the dataset in index order (shuffle off, no sample dropped
// by batch.drop_last), so every sample is written once whatever the run's order; the
// reader puts the run's order back. A pipeline whose ops draw randomness (DrawsRandom,
// ops/op_plan.h: random crops, flips, augmentation) gives another sample every epoch:
// it is materialized per epoch (`epochs`, into epoch-K/) or refused. Samples the
// pipeline skips are listed in materialized.json with their status, so the reader fails
// them at the same places. The trainer's step time is not simulated.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/formats/materialized.h"
#include "headrace/pipeline/spec.h"

namespace headrace {

struct MaterializeOptions {
  PipelineSpec spec;   // validated (LoadPipelineConfig)
  std::string out_dir;  // a local folder (created); an upload to s3:// happens after
  // Epochs to write, each into epoch-K/; empty: one copy for every epoch, which needs a
  // pipeline without random ops.
  std::vector<int64_t> epochs;
  int64_t shard_bytes = 256LL << 20;  // a new shard before a sample would pass this
};

// The ops of `spec` that draw randomness, by key ("ops[3].image.flip").
std::vector<std::string> RandomOps(const PipelineSpec& spec);

// Writes the materialization into options.out_dir and returns what materialized.json
// says. kInvalidArgument when random ops need `epochs` (the message names them) or the
// spec is a materialization itself; the pipeline's own errors keep their codes (a
// configuration error kInvalidArgument/kNotFound, too many bad samples
// kResourceExhausted); kIoError when an output cannot be written.
Result<MaterializedInfo> Materialize(const MaterializeOptions& options);

}  // namespace headrace
