// The operator contract, at run time (the plan-time half is ops/op_plan.h).
//
// An operator is an immutable, thread-safe description of one per-sample step
// (`image.resize`, `text.tokenize`, ...). It owns no threads and no per-sample state:
// the executor runs a sample's whole operator chain on one thread, start to finish,
// passing a SampleContext that holds everything mutable. The same Op instance runs
// concurrently on every executor thread.
//
// An operator adapts pure kernel functions (declared beside it, e.g. ResizeInto) to the
// context. It reads and writes named values (ops/value.h) by the slot indices the
// planner gave it when it was made, so a sample's chain does no string lookups.
//
// Operators that produce a fixed batch field (image.normalize, text.tokenize) write
// straight into the sample's row of the batch buffer: `ctx.rows[field]` points at this
// sample's row of that field, sized as the planner declared. No per-sample tensor is
// copied into the batch afterwards. An operator that produces a ragged field (a `[?, D]`
// field: FieldLayout::kRagged, core/batch.h) sizes its output first and appends it with
// `ctx.AppendRows(field, n)`, writing where that points; the assemble stage concatenates
// the samples' rows (core/ragged_rows.h says why there).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <variant>

#include "headrace/core/batch.h"
#include "headrace/core/ragged_rows.h"
#include "headrace/core/rng.h"
#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/ops/image_view.h"
#include "headrace/ops/value.h"

namespace headrace {

// What a group of arenas (one engine's CPU threads) holds, kept current as they grow
// and shrink, so that its peak counts images held at the same time on different
// threads. Thread-safe.
class ScratchUsage {
 public:
  // Adds `delta` bytes (negative: freed) and raises the peak when it is passed.
  void Add(int64_t delta);
  int64_t held() const { return held_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> held_{0};
  std::atomic<int64_t> peak_{0};
};

// Reusable per-thread memory for intermediate images, so that a steady-state sample
// allocates nothing. Each slot grows to the largest request seen (plus a quarter, so
// slowly growing images do not reallocate each time) and is reused. One thread owns an
// arena; it is not thread-safe.
//
// What a sample needs it gets: a valid 9000x9000 PNG takes 324 MB in one slot, bounded
// only by image.decode's max_pixels. Trim between samples gives such memory back, so
// that one huge image does not pin it for the rest of the run (the executor trims to
// memory.scratch_bytes_per_thread after every sample).
class ScratchArena {
 public:
  static constexpr int kSlots = 4;
  ScratchArena() = default;
  ~ScratchArena();
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;

  // Counts this arena's bytes in `usage` from now on, as they change (moving them out
  // of the group counted before); null stops counting. `usage` must outlive the
  // arena or the next Account call.
  void Account(ScratchUsage* usage);
  // Memory for `bytes` bytes in slot `slot` (0 <= slot < kSlots), 64-byte aligned.
  // Valid until the next Get of the same slot or a Trim. Null only if allocation fails.
  uint8_t* Get(int slot, size_t bytes);
  // Total bytes held (the nested arena's included), for memory accounting.
  size_t capacity() const;
  // Frees slots (the nested arena's included), largest first, until at most
  // `retain_bytes` are held; returns the bytes freed. Between samples only: it
  // invalidates what Get returned for them.
  size_t Trim(size_t retain_bytes);
  // A second arena, counted with this one: for the ops that run over each item of a
  // list (ForEachItemOp) while the sample's other images stay in this arena's slots.
  ScratchArena& Nested();

 private:
  // Each slot's buffer, this arena's then the nested one's.
  template <typename F>
  void ForEachBuffer(F&& f);

  Buffer slots_[kSlots];
  ScratchUsage* usage_ = nullptr;
  std::unique_ptr<ScratchArena> nested_;
};

struct SampleContext {
  const Sample* sample = nullptr;
  // HashKeys(seed, epoch, sample.index): the root of this sample's randomness.
  uint64_t sample_seed = 0;
  ScratchArena* scratch = nullptr;
  // The sample's named values, indexed by the slots the planner assigned. The executor
  // fills the source's values (encoded media, the conversation) before the chain runs,
  // every other slot empty; an op replaces the values it writes. Views point into the
  // sample or into scratch, and are valid until the sample's chain ends.
  std::span<Value> values;
  // Which scratch slot the next image-producing op should write to; ops alternate so
  // that an op never writes over its own input.
  int next_scratch = 0;
  // Per batch field, the start of this sample's row in the batch buffer (null for the
  // concatenated fields: FieldSpec::concatenated()).
  uint8_t* const* rows = nullptr;
  // Where this sample's rows of the concatenated fields go; null when the batch has none.
  RaggedRows* ragged = nullptr;
  // An op that takes the Python GIL sets this to how long (ns) its Run waited for it
  // (python/src/user_op.cc: the time off the CPU inside the call); the executor resets
  // it to -1 before each op and reports it per op (OpMetrics::gil_wait_s), so that the
  // doctor tells GIL contention from CPU work.
  int64_t gil_wait_ns = -1;
  // An op that decodes video frames sets these to the frames its decoder produced for
  // the sample and the frames it took into the batch; the executor resets
  // frames_decoded to -1 before each op and sums both per op (OpMetrics::frames_decoded),
  // so that the report gives frames decoded per frame taken. -1: the op decodes none.
  int64_t frames_decoded = -1;
  int64_t frames_taken = 0;

  // The random stream of the op at `op_position` in the chain: independent of every
  // other op and sample, identical on every run and thread.
  Rng OpRng(int op_position) const { return Rng(HashKeys(sample_seed, op_position)); }
  // A writable image of the given size in the next scratch slot.
  Result<MutableImageView> NextScratchImage(int width, int height, int channels);
  // `bytes` bytes in the next scratch slot (64-byte aligned), for other kinds of values.
  Result<uint8_t*> NextScratchBytes(size_t bytes);
  // The value in `slot` if it holds a T (EncodedBytes, ImageView, ...), else null: the
  // sample has no such value, or (a bug) another kind.
  template <typename T>
  const T* Get(int slot) const {
    if (slot < 0 || static_cast<size_t>(slot) >= values.size()) return nullptr;
    return std::get_if<T>(&values[static_cast<size_t>(slot)]);
  }
  void Set(int slot, const Value& value) { values[static_cast<size_t>(slot)] = value; }
  // Appends `n` rows to the ragged batch field at `row` as one entry of its
  // `<field>_lengths` (one call per sample, or per item of a list): where to write n
  // values of the field's sample_shape. Valid until the next AppendRows to that field.
  Result<uint8_t*> AppendRows(int row, int64_t n) const {
    if (ragged == nullptr) return Status::Internal("AppendRows: the batch has no ragged field");
    return ragged->Append(row, n);
  }
};

// The size pass: what a sample's ops will append to its concatenated fields, told before
// any of them runs, so that those rows take one block of their size rather than growing
// image by image into whatever region they started in (ReserveRows, which ChainRunner
// runs before a sample's ops; ForEachItemOp tells a list's items in turn). Each op, in
// chain order, reads the sizes of the images the ops before it made and says what it
// makes; nothing is decoded or written.
struct SizePass {
  struct Size {
    int width = 0;
    int height = 0;
  };
  // The values as they are before the chain runs (encoded bytes).
  const SampleContext* ctx = nullptr;
  // By value slot: the size of the image an earlier op made there ({0, 0}: none).
  std::span<Size> images;
  // By batch field (row index): the rows appended to it so far.
  std::span<int64_t> rows;
  // By batch field (row index): the grids (t, h, w) appended to it so far, for the ops
  // that count tokens from them (vision.patchify tells its image_grid_thw, text.tokenize
  // reads them). Empty: not tracked.
  std::span<std::vector<int64_t>> grids;
  // Where an op that tells a token sequence (Telling::kRowsAndTokens) leaves what it
  // tokenized, for whoever sized the sample (a planned pack's sizer); null: nobody asks.
  ToldSequence* sequence = nullptr;
};

// What an op's size pass tells (Op::Tells).
enum class Telling { kNothing, kRows, kRowsAndTokens };

class Op {
 public:
  virtual ~Op() = default;
  // The name used in configs and reports, e.g. "image.resize".
  virtual std::string_view name() const = 0;
  // Runs on `ctx` for one sample. A non-ok status skips the sample (it is counted and
  // named by epoch, index and uri by the executor); it must not be a programming error.
  virtual Status Run(SampleContext& ctx) const = 0;
  // The size pass (SizePass): sets the sizes of the images Run would write and adds the
  // rows it would append, from the sizes before it, exactly as Run will. False when it
  // cannot tell without running (the default): the pass stops there, and what the ops
  // before it told is reserved, a lower bound (the rows of later ops grow as they are
  // appended). A sample Run would fail may be told anything.
  virtual bool Predict(SizePass& /*pass*/) const { return false; }
  // Whether Predict tells, for every sample that Run would not fail: nothing (the
  // default Predict, or one that tells only some layouts), its rows, or its rows and the
  // token sequence it appends (text.tokenize, into SizePass::sequence). A planned
  // batch.pack needs every op up to the one that tells tokens to tell
  // (exec/pack_planner.h).
  virtual Telling Tells() const { return Telling::kNothing; }
  // Before the sample runs, when a value it reads is an object read in ranges
  // (EncodedBytes::reader): starts the reads Run will make (MediaReader::Prefetch), so
  // that they travel while the CPU threads run the samples before it. Called on a CPU
  // thread ahead of the sample (ChainRunner::PlanReads), with the source values only:
  // no rows, no scratch. It may read what its reader already holds (the head, an MP4's
  // index); what it does not hold it waits for, as Run would. Run must not depend on it.
  virtual void PlanReads(const SampleContext& /*ctx*/) const {}
};

// The size pass over `ops` for the sample of `ctx` (its source values filled, none of the
// ops run yet): each op's Predict in turn up to the first that cannot tell, then the rows
// told for each concatenated field reserved in one block (RaggedRows::ReserveTold: a
// window of the batch tensor where the assemble stage lends one, else a block taken by
// best fit, Allocator::AllocateFinal). Does nothing when ctx.ragged is null. Fails the
// sample (kResourceExhausted) when its told rows take more than a batch may hold
// (RaggedRows::CheckTold); the reserve's own failures are not the sample's: an append
// that fails too says so.
Status ReserveRows(std::span<const std::unique_ptr<Op>> ops, SampleContext& ctx);
// The size pass alone: the rows `ops` tell for each of `rows.size()` batch fields (added
// to `rows`), up to the first that cannot tell; nothing reserved or written. `ctx` needs
// its sample and values only.
// With `sequence`, the token sequence an op tells (SizePass::sequence) goes there; with
// `patches`, each image's and video's patches (t x h x w of every grid told) are appended.
void TellRows(std::span<const std::unique_ptr<Op>> ops, const SampleContext& ctx,
              std::span<int64_t> rows, ToldSequence* sequence = nullptr,
              std::vector<int64_t>* patches = nullptr);

// A per-batch step: runs once a batch is complete (skipped samples already removed),
// before it is delivered, on the CPU thread that finished the batch's last sample. It
// may change the batch's tensors in place. Like Op, it is immutable and thread-safe:
// several batches may run it at once. A non-ok status drops the batch, and each of its
// samples is counted as an error with that status.
class BatchOp {
 public:
  virtual ~BatchOp() = default;
  virtual std::string_view name() const = 0;
  // `batch_seed` is HashKeys(seed, epoch, index_in_epoch, position): the root of any
  // randomness, identical on every run and thread.
  virtual Status Run(Batch& batch, uint64_t batch_seed) const = 0;
};

}  // namespace headrace
