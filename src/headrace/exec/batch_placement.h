// BatchPlacement: windows of one batch's concatenated tensors lent to its samples before
// they run, so that their ops write their rows where the join would copy them to.
//
// A batch's tensor of a concatenated field holds its samples' rows in slot order, so a
// sample's rows start where the rows of the samples before it end. The size pass tells a
// sample's rows before its ops run (ReserveRows, RaggedRows::ReserveTold); once every
// sample before it has told its rows, its offset is their sum, and it is lent the window
// [offset, offset + its bytes) of the tensor's first block (from regions twice the mean
// batch so far, or guessed from the first window before there is a mean:
// AssembleStage::LendWindows; its pages past the rows are never touched, and Settle
// gives them back). Its ops then write there and the join
// (AssembleStage::Join) finds the rows in place: no copy.
//
// A sample whose predecessors have not all told their rows when it tells its own (it
// started first: the two cores began two samples at once, or its predecessor's bytes are
// still being read) asks again when it first writes (RaggedRows::Append: Lend), by which
// time they usually have: its offset is then known. Telling takes longer once
// text.tokenize tells its tokens (it tokenizes in the size pass), and lent only at the
// tell, 29 of 96 batches of the VLM bench copied a sample's patches.
//
// What is not lent a window is copied by the join as before: a sample whose
// predecessors have still not told when it writes, every sample after one whose rows do
// not fit the block, a field the size pass cannot tell. A sample whose rows turn out other than told (it failed, or an
// op appended past its window: the rows then moved to a block of their own) leaves the
// samples after it off their offsets; the join then moves or copies them, and never
// writes where a window of a later sample lies (MayWrite): it moves the batch to a block
// of its own instead.
//
// Thread-safe: Place from each sample's thread, MayWrite from the joining thread, under
// one lock; the samples write their windows without it (the windows do not overlap, and
// the join reads a sample's rows after it is done).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/ragged_rows.h"
#include "headrace/exec/thread_annotations.h"

namespace headrace {

class BatchPlacement final : public RowsPlacer {
 public:
  // Field f's capacity when no batch tells its size yet: the first window's sample's
  // bytes, for it and each sample after it, twice over (kGuess x that), plus the rows
  // told before it.
  static constexpr size_t kGuess = ~size_t{0};
  static constexpr int kGuessFactor = 2;
  // For a batch of `samples`: field f's tensor's first block is of capacities[f] bytes
  // (0: no window of field f is lent; kGuess: from the first window), from `memory`. It
  // is allocated when the first window is lent (when the batch's first sample starts, not
  // when it is admitted: a batch admitted ahead would take the pages that the batches
  // being written need).
  void Start(std::vector<size_t> capacities, std::shared_ptr<Allocator> memory, int samples);
  void Place(int slot, std::span<const size_t> bytes, std::span<Buffer> windows) override;
  // A window for sample `slot` that told before a sample before it (Place lent it none):
  // once every sample before it has told, its offset is known, and it is lent the window
  // there if that fits the block and the join has not written past it.
  Buffer Lend(int slot, size_t field) override;
  // Field f's first block, for the join, which adopts it before it joins any of the
  // field's rows (empty: no window was lent, and none will be).
  Buffer Adopt(size_t field);
  // Whether the join may write sample `slot`'s rows at [begin, end) of field f's block:
  // false when a window lent to a later sample lies there. When true, no window is lent
  // there from now on either.
  bool MayWrite(size_t field, int slot, size_t end);
  // No window is lent from now on, and the blocks' handles are dropped (the batch's
  // tensors are then the join's alone, and can settle).
  void Close();

  // Windows lent, and their bytes, over this batch (for tests and the report).
  int64_t windows_lent() const;
  int64_t bytes_lent() const;

 private:
  static constexpr size_t kNone = ~size_t{0};
  struct Field {
    Buffer block;                 // windows are lent from it (empty: none from now on)
    Buffer unadopted;             // the same block, until the join adopts it
    size_t capacity = 0;          // its size, until it is allocated (0: not to be)
    size_t end = 0;               // the bytes told by the slots before next_
    size_t written = 0;           // the join may have written below this (MayWrite)
    std::vector<size_t> lent_at;  // per slot: its window's offset, kNone: none
    // Per slot that told before its predecessors: its offset once they told (kNone:
    // not known yet), for Lend.
    std::vector<size_t> offset;
  };
  void LendFrom(Field& field, int slot, size_t bytes, Buffer& window) HR_REQUIRES(mu_);

  mutable Mutex mu_;
  std::shared_ptr<Allocator> memory_ HR_GUARDED_BY(mu_);
  std::vector<Field> fields_ HR_GUARDED_BY(mu_);
  std::vector<size_t> told_ HR_GUARDED_BY(mu_);  // per slot, per field
  std::vector<char> has_told_ HR_GUARDED_BY(mu_);
  int samples_ HR_GUARDED_BY(mu_) = 0;
  int next_ HR_GUARDED_BY(mu_) = 0;  // the slots before it have told their rows
  int64_t windows_lent_ HR_GUARDED_BY(mu_) = 0;
  int64_t bytes_lent_ HR_GUARDED_BY(mu_) = 0;
};

}  // namespace headrace
