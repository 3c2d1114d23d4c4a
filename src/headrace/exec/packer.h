// Packer: several samples per row of `seq_len` tokens, the layout a varlen attention
// kernel (FlashAttention's cu_seqlens) takes, built on the consumer's side of the
// in-order delivery (exec/README.md, "Packing").
//
//   Packer packer = *Packer::Make(layout, options);
//   for each batch the engine delivers, in order:  Batch packed = *packer.Push(batch, last);
//
// One packed batch per input batch. The samples that wait for a row are the window:
// those carried from earlier batches (at most options.window) plus the new batch's. Rows
// are built while the window holds more than `window` samples, at least one per input
// batch, and the epoch's last batch empties it. A row starts with the oldest waiting
// sample (none waits more than about `window` samples) and is filled best-fit: the
// longest waiting sample that still fits, the earliest among equals, until none fits.
// window = 0 packs each batch on its own (a pure function of that batch). A larger window
// gives best-fit more candidates (a better fill) for its samples' bytes held here,
// samples reordered by up to about `window`, and as many samples recomputed on resume.
// With options.epoch_batches, the window narrows to half an input batch for each input
// batch still to come in the epoch (at input batch p of N, to min(window, (N - 1 - p) x
// its samples / 2)), so that the epoch's last packed batch holds about one input batch's
// samples plus a few, not the whole window too: with a window of 16 VLM samples of ~27 MB,
// a last packed batch of 24 was copied and faulted in alone on the consumer's thread
// while the workers had nothing left (0.67x the unpacked samples/s per 128-sample pass).
//
// The packer is sequential over the delivered order, which is a pure function of the
// seed; so the rows are the same for any thread count and in every run, each rank packs
// its own samples (disjoint), and each rank emits one packed batch per input batch (equal
// counts, as EpochOrder deals them).
//
// Layout of a packed batch:
//   - The token fields (FieldSpec::tokens_of == options.token_field, and the token field
//     itself): [rows, seq_len, ...], each row its samples' tokens one after the other,
//     then padding (the token field options.pad_id, a field named "*labels"
//     options.ignore_index, others 0). Each sample's first label is ignore_index, so that
//     a shifted loss never predicts one sample's first token from another's last. Their
//     `<field>_lengths` hold each sample's tokens, in row order.
//   - cu_seqlens (i32): the segment boundaries over the flattened rows, FlashAttention's
//     varlen layout: every sample is a segment, a row's padding one more, so the last
//     entry is rows × seq_len. samples_per_row (i32 [rows]).
//   - Every other field (fixed, a list's items, other ragged fields such as pixel_values,
//     and "index") and every string field ("id", ...): the samples in row order, so that
//     `index` and `id` name each row's samples.
// With options.budget (batch.max_tokens) the rows are batches instead: each holds samples
// of at most seq_len tokens in all (text and vision tokens: input_ids holds both),
// unpadded, every field concatenated as in an input batch (token fields with their
// `<field>_lengths`), with cu_seqlens over the concatenated tokens (no row padding, so
// the last entry is the batch's tokens). One input batch gives one or more of them
// (PushBudget): their count per epoch follows the data.
// A sample longer than seq_len is truncated or skipped (options.overflow): data lost, so
// each is an error of its packed batch (kinds pack_truncated, pack_skipped) naming the
// sample, its tokens and the key, and a LostSample (TakeLost) that its consumer counts
// against the run's error budget (Engine::CountLost; a Ray rank's budget). A truncation
// that would cut vision tokens (options.vision_token_ids) fails the sample with an error
// naming both numbers, since its patches would no longer match its tokens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/core/batch.h"
#include "headrace/core/buffer.h"
#include "headrace/core/pooling_allocator.h"
#include "headrace/core/status.h"
#include "headrace/exec/error_budget.h"

namespace headrace {

enum class PackOverflow { kTruncate, kSkip };

struct PackOptions {
  int64_t seq_len = 0;  // tokens per row (> 0)
  int64_t window = 0;   // samples carried from one input batch to the next, at most
  PackOverflow overflow = PackOverflow::kTruncate;
  std::string token_field = "input_ids";
  int64_t pad_id = 0;
  int64_t ignore_index = -100;
  // Token ids whose positions carry vision features (<|image_pad|>, <|video_pad|>):
  // counted as vision tokens, never cut by a truncation.
  std::vector<int64_t> vision_token_ids;
  Allocator* allocator = nullptr;  // the packed batches' memory; null: the heap
  // Freed packed batches kept for the next ones (a pool over `allocator`), at most.
  int64_t pool_bytes = int64_t{256} << 20;
  // batch.max_tokens: rows are whole batches of at most seq_len tokens (see above).
  bool budget = false;
  // Input batches in an epoch of this rank (0: unknown). Known, the window narrows over
  // the epoch's last input batches (see above).
  int64_t epoch_batches = 0;
};

// The start of a too-long sample's error, the packer's and the planner's alike:
// "packing: the sample's N tokens exceed batch.pack.seq_len M" (batch.max_tokens with a
// budget); and the whole error of one left out (overflow: skip).
std::string PackTooLong(int64_t tokens, const PackOptions& options);
Status PackLeftOut(int64_t tokens, const PackOptions& options);

// What the packer did so far (stats(), the report and the metrics).
struct PackStats {
  int64_t batches = 0;
  int64_t rows = 0;
  int64_t samples = 0;
  int64_t tokens = 0;          // real tokens in rows
  int64_t padding_tokens = 0;  // rows × seq_len - tokens
  int64_t vision_tokens = 0;
  int64_t truncated = 0;       // samples cut to seq_len
  int64_t skipped = 0;         // samples longer than seq_len left out (overflow: skip)
  int64_t failed = 0;          // samples whose vision tokens a cut would drop
  int64_t window_samples = 0;  // waiting now
  // The waiting samples' bytes (a Loader charges them to the batch budget, as batches
  // admitted and not yet delivered: Engine::ChargeHeld): those carried to a later
  // batch are copied out of their input batch (so that its buffers go back to the
  // engine's pool at once), into one buffer per input batch; with Batch::sample_rows,
  // only their fixed fields are, and each keeps its own rows.
  int64_t window_bytes = 0;
  int64_t max_window_bytes = 0;
  int64_t bytes_copied = 0;   // sample bytes the packer copied (into packed batches, carried)
  int64_t memory_reused = 0;  // packed batches' buffers from the packer's pool
  int64_t memory_fresh = 0;   // newly allocated
  // Packed batches whose rows were decided from their samples' told sizes before they
  // ran (PackPlanner: their samples computed in row order, the patches not copied here).
  int64_t planned_batches = 0;
  double fill() const {
    const int64_t capacity = tokens + padding_tokens;
    return capacity > 0 ? static_cast<double>(tokens) / static_cast<double>(capacity) : 0.0;
  }
};

// Where a packer stands between two input batches of one epoch: enough to rebuild its
// window in a new process by replaying input batches from `from_batch` on (Restore).
struct PackState {
  int64_t epoch = 0;
  // Rank-local batches in the epoch (Push's `position`):
  int64_t from_batch = 0;        // the input batch the oldest waiting sample came from
  int64_t next_batch = 0;        // the next input batch the packer expects
  std::vector<int64_t> waiting;  // dataset indices of the waiting samples, oldest first
  // batch.max_tokens: the batches input batch `next_batch` gives that were delivered
  // already (the state is then the one before that input batch).
  int64_t delivered = 0;
  // The window is a data-parallel step's, the same in every rank's state (batch.balance
  // with a packing window: PackPlanner's RowDeal plans each step's rows over every rank's
  // samples): a merge of the ranks' states keeps one copy.
  bool shared = false;
};

// The rule above, for whoever packs: takes rows out of `window` (arrival -> an entry with
// a `tokens` member, oldest first) and `by_tokens` (tokens -> arrival) while more than
// `keep` wait (at least one row while any waits; every waiting one with `flush`); each row
// its entries in row order. The Packer's, and the PackPlanner's from told sizes. With
// `multiple` > 1 (a step's rows dealt over that many ranks: PackPlanner's RowDeal) rows
// come in whole multiples of it while samples wait: at least `multiple`. Where the
// window empties first (the samples fill fewer rows: an epoch's end, or short samples
// in long rows) the taken samples are spread over the next multiple of rows instead
// (SpreadOverRows), so that no rank is left without a row; only with fewer samples than
// that do the rows fall short of a multiple.
template <typename Entry>
std::vector<std::vector<Entry>> SpreadOverRows(std::vector<std::vector<Entry>> rows,
                                               size_t count, int64_t seq_len);

template <typename Entry>
std::vector<std::vector<Entry>> TakePackRows(std::map<int64_t, Entry>& window,
                                             std::multimap<int64_t, int64_t>& by_tokens,
                                             int64_t seq_len, bool flush, int64_t keep,
                                             int64_t multiple = 1) {
  std::vector<std::vector<Entry>> rows;
  const auto take = [&](int64_t arrival) {
    auto node = window.extract(arrival);
    return std::move(node.mapped());
  };
  while (!window.empty() &&
         (flush || rows.empty() || static_cast<int64_t>(rows.size()) % multiple != 0 ||
          static_cast<int64_t>(window.size()) > keep)) {
    std::vector<Entry> row;
    const int64_t oldest = window.begin()->first;
    int64_t room = seq_len - window.begin()->second.tokens;
    const auto [lo, hi] = by_tokens.equal_range(window.begin()->second.tokens);
    for (auto it = lo; it != hi; ++it) {
      if (it->second == oldest) {
        by_tokens.erase(it);
        break;
      }
    }
    row.push_back(take(oldest));
    while (!by_tokens.empty()) {
      auto it = by_tokens.upper_bound(room);
      if (it == by_tokens.begin()) break;
      --it;
      it = by_tokens.lower_bound(it->first);  // the earliest of the longest that fit
      room -= it->first;
      const int64_t arrival = it->second;
      by_tokens.erase(it);
      row.push_back(take(arrival));
    }
    rows.push_back(std::move(row));
  }
  const auto m = static_cast<size_t>(std::max<int64_t>(multiple, 1));
  if (window.empty() && rows.size() % m != 0) {
    rows = SpreadOverRows(std::move(rows), (rows.size() / m + 1) * m, seq_len);
  }
  return rows;
}

// `rows`' entries spread over `count` rows (more than rows.size()), longest first, each
// to the row holding the fewest tokens (the lowest among equals); `rows` as they are
// when they hold fewer than `count` entries, or when one would not fit (a row past
// seq_len).
template <typename Entry>
std::vector<std::vector<Entry>> SpreadOverRows(std::vector<std::vector<Entry>> rows,
                                               size_t count, int64_t seq_len) {
  std::vector<Entry*> entries;
  for (std::vector<Entry>& row : rows) {
    for (Entry& e : row) entries.push_back(&e);
  }
  if (entries.size() < count) return rows;
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry* a, const Entry* b) { return a->tokens > b->tokens; });
  std::vector<int64_t> held(count, 0);
  std::vector<std::vector<Entry*>> to(count);
  for (Entry* e : entries) {
    const size_t r = static_cast<size_t>(std::min_element(held.begin(), held.end()) - held.begin());
    if (held[r] + e->tokens > seq_len) return rows;
    held[r] += e->tokens;
    to[r].push_back(e);
  }
  std::vector<std::vector<Entry>> spread(count);
  for (size_t r = 0; r < count; ++r) {
    for (Entry* e : to[r]) spread[r].push_back(std::move(*e));
  }
  return spread;
}

// The window after input batch `position` of `samples` samples (the narrowing above).
int64_t PackWindowAt(const PackOptions& options, int64_t position, int64_t samples);

class Packer {
 public:
  // `layout`: the batch's fields as the plan declares them (without "index"). Fails when
  // the layout has no ragged per-sample token field named options.token_field, or the
  // options are out of range.
  static Result<Packer> Make(std::vector<FieldSpec> layout, PackOptions options);

  // Adds `input` (the next input batch, in delivery order; `position` is its rank-local
  // batch in the epoch: 0, 1, 2, ...) and returns its packed batch (epoch and positions of
  // `input`; its errors plus the packer's). `last_in_epoch`: the epoch's last input
  // batch, after which the window is empty.
  Result<Batch> Push(const Batch& input, int64_t position, bool last_in_epoch);
  // options.budget: the same, giving the input batch's token-budget batches (at least
  // one, empty when nothing waits), in order.
  Result<std::vector<Batch>> PushBudget(const Batch& input, int64_t position,
                                        bool last_in_epoch);
  // A planned batch (PackPlanner): `input` holds the samples of `rows` (dataset indices,
  // each row's in row order), those that did not fail, in that order; it is laid out as
  // those rows. A sample whose tokens turn out other than told and no longer fit its
  // row starts a row of its own. `skipped`, `failed`: the samples the plan left out as
  // longer than seq_len (overflow: skip) and as cuts through vision tokens, counted here
  // (the errors go with the batch; lost, never computed). The window stays empty.
  Result<Batch> PushPlanned(const Batch& input, int64_t position,
                            const std::vector<std::vector<int64_t>>& rows,
                            std::vector<SampleError> skipped = {},
                            std::vector<SampleError> failed = {});
  // options.budget: the same, each planned row a batch (at least one, empty when no row
  // was planned), the errors with the first; each field a run of the input's tensors.
  Result<std::vector<Batch>> PushPlannedBudget(const Batch& input, int64_t position,
                                               const std::vector<std::vector<int64_t>>& rows,
                                               std::vector<SampleError> skipped = {},
                                               std::vector<SampleError> failed = {});

  // The state after the last Push (meaningless before the first).
  PackState state() const;
  // Makes this (new) packer continue from `state`: the caller feeds it input batches from
  // state.from_batch of state.epoch on; those before state.next_batch only refill the
  // window (their Push returns an empty batch and counts nothing), and the first packed
  // batch is state.next_batch's, as the saved packer would have made it.
  void Restore(const PackState& state);
  // Whether a Push at `position` only refills the window (Restore's replay).
  bool replaying(int64_t position) const {
    return replay_.has_value() && position < replay_->next_batch;
  }

  const PackStats& stats() const { return stats_; }
  // The samples the pushes since the last call lost (skipped, truncated, failed here or
  // left out by a plan), in order; their errors are also in the packed batches'.
  std::vector<LostSample> TakeLost() { return std::exchange(lost_, {}); }
  bool budget() const { return options_.budget; }  // PushBudget, not Push
  // options.epoch_batches, once the rank's epoch is known (a Loader's engine started).
  void set_epoch_batches(int64_t n) { options_.epoch_batches = n; }

 private:
  struct Waiting {
    int64_t index = 0;       // dataset index
    int64_t from_batch = 0;  // input batch (in the epoch) it came from
    int64_t tokens = 0;      // rows of the token fields, after a truncation
    // Per layout field (with "index" last): the sample's bytes, in `owner` (the input
    // batch it came from while that is being packed; once carried past it, a copy, one
    // per input batch), and its rows (entries for a lengths field).
    std::shared_ptr<const void> owner;
    int64_t owner_bytes = 0;
    // An input batch with Batch::sample_rows: the sample's own rows, where its
    // concatenated fields' bytes are (never copied while it waits).
    std::shared_ptr<const RaggedRows> rows_owner;
    std::vector<std::string_view> bytes;
    std::vector<int64_t> rows;
    std::vector<std::vector<std::string>> strings;  // per string column
  };

  Packer(std::vector<FieldSpec> layout, PackOptions options);
  Status Admit(const Batch& input, int64_t position, std::vector<SampleError>& errors);
  // Rows while more than `window` samples wait (at least one; all with `flush`).
  std::vector<std::vector<Waiting>> BuildRows(bool flush, int64_t window);
  // The window after input batch `position` of `samples` samples (see above).
  int64_t WindowAt(int64_t position, int64_t samples) const;
  Result<Batch> Emit(const Batch& input, const std::vector<std::vector<Waiting>>& rows,
                     std::vector<SampleError> errors);
  // Each row a batch of its own (at least one, empty when there is no row), `errors` with
  // the first: batch.max_tokens.
  Result<std::vector<Batch>> EmitEach(const Batch& input, std::vector<std::vector<Waiting>> rows,
                                      std::vector<SampleError> errors);
  // PushPlanned's common part: admits `input` and lays its samples out as `rows` say.
  Result<std::vector<std::vector<Waiting>>> LayPlanned(
      const Batch& input, int64_t position, const std::vector<std::vector<int64_t>>& rows,
      std::vector<SampleError>& errors);
  // Push's common part: admits `input`, returns the rows it completes (none in a replay).
  Result<std::optional<std::vector<std::vector<Waiting>>>> Take(
      const Batch& input, int64_t position, bool last_in_epoch, std::vector<SampleError>& errors);

  std::vector<FieldSpec> layout_;  // with "index" appended
  PackOptions options_;
  int token_ = -1;                // layout_ position of the token field
  std::vector<bool> packed_;      // per layout field: laid out as [rows, seq_len, ...]
  std::vector<int> lengths_of_;   // per kLengths field: the ragged field it counts, or -1
  std::vector<std::string> string_names_;  // the string columns, fixed by the first batch
  std::vector<bool> string_lists_;

  // The window: waiting samples by arrival, and their arrivals by token count (best-fit).
  std::map<int64_t, Waiting> window_;
  std::multimap<int64_t, int64_t> by_tokens_;
  int64_t arrivals_ = 0;
  int64_t epoch_ = -1;
  int64_t next_batch_ = 0;
  std::optional<PackState> replay_;
  std::vector<int64_t> replay_waiting_;  // sorted: the samples a replay keeps
  PackStats stats_;
  std::vector<LostSample> lost_;  // since the last TakeLost
  std::shared_ptr<ReusingAllocator> memory_;  // the packed batches' buffers
  const void* last_input_ = nullptr;          // the input batch Admit took in last
  void CountWindowBytes();
  // Copies the waiting samples that still point into input batch `input` out of it.
  Status Carry(const void* input);
};

// The packer as a consumer drives it (PackFormer: a local run's, a Ray rank's):
// input batches in, in order; packed batches out, in order, each with the state to save
// once it is delivered. It keeps what a resume skips: the replay of the saved window
// (Packer::Restore), the token batches of one input batch delivered before the state was
// saved (batch.max_tokens), and the packed batches before a start position.
class PackingQueue {
 public:
  explicit PackingQueue(Packer packer) : packer_(std::move(packer)) {}

  // Continue from `state` (Packer::Restore): feed input batches from state.from_batch.
  void Resume(const PackState& state);
  // Deliver nothing whose Batch::global_index (the rank-local run batch) is below this.
  void DeliverFrom(int64_t global_index) { deliver_from_ = global_index; }

  // A planned batch (Packer::PushPlanned, PushPlannedBudget), queued: its packed batch,
  // the state then `after` (the planner's once it is delivered); with batch.max_tokens
  // its batches, each but the last with the state `before` it plus the ones delivered
  // (those a resume delivered already, ResumePlanned, are dropped).
  Status PushPlanned(const Batch& input, int64_t position,
                     const std::vector<std::vector<int64_t>>& rows,
                     std::vector<SampleError> skipped, std::vector<SampleError> failed,
                     const PackState& before, const PackState& after);
  // A planned resume: the state, and the batches of state.next_batch delivered already.
  void ResumePlanned(const PackState& state) {
    state_ = state;
    skip_at_ = state.next_batch;
    skip_first_ = state.delivered;
  }
  // Adds the input batch at `position` (Packer::Push). Whether it delivers anything:
  // false in a replay or before DeliverFrom's position (its errors were then counted
  // by the run that delivered it).
  Result<bool> Push(const Batch& input, int64_t position, bool last_in_epoch);
  // The next packed batch, or nullopt until the next Push.
  std::optional<Batch> Pop();
  // Packed batches waiting for Pop.
  size_t size() const { return queue_.size(); }
  // Whether one of them holds a sample (a batch whose every sample failed holds none).
  bool HoldsSamples() const {
    return std::any_of(queue_.begin(), queue_.end(),
                       [](const auto& queued) { return queued.first.size() > 0; });
  }
  // Where the consumer stands after the last Pop (what a state dict saves).
  const PackState& state() const { return state_; }
  const PackStats& stats() const { return packer_.stats(); }
  // The samples the pushes since the last call lost (Packer::TakeLost), those of batches
  // it delivers only (a replay's, or those a resume delivered before, were counted by
  // the run that delivered them): for the consumer's error budget.
  std::vector<LostSample> TakeLost() { return std::exchange(lost_, {}); }
  void set_epoch_batches(int64_t n) { packer_.set_epoch_batches(n); }

 private:
  // An input batch's token batches (batch.max_tokens), queued if `delivers` (less those
  // a resume delivered already), each with its state: all but the last `before` plus the
  // ones delivered, the last `after`.
  // Returns whether the first of them (the one with the errors) is queued.
  bool QueueTokenBatches(std::vector<Batch> outs, int64_t position, bool delivers,
                         const PackState& before, const PackState& after);
  // The packer's lost samples of the last push: kept when `counted` (its errors delivered).
  void KeepLost(bool counted);

  Packer packer_;
  std::deque<std::pair<Batch, PackState>> queue_;  // each with the state after it
  PackState state_;
  int64_t skip_at_ = -1;  // Resume: the input batch whose first skip_first_ are skipped
  int64_t skip_first_ = 0;
  int64_t deliver_from_ = 0;
  std::vector<LostSample> lost_;
};

}  // namespace headrace
