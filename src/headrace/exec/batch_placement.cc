#include "headrace/exec/batch_placement.h"

#include <algorithm>
#include <utility>

namespace headrace {

void BatchPlacement::Start(std::vector<size_t> capacities, std::shared_ptr<Allocator> memory,
                           int samples) {
  MutexLock lock(mu_);
  memory_ = std::move(memory);
  samples_ = samples;
  next_ = 0;
  fields_.clear();
  fields_.resize(capacities.size());
  for (size_t f = 0; f < capacities.size(); ++f) {
    fields_[f].capacity = capacities[f];
    fields_[f].lent_at.assign(static_cast<size_t>(samples), kNone);
    fields_[f].offset.assign(static_cast<size_t>(samples), kNone);
  }
  told_.assign(static_cast<size_t>(samples) * fields_.size(), 0);
  has_told_.assign(static_cast<size_t>(samples), 0);
}

void BatchPlacement::LendFrom(Field& field, int slot, size_t bytes, Buffer& window) {
  if (bytes == 0) return;
  if (field.capacity > 0) {  // the first window: the block now
    size_t capacity = field.capacity;
    if (capacity == kGuess) {
      const auto after = static_cast<size_t>(samples_ - slot);
      capacity = bytes > (~size_t{0} - field.end) / (kGuessFactor * after)
                     ? 0  // no such memory: the join's own
                     : field.end + kGuessFactor * after * bytes;
      if (capacity == 0) {
        field.capacity = 0;
        return;
      }
    }
    Result<Buffer> block = Buffer::Allocate(std::max(capacity, field.end + bytes), memory_);
    field.capacity = 0;
    if (!block.ok()) return;  // the join allocates (and fails) as without windows
    field.block = *block;
    field.unadopted = *std::move(block);
  }
  if (field.block.empty()) return;
  if (bytes > field.block.size() - std::min(field.end, field.block.size())) {
    // It does not fit: no sample after it is lent a window of this block either (their
    // offsets would be past the tensor's end), and the join may grow it once the samples
    // before are joined, this handle gone.
    field.block = Buffer();
    return;
  }
  window = field.block.Slice(field.end, bytes);
  field.lent_at[static_cast<size_t>(slot)] = field.end;
  ++windows_lent_;
  bytes_lent_ += static_cast<int64_t>(bytes);
}

void BatchPlacement::Place(int slot, std::span<const size_t> bytes, std::span<Buffer> windows) {
  MutexLock lock(mu_);
  if (slot < 0 || slot >= samples_ || has_told_[static_cast<size_t>(slot)] ||
      bytes.size() != fields_.size() || windows.size() != fields_.size()) {
    return;
  }
  has_told_[static_cast<size_t>(slot)] = 1;
  const size_t n_fields = fields_.size();
  std::copy(bytes.begin(), bytes.end(), told_.begin() + static_cast<ptrdiff_t>(slot * n_fields));
  if (slot != next_) return;  // a sample before it has not told its rows: no offset yet
  for (size_t f = 0; f < n_fields; ++f) LendFrom(fields_[f], slot, bytes[f], windows[f]);
  // Its rows, and those of the samples after it that told theirs first (they run in
  // blocks of their own, to be copied into the room kept here), are before the next.
  for (; next_ < samples_ && has_told_[static_cast<size_t>(next_)]; ++next_) {
    for (size_t f = 0; f < n_fields; ++f) {
      fields_[f].offset[static_cast<size_t>(next_)] = fields_[f].end;
      fields_[f].end += told_[static_cast<size_t>(next_) * n_fields + f];
    }
  }
}

Buffer BatchPlacement::Lend(int slot, size_t field) {
  MutexLock lock(mu_);
  if (slot < 0 || slot >= samples_ || field >= fields_.size()) return Buffer();
  Field& f = fields_[field];
  const auto s = static_cast<size_t>(slot);
  const size_t bytes = told_[s * fields_.size() + field];
  const size_t at = f.offset[s];
  // Not told, its offset not known yet, lent already, or nothing to lend from.
  if (bytes == 0 || at == kNone || f.lent_at[s] != kNone || f.block.empty()) return Buffer();
  // The join may have written there (the rows before turned out other than told), or it
  // lies past the block (as the sample's successors', which are then lent none).
  if (at < f.written || at + bytes > f.block.size()) return Buffer();
  f.lent_at[s] = at;
  ++windows_lent_;
  bytes_lent_ += static_cast<int64_t>(bytes);
  return f.block.Slice(at, bytes);
}

Buffer BatchPlacement::Adopt(size_t field) {
  MutexLock lock(mu_);
  if (field >= fields_.size()) return Buffer();
  Field& f = fields_[field];
  f.capacity = 0;  // not allocated by now: not to be (the join allocates its own)
  return std::exchange(f.unadopted, Buffer());  // a moved-from Buffer keeps its size
}

bool BatchPlacement::MayWrite(size_t field, int slot, size_t end) {
  MutexLock lock(mu_);
  if (field >= fields_.size()) return true;
  Field& f = fields_[field];
  for (size_t s = static_cast<size_t>(slot) + 1; s < f.lent_at.size(); ++s) {
    if (f.lent_at[s] != kNone) {
      if (end > f.lent_at[s]) return false;
      break;  // windows lie at growing offsets in slot order
    }
  }
  // No window is lent below what the join writes from now on (Lend).
  f.written = std::max(f.written, end);
  // Windows are lent at `end` of the rows told so far: none may be lent below what the
  // join writes.
  if (end > f.end) f.block = Buffer();
  return true;
}

void BatchPlacement::Close() {
  MutexLock lock(mu_);
  for (Field& f : fields_) {
    f.block = Buffer();
    f.unadopted = Buffer();
    f.capacity = 0;
  }
  samples_ = 0;
}

int64_t BatchPlacement::windows_lent() const {
  MutexLock lock(mu_);
  return windows_lent_;
}

int64_t BatchPlacement::bytes_lent() const {
  MutexLock lock(mu_);
  return bytes_lent_;
}

}  // namespace headrace
