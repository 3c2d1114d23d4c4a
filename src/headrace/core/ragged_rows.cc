#include "headrace/core/ragged_rows.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace headrace {

RaggedRows::RaggedRows(std::vector<size_t> row_bytes, std::shared_ptr<Allocator> memory)
    : memory_(std::move(memory)) {
  columns_.resize(row_bytes.size());
  for (size_t f = 0; f < row_bytes.size(); ++f) columns_[f].row_bytes = row_bytes[f];
}

RaggedRows::RaggedRows(const std::vector<FieldSpec>& fields, std::shared_ptr<Allocator> memory)
    : memory_(std::move(memory)) {
  columns_.resize(fields.size());
  for (size_t f = 0; f < fields.size(); ++f) {
    const FieldLayout layout = fields[f].layout;
    if (layout == FieldLayout::kRagged || layout == FieldLayout::kItems) {
      columns_[f].row_bytes = fields[f].sample_bytes();
    }
  }
}

bool RaggedRows::Needed(const std::vector<FieldSpec>& fields) {
  return std::any_of(fields.begin(), fields.end(),
                     [](const FieldSpec& f) { return f.concatenated(); });
}

Result<size_t> RaggedRows::BytesAfter(const char* what, int field, int64_t rows) const {
  if (field < 0 || static_cast<size_t>(field) >= columns_.size() ||
      columns_[static_cast<size_t>(field)].row_bytes == 0) {
    return Status::Internal(std::string("RaggedRows::") + what + ": field " +
                            std::to_string(field) + " is not a concatenated field");
  }
  const Column& c = columns_[static_cast<size_t>(field)];
  if (rows < 0 || rows > std::numeric_limits<int32_t>::max() ||
      static_cast<uint64_t>(rows) > (std::numeric_limits<size_t>::max() - c.used) / c.row_bytes) {
    return Status::InvalidArgument(std::string("RaggedRows::") + what + ": " +
                                   std::to_string(rows) + " rows do not fit a batch field");
  }
  return c.used + static_cast<size_t>(rows) * c.row_bytes;
}

Status RaggedRows::CheckMax(size_t bytes, const char* when) const {
  if (max_bytes_ == 0 || bytes <= max_bytes_) return Status::Ok();
  return Status::ResourceExhausted(
      "the sample's rows " + std::string(when) + " " + std::to_string(bytes) +
      " bytes, more than a batch may hold (" + std::to_string(max_bytes_) +
      " bytes: the batch budget less a full batch's fixed fields); raise "
      "memory.budget_bytes, or lower the pixels or items a sample may have");
}

Status RaggedRows::Reserve(int field, int64_t rows) {
  HR_ASSIGN_OR_RETURN(const size_t need, BytesAfter("Reserve", field, rows));
  Column& c = columns_[static_cast<size_t>(field)];
  if (need <= c.data.size()) return Status::Ok();
  if (c.data.empty()) {
    HR_ASSIGN_OR_RETURN(c.data, Buffer::AllocateFinal(need, memory_));
  } else {
    HR_ASSIGN_OR_RETURN(c.data, Buffer::Grow(std::move(c.data), c.used, need, memory_));
  }
  return Status::Ok();
}

Status RaggedRows::CheckTold(std::span<const int64_t> rows) const {
  if (max_bytes_ == 0) return Status::Ok();
  size_t told = 0;
  for (size_t f = 0; f < columns_.size() && f < rows.size(); ++f) {
    const Column& c = columns_[f];
    if (c.row_bytes == 0 || rows[f] <= 0) continue;
    HR_ASSIGN_OR_RETURN(const size_t after,
                        BytesAfter("CheckTold", static_cast<int>(f), rows[f]));
    told += after;
  }
  return CheckMax(told, "told before decoding take");
}

Status RaggedRows::ReserveTold(std::span<const int64_t> rows) {
  if (rows.size() != columns_.size()) {
    return Status::Internal("RaggedRows::ReserveTold: " + std::to_string(rows.size()) +
                            " fields told, the batch has " + std::to_string(columns_.size()));
  }
  if (RowsGate* gate = std::exchange(gate_, nullptr); gate != nullptr) {
    size_t told = 0;
    for (size_t f = 0; f < columns_.size(); ++f) {
      if (columns_[f].row_bytes == 0 || rows[f] <= 0) continue;
      HR_ASSIGN_OR_RETURN(const size_t after,
                          BytesAfter("ReserveTold", static_cast<int>(f), rows[f]));
      told += after - columns_[f].used;
    }
    gate->Hold(told);
  }
  if (placer_ != nullptr) {
    thread_local std::vector<size_t> bytes;
    thread_local std::vector<Buffer> windows;
    bytes.assign(columns_.size(), 0);
    windows.assign(columns_.size(), Buffer());
    for (size_t f = 0; f < columns_.size(); ++f) {
      const Column& c = columns_[f];
      // A field that is not concatenated, or already holds rows, is told as none.
      if (c.row_bytes == 0 || c.used > 0 || rows[f] <= 0) continue;
      HR_ASSIGN_OR_RETURN(bytes[f], BytesAfter("ReserveTold", static_cast<int>(f), rows[f]));
    }
    RowsPlacer* placer = std::exchange(placer_, nullptr);
    placer->Place(slot_, bytes, windows);
    for (size_t f = 0; f < columns_.size(); ++f) {
      if (windows[f].empty()) {
        // Lent none now: asked again at the first Append, its block reserved then.
        if (bytes[f] == 0) continue;
        if (pending_.empty()) pending_.assign(columns_.size(), 0);
        pending_[f] = rows[f];
        lender_ = placer;
        continue;
      }
      columns_[f].data = std::move(windows[f]);  // its rows are written in the batch tensor
    }
    windows.clear();  // no handle of a batch tensor outlives the call on this thread
  }
  for (size_t f = 0; f < columns_.size(); ++f) {
    if (rows[f] > 0 && columns_[f].row_bytes > 0 && (pending_.empty() || pending_[f] == 0)) {
      HR_RETURN_IF_ERROR(Reserve(static_cast<int>(f), rows[f]));
    }
  }
  return Status::Ok();
}

Result<uint8_t*> RaggedRows::Append(int field, int64_t rows) {
  HR_ASSIGN_OR_RETURN(const size_t need, BytesAfter("Append", field, rows));
  Column& c = columns_[static_cast<size_t>(field)];
  if (max_bytes_ != 0) {
    size_t after = need;
    for (const Column& other : columns_) {
      if (&other != &c) after += other.used;
    }
    HR_RETURN_IF_ERROR(CheckMax(after, "would take"));
  }
  if (!pending_.empty() && pending_[static_cast<size_t>(field)] > 0) {
    // Told, lent no window then: the placer again, else the block the tell would have had.
    const int64_t told = std::exchange(pending_[static_cast<size_t>(field)], 0);
    if (c.used == 0 && c.data.empty()) {
      Buffer window = lender_->Lend(slot_, static_cast<size_t>(field));
      if (!window.empty()) {
        c.data = std::move(window);
      } else {
        HR_RETURN_IF_ERROR(Reserve(field, told));
      }
    }
  }
  if (need > c.data.size()) {
    // Geometric growth: a list's items append one at a time. From a RegionAllocator the
    // block grows in place, its rows not copied (Buffer::Grow).
    const size_t capacity = std::max(need, c.data.size() + c.data.size() / 2);
    HR_ASSIGN_OR_RETURN(c.data, Buffer::Grow(std::move(c.data), c.used, capacity, memory_));
  }
  uint8_t* out = c.data.mutable_data() + c.used;
  c.used = need;
  c.lengths.push_back(static_cast<int32_t>(rows));
  return out;
}

std::span<const uint8_t> RaggedRows::bytes(int field) const {
  const Column& c = columns_[static_cast<size_t>(field)];
  return {c.data.data(), c.used};
}

int64_t RaggedRows::rows(int field) const {
  const Column& c = columns_[static_cast<size_t>(field)];
  return c.row_bytes == 0 ? 0 : static_cast<int64_t>(c.used / c.row_bytes);
}

std::span<const int32_t> RaggedRows::lengths(int field) const {
  return columns_[static_cast<size_t>(field)].lengths;
}

size_t RaggedRows::held_bytes() const {
  size_t n = 0;
  for (const Column& c : columns_) n += c.data.size();
  return n;
}

void RaggedRows::Clear() {
  for (Column& c : columns_) {
    c.used = 0;
    c.lengths.clear();
  }
  pending_.clear();
  lender_ = nullptr;
}

}  // namespace headrace
