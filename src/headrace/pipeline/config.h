// YAML pipeline configs: the file format of a PipelineSpec.
//
//   source: {manifest: data/sample/manifest.jsonl}
//   batch: {size: 32}
//   ops:
//     - image.decode
//     - image.resize: {shorter_side: 256}
//     - image.center_crop: {size: 224}
//     - image.normalize: {dtype: bf16}
//     - text.tokenize: {model: data/sample/tokenizer.model, max_length: 128}
//
// Keys are the field names of spec.h; every key is optional except source.manifest (and
// text.tokenize's model), missing keys keep spec.h's defaults. Each op is a one-key map
// `{op.name: {params}}` or just `op.name`. Sizes in bytes (memory.budget_bytes,
// execution.io_budget_bytes) take an integer or a string with a unit: B, KB/MB/GB/TB
// (powers of 1000), KiB/MiB/GiB/TiB (powers of 1024), e.g. "1GiB", "512 MB", "1.5GiB".
// Paths are kept as written (relative to the current directory).
//
// Every error is kInvalidArgument naming the full dotted key
// (`ops[2].image.resize.shorter_side`, `batch.size`), what is wrong, and the allowed keys,
// op names or values; with the YAML line when the key came from the file, or the
// override that set it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/exec/step_cost.h"
#include "headrace/pipeline/spec.h"

namespace headrace {

// The largest config file LoadPipelineConfig reads.
inline constexpr int64_t kMaxConfigBytes = int64_t{16} << 20;

// Reads the YAML file at `path`, applies `overrides`, parses and validates. Fails with
// kNotFound when there is no such file, kInvalidArgument when `path` is not a regular
// file (a directory, a FIFO, /dev/zero) or is larger than kMaxConfigBytes, kIoError
// when it cannot be read; other errors are prefixed with `path`.
Result<PipelineSpec> LoadPipelineConfig(const std::string& path,
                                        const std::vector<std::string>& overrides = {});

// The same from YAML text.
//
// An override is "key.path=value" (what `--set` takes): the key is a dotted path,
// indexing the op list as `ops.1` or `ops[1]` followed by the op's name
// ("ops.1.image.resize.shorter_side=320"); the value is parsed as a YAML node, so
// flow lists and maps work ("ops.4.image.normalize.mean=[0.5,0.5,0.5]"). Overrides are
// applied in order to the YAML tree before it is parsed, so an unknown key fails exactly
// as in the file. `ops.N=...` replaces op N whole, or appends when N is the list's size.
Result<PipelineSpec> ParsePipelineConfig(std::string_view yaml_text,
                                         const std::vector<std::string>& overrides = {});

// Checks every value range and the op chain (CheckOpChain, plan.h: each op's own
// Validate for its parameters, each op reads a value that exists with the kind it
// needs, batch field names are unique). For specs built in C++ or Python too;
// LoadPipelineConfig and ParsePipelineConfig call it.
Status ValidatePipelineSpec(const PipelineSpec& spec);

// batch.balance's cost as a run computes it (exec/step_cost.h); kInvalidArgument naming
// the key for a cost that is none, or dimensions it cannot take.
Result<StepCostOptions> StepCostOptionsOf(const BalanceSpec& balance);
// batch.balance.every_rank as ModalityBit's (exec/step_cost.h); kInvalidArgument naming the
// key for a name that is not a kind of media.
Result<uint32_t> EveryRankOf(const BalanceSpec& balance);

// One op's entry as a config writes it (`name` and its params, a YAML map or null),
// parsed alone: kInvalidArgument as the config's, keys named `name.key`
// ("image.resize.shorter_sid: unknown key (allowed for image.resize: ...)"). Values are
// not validated (ValidatePipelineSpec does, with the op's place in the chain). For the
// Python builders.
Result<OpSpec> ParseOpConfig(std::string_view name, std::string_view params_yaml);

// Canonical YAML of the whole effective spec: every key in a fixed order, defaults
// filled in, sizes in plain bytes, numbers written so that they read back exactly.
// ParsePipelineConfig(PipelineSpecToYaml(s)) gives a spec equal to s, and equal specs
// give identical text (for --print-config and fingerprints).
std::string PipelineSpecToYaml(const PipelineSpec& spec);

// Parses a byte size: "1073741824", "1GiB", "512 MB", "1.5GiB". The error does not name
// a key; the caller adds it.
Result<int64_t> ParseByteSize(std::string_view text);

}  // namespace headrace
