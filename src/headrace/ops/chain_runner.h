// The per-sample chain runner: the one place that turns a sample into a context and runs
// the operators over it, shared by the engine's chain stage, `headrace bench ops` and the
// op conformance battery, so that none of them can drift from the others.
//
//   ChainRunner runner(ops, source_values, num_values, seed);   // once per plan
//   runner.Run(sample, rows, ragged, scratch, values, on_op);   // per sample, any thread
//
// Determinism: a sample's randomness is rooted in SampleSeed(seed, epoch, index) and a
// batch op's in BatchSeed(seed, epoch, index in epoch, position): which thread or process
// runs them changes nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "headrace/core/clock.h"
#include "headrace/core/rng.h"
#include "headrace/ops/op.h"
#include "headrace/ops/value.h"

namespace headrace {

// The root of every random choice the chain makes for sample `index` of `epoch`.
constexpr uint64_t SampleSeed(uint64_t seed, int64_t epoch, int64_t index) {
  return HashKeys(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
}
// The root of batch op `position`'s random choices on batch `index_in_epoch` of `epoch`.
constexpr uint64_t BatchSeed(uint64_t seed, int64_t epoch, int64_t index_in_epoch,
                             size_t position) {
  return HashKeys(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index_in_epoch),
                  position);
}

// A per-sample chain as the planner makes it (pipeline/plan.h): its ops, in order, and the
// value slots they use, the source's among them. One serves every sample; a blend whose
// entries have ops of their own has one per entry (Source::EntryOf picks it), each named
// by its entry.
struct OpChain {
  std::string entry;  // the blend entry whose samples it runs ("": every sample)
  std::vector<std::unique_ptr<Op>> ops;
  std::vector<SourceValue> source_values;
  int num_values = 0;
};

class ChainRunner {
 public:
  // A view of `chain`, which lives as long as the runner (the plan's).
  ChainRunner(const OpChain& chain, uint64_t seed)
      : ChainRunner(chain.ops, chain.source_values, chain.num_values, seed) {}
  // Views: the ops and source values live as long as the runner (the plan's).
  ChainRunner(std::span<const std::unique_ptr<Op>> ops, std::span<const SourceValue> sources,
              int num_values, uint64_t seed)
      : ops_(ops), sources_(sources), num_values_(num_values), seed_(seed) {}

  size_t size() const { return ops_.size(); }
  const Op& op(size_t i) const { return *ops_[i]; }

  // Each op's PlanReads for `sample` (its values in place, some media as readers), ahead
  // of Run, with the calling thread's value slots (`values`, sized here).
  void PlanReads(const Sample& sample, std::vector<Value>& values) const {
    SampleContext ctx;
    ctx.sample = &sample;
    ctx.sample_seed = SampleSeed(seed_, sample.epoch, sample.index);
    values.resize(static_cast<size_t>(num_values_));
    FillSourceValues(sources_, sample, values);
    ctx.values = values;
    for (const std::unique_ptr<Op>& op : ops_) op->PlanReads(ctx);
  }

  // Runs the chain on `sample` (its values in place: Source::Fill), writing the batch
  // rows at `rows` and the concatenated fields' rows into `ragged` (null when there are
  // none), with the calling thread's `scratch` and value slots (`values`, sized
  // here), after the size pass (ReserveRows: the rows the ops can tell, reserved at their
  // size). Stops at the first op that fails and returns its status. After each op,
  // on_op(i, start, end, ctx) (the op's position, its clock times, and the context, whose
  // gil_wait_ns the op set) for timing. Allocates nothing in the steady state.
  template <typename OnOp>
  Status Run(const Sample& sample, uint8_t* const* rows, RaggedRows* ragged,
             ScratchArena& scratch, std::vector<Value>& values, OnOp&& on_op) const {
    SampleContext ctx;
    ctx.sample = &sample;
    ctx.sample_seed = SampleSeed(seed_, sample.epoch, sample.index);
    ctx.scratch = &scratch;
    ctx.rows = rows;
    ctx.ragged = ragged;
    values.resize(static_cast<size_t>(num_values_));
    FillSourceValues(sources_, sample, values);
    ctx.values = values;
    // The size pass: a sample whose told rows are more than a batch may hold fails here,
    // before anything is decoded.
    HR_RETURN_IF_ERROR(ReserveRows(ops_, ctx));
    for (size_t i = 0; i < ops_.size(); ++i) {
      const auto start = Clock::now();
      ctx.gil_wait_ns = -1;
      ctx.frames_decoded = -1;
      ctx.frames_taken = 0;
      Status status = ops_[i]->Run(ctx);
      on_op(i, start, Clock::now(), ctx);
      if (!status.ok()) return status;
    }
    return Status::Ok();
  }

 private:
  std::span<const std::unique_ptr<Op>> ops_;
  std::span<const SourceValue> sources_;
  int num_values_ = 0;
  uint64_t seed_ = 0;
};

}  // namespace headrace
