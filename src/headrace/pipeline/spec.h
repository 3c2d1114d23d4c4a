// The user-facing description of a pipeline: source -> operators -> batch -> prefetch.
//
// A PipelineSpec is plain data. It is built from C++ (fill the structs), from YAML
// (config.h), or from Python, then validated and planned (plan.h) before any work
// starts. Defaults here are the documented defaults of every key.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "headrace/core/tensor.h"
#include "headrace/exec/engine.h"
#include "headrace/exec/packer.h"
#include "headrace/formats/source_spec.h"
#include "headrace/io/storage_spec.h"
#include "headrace/ops/all_ops.h"

namespace headrace {

// --- source: SourceSpec lives beside the manifest reader, in formats/source_spec.h --

// --- operators: their specs live beside them, listed in ops/all_ops.h --------------

// Where a user op stands in the plan, for its factory.
struct UserOpBinding {
  int first_row = 0;  // the row index of fields[0] (SampleContext::rows); the rest follow
  int position = 0;   // its place in the chain (SampleContext::OpRng)
  // The image values that exist where the op stands: name and slot (SampleContext::values).
  std::vector<std::pair<std::string, int>> images;
};

// An operator supplied as code (a Python function, through the bindings) rather than
// by name: it reads the sample, and the images the chain holds where it stands, and
// writes `fields` (appended to the batch layout where the op stands). It never changes
// a value. It cannot come from YAML: PipelineSpecToYaml writes it as a placeholder
// `user: {name: ...}`, which the parser refuses. Keep it the last alternative.
struct UserOpSpec {
  std::string name;               // shown in reports and errors, e.g. "python.map(fn)"
  std::vector<FieldSpec> fields;  // the batch fields it writes, in order
  // Builds the op; called once per plan, before any work starts.
  std::function<Result<std::unique_ptr<Op>>(const UserOpBinding&)> make;
};

// A per-batch step built in code (a Python function over the whole batch, say); like
// UserOpSpec it has no YAML form.
struct BatchOpSpec {
  std::string name;
  std::function<Result<std::unique_ptr<BatchOp>>()> make;
};

// Every op of ops/all_ops.h by its spec, then the code op.
using OpSpec = AllOps::SpecVariant<UserOpSpec>;

// The name of an op as configs, reports and errors write it ("image.resize"); a user
// op's own name ("python.map(fn)").
std::string_view OpSpecName(const OpSpec& op);

// --- the rest -----------------------------------------------------------------------

// Packing: several samples per row of seq_len tokens (exec/packer.h has the rule, the
// layout and what window trades).
struct PackSpec {
  int64_t seq_len = 0;  // 0: no packing
  int64_t window = 0;   // samples carried from one batch to the next, at most
  PackOverflow overflow = PackOverflow::kTruncate;  // a sample longer than seq_len
  std::string field = "input_ids";  // the token sequence (text.tokenize {pad: false})
  int64_t pad_id = -1;  // what a row's padding holds; -1: the tokenizer's pad id
  // A size index (`headrace index sizes CONFIG`, exec/size_index.h) a planned pack plans
  // its rows by instead of sizing each sample as it comes; the same file as
  // batch.balance.index where both are given. "": sized as they come.
  std::string index;
  bool enabled() const { return seq_len > 0; }
};

// batch.balance: each data-parallel step's samples dealt over the ranks by what they cost
// the step, so that no rank waits at the step's barrier for a costlier one
// (exec/step_cost.h, exec/step_deal.h, docs/balanced_steps.md). `cost`: empty (off),
// "tokens", "flops" (the model dimensions below, all given), or a model preset
// ("qwen2_vl", "qwen2_5_vl", "qwen3_vl": its 7B/8B model) whose dimensions those given
// here (> 0) replace. `index`: a size index (`headrace index sizes CONFIG`,
// exec/size_index.h) the steps are dealt by, built for this pipeline (else the run is
// refused, saying what to run); "": each step sized by the size pass as it is dealt.
// `every_rank`: kinds of media ("image", "video", "audio", "pointcloud"; several: "image,
// video") every rank's share of a step holds whenever the step holds one per rank (a
// ZeRO-3/FSDP vision tower's collectives need every rank to run it).
struct BalanceSpec {
  std::string cost;
  std::string index;
  std::string every_rank;
  double llm_params = 0;
  int64_t llm_layers = 0;
  int64_t llm_hidden = 0;
  double vision_params = 0;
  int64_t vision_layers = 0;
  int64_t vision_hidden = 0;
  int64_t vision_window = 0;
  int64_t vision_full_layers = 0;
  bool enabled() const { return !cost.empty(); }
};

struct BatchSpec {
  int64_t size = 32;
  bool drop_last = false;  // drop an epoch's final partial batch
  PackSpec pack{};
  // > 0: batches formed by a token budget: each of at most max_tokens tokens (text and
  // vision: input_ids holds both), unpadded, from the samples `size` at a time read
  // (exec/packer.h, options.budget; pack.window, pack.overflow and pack.field apply).
  int64_t max_tokens = 0;
  BalanceSpec balance{};
  // Whether the packer regroups the samples (batch.pack or batch.max_tokens).
  bool regroups() const { return pack.enabled() || max_tokens > 0; }
  // batch.pack or batch.max_tokens as the packer takes them (the sequence's pads and
  // vision ids are the plan's: PreparedPipeline fills them in).
  PackOptions pack_options() const {
    PackOptions o;
    o.budget = max_tokens > 0;
    o.seq_len = o.budget ? max_tokens : pack.seq_len;
    o.window = pack.window;
    o.overflow = pack.overflow;
    o.token_field = pack.field;
    if (pack.pad_id >= 0) o.pad_id = pack.pad_id;
    return o;
  }
};

struct ExecutionSpec {
  int cpu_threads = 0;  // 0: one per core
  int io_threads = 0;   // 0: automatic (local files: 2)
  // Reads in flight at once; 0: automatic, max(32, 16 × cpu_threads) (ResolveIoInflight,
  // loader.h). Why: reads in flight needed ≈ objects/s × latency, and objects/s needed ≈
  // cpu_threads × samples/s per thread. Measured (bench/RESULTS.md, issue 3): the example
  // pipeline decodes ~255 samples/s per thread (510.8 on 2), so at object storage's ~20 ms
  // first byte each thread needs ~5 reads in flight, and 16 leave room for ~3× that
  // latency or a pipeline 3× cheaper per sample. One I/O thread sustained 0.95 × in-flight
  // / latency at 1 to 128 in flight (bench/io.json: 48, 380, 1,520, 6,152 objects/s), so
  // more in flight costs a connection each, not throughput. A fixed 32 (1,520 objects/s
  // at 20 ms) would cap a 16-thread machine (~4,100 samples/s needed) at a third of it.
  int io_inflight = 0;
  // Bytes of encoded media fetched but not yet decoded; 0: automatic (1/8 of the budget).
  int64_t io_budget_bytes = 0;
};

struct PrefetchSpec {
  int depth = 4;  // batches produced or in production ahead of the consumer
};

struct MemorySpec {
  // Bytes the pipeline may hold in queues: fetched media plus batches in flight.
  int64_t budget_bytes = int64_t{1} << 30;
  // Scratch memory for intermediate images each CPU thread keeps between samples, on
  // top of budget_bytes. A sample that needs more (a huge image, up to image.decode's
  // max_pixels × 4 bytes) gets it and gives it back when it ends. The run report shows
  // what was held (memory.scratch_*). 32 MiB covers two 2560×1440 RGBX images.
  int64_t scratch_bytes_per_thread = int64_t{32} << 20;
  // What one CPU thread's decoder may hold while it decodes one sample, also on top of
  // budget_bytes: a video decoder's frames, an audio file's decoded samples, a point
  // cloud's decompressed bytes, the OCR engine's working images. A sample that needs
  // more fails (resource_exhausted) as soon as its header says so, before the decoder
  // allocates it. 0: automatic, budget_bytes / 4 (at least 16 MiB): DecodeBytesPerThread.
  int64_t decode_bytes_per_thread = 0;
};

// memory.decode_bytes_per_thread resolved.
inline int64_t DecodeBytesPerThread(const MemorySpec& m) {
  return m.decode_bytes_per_thread > 0 ? m.decode_bytes_per_thread
                                       : std::max<int64_t>(m.budget_bytes / 4, int64_t{16} << 20);
}

// What happens to a sample that fails.
enum class ErrorPolicy {
  kSkip,  // the batch is delivered without it (a shorter batch); counted and logged
};

// What happens to a shard or file of the source that cannot be read at all (a tar
// index that is not valid JSON or does not fit its shard, a Parquet footer whose
// lengths, offsets or row counts do not fit the file): formats/source.h, BadShard.
enum class BadShardPolicy {
  kSkip,  // the run goes on without it; it counts once as one error of kind shard_error
  kFail,  // the source fails to open, naming it (exit 1 before any batch)
};

struct ErrorSpec {
  ErrorPolicy policy = ErrorPolicy::kSkip;
  BadShardPolicy on_bad_shard = BadShardPolicy::kSkip;
  // The run fails once errors / samples attempted exceeds this (checked after at least
  // `min_samples` samples, so that one early error does not end a run).
  double max_error_rate = 0.05;
  int64_t min_samples = 100;
  int max_logged = 20;  // errors printed to stderr in full; the rest are only counted
};

struct TrainerSpec {   // the simulated trainer of `headrace run`
  double step_ms = 0;  // time the trainer spends on each batch
};

struct PipelineSpec {
  SourceSpec source;
  uint64_t seed = 0;
  // The run's length: `headrace run` runs this many epochs; a loader stops after them.
  // null: unbounded (a training loop decides when to stop; loaders only).
  std::optional<int64_t> epochs = 1;
  bool shuffle = true;
  BatchSpec batch;
  std::vector<OpSpec> ops;
  // A blend's entries' own ops (`source.mix[i].ops` in a config): mix_ops[i] runs on
  // entry i's samples before `ops`, which every entry shares (pipeline/plan.h says how
  // their batch fields join into one layout). Empty, or shorter than source.mix: the
  // entries past its end have none. Kept here, not in MixEntrySpec, because formats/
  // knows no ops.
  std::vector<std::vector<OpSpec>> mix_ops;
  std::vector<BatchOpSpec> batch_ops;  // after collation, in order
  ExecutionSpec execution;
  PrefetchSpec prefetch;
  MemorySpec memory;
  ErrorSpec errors;
  TrainerSpec trainer;
  StorageSpec storage;  // object storage (S3, HTTP); see io/storage_spec.h
};

}  // namespace headrace
