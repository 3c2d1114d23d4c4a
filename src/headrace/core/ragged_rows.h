// RaggedRows: what one sample appends to the concatenated fields of its batch.
//
// A fixed field's row is in the batch buffer before the sample runs (its size is known
// at plan time); a ragged or item field's is not: it depends on the sample (an image's
// patches, a conversation's tokens). The sample's ops append their rows here, one entry
// per call (a sample's tokens, one image's patches), and the assemble stage appends each
// kept sample's rows to the batch tensor once the samples before it are done
// (AssembleStage::SampleDone). That is a copy of those bytes unless they are already
// there: a sample's rows that the size pass told (ReserveTold) may be given a window of
// the batch tensor itself, at the offset the rows told for the samples before it add up
// to (RowsPlacer, AssembleStage's), and the ops then write them in place. A sample whose
// predecessors have not told their rows yet asks again at its first Append; one that
// still gets no window, or whose rows do not fit the tensor's first block, gets its own
// block and is copied as before; so is one whose rows turn out other
// than told (a window is never grown: an Append past it moves the rows to a block of
// their own).
//
// One thread writes a sample's RaggedRows (the thread that runs it); the assemble stage
// reads it after that sample finished (BatchJob::join's mutex orders them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "headrace/core/batch.h"
#include "headrace/core/buffer.h"
#include "headrace/core/status.h"

namespace headrace {

// Windows of a batch's tensors for a sample's rows, lent before the sample writes them
// (AssembleStage's, per batch).
class RowsPlacer {
 public:
  virtual ~RowsPlacer() = default;
  // Sample `slot` will append `bytes[f]` bytes to field f (0: none told; one call per
  // sample, the first wins). Sets windows[f] (empty on entry) to a slice of exactly that
  // size of field f's batch tensor where its rows will lie once the batch is joined, or
  // leaves it empty.
  virtual void Place(int slot, std::span<const size_t> bytes, std::span<Buffer> windows) = 0;
  // For a field Place lent no window although its bytes were told: a window of exactly
  // those bytes where they will lie, asked again when the sample first appends to it
  // (its predecessors may have told since), or an empty Buffer.
  virtual Buffer Lend(int slot, size_t field) = 0;
};

// What holds a sample's told rows to a memory budget (the engine's: exec/rows_gate.h).
class RowsGate {
 public:
  virtual ~RowsGate() = default;
  // The sample's rows will take `bytes` bytes in all, as its size pass told them before
  // its ops decode anything: returns once they may be held (perhaps after a wait for
  // memory).
  virtual void Hold(size_t bytes) = 0;
};

class RaggedRows {
 public:
  RaggedRows() = default;
  // One entry per batch field: the bytes of one row of field f (0: f is not
  // concatenated, and Append to it is a bug). Memory comes from `memory`.
  RaggedRows(std::vector<size_t> row_bytes, std::shared_ptr<Allocator> memory);
  // For a batch of `fields`: a column for each concatenated one (kRagged, kItems).
  RaggedRows(const std::vector<FieldSpec>& fields, std::shared_ptr<Allocator> memory);
  // Whether any of `fields` is concatenated (a batch of them needs RaggedRows).
  static bool Needed(const std::vector<FieldSpec>& fields);

  // The most bytes this sample's rows may take over all its fields (0: no limit; the
  // engine's: what a batch may hold, AssembleStage). Told rows past it fail CheckTold,
  // before the sample's ops decode anything (ReserveRows); rows appended past it fail
  // Append.
  void set_max_bytes(size_t max_bytes) { max_bytes_ = max_bytes; }

  // Appends `rows` rows (>= 0) to field `field` as one new entry: where to write them,
  // rows * row_bytes bytes, valid until the next Append to the same field.
  // kResourceExhausted when the memory cannot be had, or past max_bytes.
  Result<uint8_t*> Append(int field, int64_t rows);
  // Room for `rows` more rows of field `field`, so that Appends of that many in all
  // neither grow nor move its block: the size pass's (Op::Predict), which knows a
  // sample's rows before its ops write them. An empty field's block is then one of its
  // final size (Allocator::AllocateFinal). kResourceExhausted when the memory cannot be
  // had.
  Status Reserve(int field, int64_t rows);
  // The size pass's rows for every field (rows[f]: told for field f, 0 for none), told
  // once before the sample's ops run: held at the gate (set_gate), then each field's
  // rows go into the window the placer gives them (Place), else are reserved as by
  // Reserve.
  Status ReserveTold(std::span<const int64_t> rows);
  // kResourceExhausted when rows told as for ReserveTold take more than max_bytes in all.
  Status CheckTold(std::span<const int64_t> rows) const;
  // The placer asked by ReserveTold for sample `slot`'s windows (null: none). `placer`
  // outlives this sample's ReserveTold.
  void Place(RowsPlacer* placer, int slot) {
    placer_ = placer;
    slot_ = slot;
  }
  // The gate ReserveTold holds the told rows at, before it reserves them (null: none).
  // `gate` outlives this sample's ReserveTold.
  void set_gate(RowsGate* gate) { gate_ = gate; }
  // The number of batch fields (columns, concatenated or not).
  int fields() const { return static_cast<int>(columns_.size()); }

  // What field `field` holds: its bytes, rows and entries, in the order appended.
  std::span<const uint8_t> bytes(int field) const;
  int64_t rows(int field) const;
  std::span<const int32_t> lengths(int field) const;
  // Bytes held over every field (capacity), for the memory accounting.
  size_t held_bytes() const;
  // Every field emptied, its memory kept for the next sample (a bench's reuse).
  void Clear();

 private:
  // The bytes field `field` holds once `rows` more are appended; errors for a field that
  // is not concatenated and for rows that do not fit, naming `what` was called.
  Result<size_t> BytesAfter(const char* what, int field, int64_t rows) const;
  // kResourceExhausted when the rows would take `bytes` in all, past max_bytes_.
  Status CheckMax(size_t bytes, const char* when) const;

  struct Column {
    size_t row_bytes = 0;
    Buffer data;      // capacity; the first `used` bytes are rows
    size_t used = 0;
    std::vector<int32_t> lengths;
  };
  std::vector<Column> columns_;
  std::shared_ptr<Allocator> memory_;
  size_t max_bytes_ = 0;
  RowsPlacer* placer_ = nullptr;
  int slot_ = 0;
  RowsGate* gate_ = nullptr;
  // Told, lent no window at the tell: the placer to ask again at the first Append
  // (RowsPlacer::Lend), and the rows told per field (0: none to ask for).
  RowsPlacer* lender_ = nullptr;
  std::vector<int64_t> pending_;
};

}  // namespace headrace
