// The Packer's layout (exec/packer.h): a packed batch's tensors from the rows its rule
// built (Emit, EmitEach), and the rows a plan decided laid out from a computed batch
// (LayPlanned). The rule itself, the window and resume are in packer.cc.
#include <algorithm>
#include <cstring>
#include <span>
#include <utility>

#include "headrace/core/ragged_rows.h"
#include "headrace/core/region_allocator.h"
#include "headrace/exec/packer.h"

namespace headrace {
namespace {

// Writes `value` into `count` elements of an integer tensor's memory at `out`; a float
// field pads with zeros only.
void FillValue(DType dtype, void* out, int64_t count, int64_t value) {
  if (dtype == DType::kI64) {
    std::fill_n(static_cast<int64_t*>(out), count, value);
  } else if (dtype == DType::kI32) {
    std::fill_n(static_cast<int32_t*>(out), count, static_cast<int32_t>(value));
  } else if (count > 0) {
    std::memset(out, 0, static_cast<size_t>(count) * DTypeSize(dtype));
  }
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Result<Batch> Packer::Emit(const Batch& input, const std::vector<std::vector<Waiting>>& rows,
                           std::vector<SampleError> errors) {
  Batch out;
  out.epoch = input.epoch;
  out.index_in_epoch = input.index_in_epoch;
  out.global_index = input.global_index;
  out.errors = input.errors;
  for (SampleError& e : errors) out.errors.push_back(std::move(e));
  std::vector<const Waiting*> order;
  for (const std::vector<Waiting>& row : rows) {
    for (const Waiting& w : row) order.push_back(&w);
  }
  const int64_t n_rows = static_cast<int64_t>(rows.size());
  const int64_t n = static_cast<int64_t>(order.size());
  const bool laid_out = !options_.budget;  // token fields as [rows, seq_len, ...]

  // The segments: each sample, and each row's padding (pack).
  std::vector<int32_t> cu{0};
  std::vector<int64_t> used(rows.size(), 0);
  {
    size_t k = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      const int64_t row_start = laid_out ? static_cast<int64_t>(r) * options_.seq_len : 0;
      for (size_t j = 0; j < rows[r].size(); ++j, ++k) {
        used[r] += order[k]->tokens;
        cu.push_back(static_cast<int32_t>(row_start + used[r]));
      }
      if (laid_out && used[r] < options_.seq_len) {
        cu.push_back(static_cast<int32_t>(static_cast<int64_t>(r + 1) * options_.seq_len));
      }
    }
  }

  // Every tensor's shape first, then one buffer for the whole batch (one pool block, not
  // one per field: the fields' sizes vary from batch to batch, their sum much less).
  struct Planned {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    size_t offset = 0;
    bool from_input = false;
  };
  // A field whose samples' bytes are, in row order, one run of the input batch's tensor
  // of it (a planned batch: its samples were computed in row order, PackPlanner) is that
  // run of the tensor: no copy. (Not the token fields laid out as rows, nor their
  // lengths, remade.)
  std::vector<const Tensor*> as_input(layout_.size(), nullptr);
  std::vector<size_t> input_offset(layout_.size(), 0);
  for (size_t f = 0; f < layout_.size() && !order.empty(); ++f) {
    if ((packed_[f] && laid_out) ||
        (lengths_of_[f] >= 0 && packed_[static_cast<size_t>(lengths_of_[f])])) {
      continue;
    }
    const Tensor* in = input.Find(layout_[f].name);
    if (in == nullptr) continue;
    const auto* base = reinterpret_cast<const char*>(in->buffer().data());
    const char* at = nullptr;  // where the run starts: the first sample's bytes
    size_t total = 0;
    bool same = true;
    for (const Waiting* w : order) {
      const std::string_view b = w->bytes[f];
      if (b.empty()) continue;
      if (at == nullptr) at = b.data();
      if (b.data() != at + total) same = false;
      total += b.size();
    }
    if (at == nullptr) at = base;
    if (same && at >= base && static_cast<size_t>(at - base) + total <= in->nbytes()) {
      as_input[f] = in;
      input_offset[f] = static_cast<size_t>(at - base);
    }
  }
  std::vector<Planned> planned;
  for (size_t f = 0; f < layout_.size(); ++f) {
    const FieldSpec& field = layout_[f];
    std::vector<int64_t> shape;
    DType dtype = field.dtype;
    if (packed_[f] && laid_out) {
      shape = {n_rows, options_.seq_len};
    } else if (lengths_of_[f] >= 0 && packed_[static_cast<size_t>(lengths_of_[f])]) {
      shape = {n};
      dtype = DType::kI32;
    } else {
      int64_t total = 0;
      for (const Waiting* w : order) total += w->rows[f];
      shape = {total};
    }
    if (!(lengths_of_[f] >= 0 && packed_[static_cast<size_t>(lengths_of_[f])])) {
      shape.insert(shape.end(), field.sample_shape.begin(), field.sample_shape.end());
    }
    planned.push_back({field.name, dtype, std::move(shape)});
    if (as_input[f] != nullptr) planned.back().from_input = true;  // no room: the input's
  }
  planned.push_back({"cu_seqlens", DType::kI32, {static_cast<int64_t>(cu.size())}});
  if (laid_out) planned.push_back({"samples_per_row", DType::kI32, {n_rows}});
  size_t total_bytes = 0;
  for (Planned& p : planned) {
    size_t bytes = DTypeSize(p.dtype);
    for (int64_t d : p.shape) bytes *= static_cast<size_t>(d);
    p.offset = total_bytes;
    if (p.from_input) continue;
    total_bytes += (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  }
  HR_ASSIGN_OR_RETURN(Buffer slab, Buffer::Allocate(std::max<size_t>(total_bytes, 1), memory_));
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < planned.size(); ++i) {
    const Planned& p = planned[i];
    size_t bytes = DTypeSize(p.dtype);
    for (int64_t d : p.shape) bytes *= static_cast<size_t>(d);
    tensors.emplace_back(p.dtype, p.shape,
                         p.from_input ? as_input[i]->buffer().Slice(input_offset[i], bytes)
                                      : slab.Slice(p.offset, bytes));
  }

  for (size_t f = 0; f < layout_.size(); ++f) {
    const FieldSpec& field = layout_[f];
    const size_t row_bytes = field.sample_bytes();
    if (as_input[f] != nullptr) {
      out.fields.emplace_back(field.name, tensors[f]);
      continue;
    }
    const Tensor& t = tensors[f];
    char* base = reinterpret_cast<char*>(t.mutable_data<uint8_t>());
    if (packed_[f] && laid_out) {
      const bool labels = EndsWith(field.name, "labels") && field.sample_shape.empty();
      const int64_t pad = static_cast<int>(f) == token_ ? options_.pad_id
                          : labels                     ? options_.ignore_index
                                                       : 0;
      const int64_t row_elems = static_cast<int64_t>(row_bytes / DTypeSize(field.dtype));
      FillValue(field.dtype, base, n_rows * options_.seq_len * row_elems, pad);
      size_t k = 0;
      for (size_t r = 0; r < rows.size(); ++r) {
        char* at = base + r * static_cast<size_t>(options_.seq_len) * row_bytes;
        for (size_t j = 0; j < rows[r].size(); ++j, ++k) {
          const std::string_view bytes = order[k]->bytes[f];
          if (!bytes.empty()) std::memcpy(at, bytes.data(), bytes.size());
          stats_.bytes_copied += static_cast<int64_t>(bytes.size());
          if (labels && order[k]->tokens > 0) FillValue(field.dtype, at, 1, options_.ignore_index);
          at += bytes.size();
        }
      }
    } else if (lengths_of_[f] >= 0 && packed_[static_cast<size_t>(lengths_of_[f])]) {
      for (int64_t s = 0; s < n; ++s) {
        t.mutable_data<int32_t>()[s] = static_cast<int32_t>(order[s]->tokens);
      }
    } else {
      char* at = base;
      for (const Waiting* w : order) {
        if (!w->bytes[f].empty()) std::memcpy(at, w->bytes[f].data(), w->bytes[f].size());
        stats_.bytes_copied += static_cast<int64_t>(w->bytes[f].size());
        at += w->bytes[f].size();
      }
    }
    out.fields.emplace_back(field.name, t);
  }
  std::copy(cu.begin(), cu.end(), tensors[layout_.size()].mutable_data<int32_t>());
  out.fields.emplace_back("cu_seqlens", tensors[layout_.size()]);
  if (laid_out) {
    for (size_t r = 0; r < rows.size(); ++r) {
      tensors[layout_.size() + 1].mutable_data<int32_t>()[r] = static_cast<int32_t>(rows[r].size());
    }
    out.fields.emplace_back("samples_per_row", tensors[layout_.size() + 1]);
  }
  for (size_t c = 0; c < string_names_.size(); ++c) {
    Batch::Strings column{string_names_[c], string_lists_[c], {}};
    for (const Waiting* w : order) column.rows.push_back(w->strings[c]);
    out.strings.push_back(std::move(column));
  }
  // What the batch holds: its tokens, the capacity it leaves, its vision tokens.
  const auto is_vision = [&](int64_t id) {
    return std::find(options_.vision_token_ids.begin(), options_.vision_token_ids.end(), id) !=
           options_.vision_token_ids.end();
  };
  const Tensor& ids = tensors[static_cast<size_t>(token_)];
  const bool wide = ids.dtype() == DType::kI64;
  for (int64_t i = 0; i < ids.numel() && !options_.vision_token_ids.empty(); ++i) {
    if (is_vision(wide ? ids.data<int64_t>()[i] : int64_t{ids.data<int32_t>()[i]})) {
      ++stats_.vision_tokens;
    }
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    stats_.tokens += used[r];
    stats_.padding_tokens += options_.seq_len - used[r];
  }
  stats_.rows += n_rows;
  stats_.samples += n;
  ++stats_.batches;
  stats_.memory_reused = memory_->hits();
  stats_.memory_fresh = memory_->misses();
  CountWindowBytes();
  return out;
}

Result<std::vector<Batch>> Packer::EmitEach(const Batch& input,
                                            std::vector<std::vector<Waiting>> rows,
                                            std::vector<SampleError> errors) {
  std::vector<Batch> out;
  if (rows.empty()) rows.emplace_back();  // one (empty) batch holds the position
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<std::vector<Waiting>> one;
    one.push_back(std::move(rows[r]));
    HR_ASSIGN_OR_RETURN(Batch b, Emit(input, one, r == 0 ? std::move(errors)
                                                         : std::vector<SampleError>{}));
    if (r > 0) b.errors.clear();  // the input batch's errors go with its first
    out.push_back(std::move(b));
  }
  return out;
}

Result<std::vector<std::vector<Packer::Waiting>>> Packer::LayPlanned(
    const Batch& input, int64_t position, const std::vector<std::vector<int64_t>>& rows,
    std::vector<SampleError>& errors) {
  // `errors`: the samples the plan left out (skipped, then failed), never computed.
  for (const SampleError& e : errors) {
    ++(e.status.code() == StatusCode::kPackSkipped ? stats_.skipped : stats_.failed);
    lost_.push_back(LostSample{e, /*was_delivered=*/false});
  }
  window_.clear();
  by_tokens_.clear();
  epoch_ = input.epoch;
  // The batch's samples pass through the window only while laid out: not a window's bytes.
  const int64_t max_window_bytes = stats_.max_window_bytes;
  HR_RETURN_IF_ERROR(Admit(input, position, errors));
  stats_.max_window_bytes = max_window_bytes;
  std::map<int64_t, int64_t> arrival_of;  // dataset index -> arrival
  for (const auto& [arrival, w] : window_) arrival_of.emplace(w.index, arrival);
  std::vector<std::vector<Waiting>> laid;
  for (const std::vector<int64_t>& row : rows) {
    std::vector<Waiting> out;
    int64_t used = 0;
    for (const int64_t index : row) {
      const auto it = arrival_of.find(index);
      if (it == arrival_of.end()) continue;  // failed, or cut and failed here
      auto node = window_.extract(it->second);
      if (node.empty()) continue;
      Waiting w = std::move(node.mapped());
      if (!out.empty() && used + w.tokens > options_.seq_len) {
        laid.push_back(std::move(out));  // other than told: it starts a row of its own
        out.clear();
        used = 0;
      }
      used += w.tokens;
      out.push_back(std::move(w));
    }
    if (!out.empty()) laid.push_back(std::move(out));
  }
  // A sample of the batch that no row names (a plan that does not match it) gets rows by
  // the rule rather than be lost.
  by_tokens_.clear();
  for (const auto& [arrival, w] : window_) by_tokens_.emplace(w.tokens, arrival);
  for (auto& row : BuildRows(true, 0)) {
    if (!row.empty()) laid.push_back(std::move(row));
  }
  next_batch_ = position + 1;
  ++stats_.planned_batches;
  return laid;
}

}  // namespace headrace
