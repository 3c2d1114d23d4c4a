// PreparedPipeline: a spec with its source opened and its chain planned, built once.
//
//   auto prepared = PreparedPipeline::Make(spec);    // validates, opens, plans, sizes
//   auto loader = (*prepared)->Run(options);         // a run: from (epoch, batch), a rank
//   ... later, from anywhere else in the run:  (*prepared)->Run(other_options)
//
// What is built once: the opened Source (its index: a manifest's records or lines, the
// shard sidecars, the Parquet footers; its block or row-group cache), the operators (the
// tokenizer model, Tesseract, Python callables) and the batch layout, and the budget
// split. A run (Loader) is the per-run state: an engine, its threads and batch memory,
// the consumer's clock. So a reposition (a resume, set_epoch, a new `for` after a
// `break`, a Ray worker's restart of its stream) reads no index and loads no model.
//
// Threads: Make on any thread. Afterwards the object is immutable; Run may be called
// from any thread, and several runs of one prepared pipeline may run at once (they share
// the source's cache and the operators, which are const and thread-safe). Every Loader
// keeps the prepared pipeline alive.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "headrace/core/clock.h"
#include "headrace/exec/batch_formers.h"
#include "headrace/exec/engine.h"
#include "headrace/exec/run_budget.h"
#include "headrace/exec/size_index.h"
#include "headrace/formats/source.h"
#include "headrace/pipeline/spec.h"

namespace headrace {

class Loader;
struct LoaderOptions;
class PreparedPipeline;

// A run's error budgets as `spec` sets them: errors.* and each source.mix entry's
// max_error_rate (exec/run_budget.h). The engine's delivery counts them; a Ray rank builds
// its RunBudget from them (python/headrace/ray).
RunBudgetOptions RunBudgetOptionsOf(const PipelineSpec& spec);

// What changes a sample's sizes in `spec` (its source, its ops, the token field, the
// contents of the local tokenizer files its ops name): a size index built for another
// fingerprint is not used (exec/size_index.h).
std::string SizeFingerprint(const PipelineSpec& spec);

// What `headrace index sizes` and headrace.build_size_index build from
// (pipeline/size_indexing.cc): `spec`'s pipeline prepared without batch.balance (its index
// may not exist yet) and the fingerprint its index is checked against.
struct SizeIndexing {
  std::shared_ptr<const PreparedPipeline> prepared;
  std::string fingerprint;
  int64_t samples = 0;  // the source's
  // The index of samples [begin, end) (end < 0: to the last) sized on `threads` threads,
  // each image's first `header_bytes` read first (0: whole objects; SizeEverySample);
  // consecutive ranges join (SizeIndex::Join) into the whole index, byte for byte.
  Result<SizeIndex> Build(int threads, int64_t begin = 0, int64_t end = -1,
                          int64_t header_bytes = kIndexHeaderBytes) const;
};
Result<SizeIndexing> PrepareSizeIndexing(PipelineSpec spec, std::shared_ptr<Storage> storage = nullptr);

class PreparedPipeline : public std::enable_shared_from_this<PreparedPipeline> {
 public:
  // Validates `spec` (config errors name the key), opens its source through `storage`
  // (null: OpenStorage(spec.storage): local, s3://, http(s)://), plans the chain and
  // checks that a batch fits the memory budget.
  static Result<std::shared_ptr<const PreparedPipeline>> Make(
      const PipelineSpec& spec, std::shared_ptr<Storage> storage = nullptr);

  // Starts a run (see LoaderOptions; its `storage` is not used: the source's is).
  // `started` is when the consumer began waiting for it (its cold start counts from
  // there; Loader::Make passes the time before Make).
  Result<std::unique_ptr<Loader>> Run(const LoaderOptions& options,
                                      Clock::time_point started = Clock::now()) const;

  // How a run of `options` forms its batches (exec/batch_formers.h), and the engine's
  // options with the start as its former moved it (engine.former not set): what Run starts
  // the engine with. A Ray rank forms the batches its workers computed with the same
  // former, fed from Python (python/src/former.cc).
  struct Forming {
    std::shared_ptr<BatchFormer> former;
    EngineOptions engine;
  };
  Result<Forming> Form(const LoaderOptions& options) const;

  // A blend (source.mix): each entry's picks in the first `positions` positions of
  // `epoch`'s order (of its rest, for a run that is `remainder`; with the picks
  // `blend_start` made before it) — what a state dict saves so that a resume with other
  // weights continues every entry where it was. Empty for any other source.
  Result<std::vector<int64_t>> BlendPicks(int64_t epoch, int64_t positions,
                                          const std::optional<EpochRemainder>& remainder,
                                          const std::vector<int64_t>& blend_start) const;

  // The run-wide order one rank of one would follow (rank 0 of world size 1, unbounded
  // epochs): that of the rest of an epoch for `remainder`, after the picks `blend_start`
  // made before it. Its batches_per_epoch() is what its Ray workers compute
  // (python/headrace/ray).
  Result<EpochOrder> RunWideOrder(const std::optional<EpochRemainder>& remainder,
                                  const std::vector<int64_t>& blend_start) const;
  // The order of the first of `world_size` ranks over the run's epochs (or the rest of an
  // epoch, for `remainder`), checked as a local run's is: its batches_per_epoch() over all
  // ranks, and every rank's share (batches_per_rank_epoch(), total_batches(): RankShareOf).
  // What a Ray rank resuming the rest of an epoch deals itself.
  Result<EpochOrder> RankOrder(int world_size, const std::optional<EpochRemainder>& remainder,
                               const std::vector<int64_t>& blend_start) const;

  const PipelineSpec& spec() const { return spec_; }
  const Source& source() const { return *inputs_->source; }
  // The batch fields the chain writes, in order (the engine adds "index").
  const std::vector<FieldSpec>& fields() const { return inputs_->fields; }
  // The source and the planned chain, as the engine runs them.
  const std::shared_ptr<const EngineInputs>& inputs() const { return inputs_; }
  // The base storage the source reads through (before its own cache).
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  int cpu_threads() const { return cpu_threads_; }
  int io_inflight() const { return io_inflight_; }
  int64_t io_budget_bytes() const { return io_budget_bytes_; }
  int64_t batch_budget_bytes() const { return batch_budget_bytes_; }
  // batch.pack as the packer runs it (the sequence's pad id, ignore_index and vision
  // token ids from the op that writes it); nullopt without packing.
  const std::optional<PackOptions>& pack() const { return pack_; }
  // The unpadded token sequences the chain writes (PipelinePlan::sequences): what packing
  // pads them with, kept by a materialization.
  const std::vector<TokenSequence>& sequences() const { return sequences_; }

 private:
  PreparedPipeline() = default;
  // The order of this pipeline's runs (its source's shards or blend, the spec's batch,
  // shuffle, seed and epochs) for rank 0 of 1, over `remainder` and after `blend_start`.
  Result<EpochOrderOptions> OrderOptions(const std::optional<EpochRemainder>& remainder,
                                         const std::vector<int64_t>& blend_start) const;
  // The engine's options for a run of `options` over `order` (its former not yet made).
  EngineOptions EngineOptionsFor(const LoaderOptions& options, EpochOrderOptions order) const;

  PipelineSpec spec_;
  std::shared_ptr<Storage> storage_;
  std::shared_ptr<const EngineInputs> inputs_;  // the source and the planned chain
  int cpu_threads_ = 1;
  int io_inflight_ = 1;
  int64_t io_budget_bytes_ = 0;
  int64_t batch_budget_bytes_ = 0;
  std::optional<PackOptions> pack_;
  std::optional<BalanceOptions> balance_;  // batch.balance, its index read and checked
  std::shared_ptr<const SizeIndex> sizes_;  // batch.balance.index or batch.pack.index
  std::vector<TokenSequence> sequences_;
};

}  // namespace headrace
