#include "headrace/exec/packer.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <utility>

#include "headrace/core/region_allocator.h"

#include "headrace/core/ragged_rows.h"

namespace headrace {
namespace {

// Token t of a sample's token field (i64 or i32), from its bytes.
int64_t TokenAt(std::string_view bytes, DType dtype, int64_t t) {
  if (dtype == DType::kI64) {
    int64_t id = 0;
    std::memcpy(&id, bytes.data() + t * static_cast<int64_t>(sizeof id), sizeof id);
    return id;
  }
  int32_t id = 0;
  std::memcpy(&id, bytes.data() + t * static_cast<int64_t>(sizeof id), sizeof id);
  return id;
}

}  // namespace

std::string PackTooLong(int64_t tokens, const PackOptions& options) {
  return "packing: the sample's " + std::to_string(tokens) + " tokens exceed " +
         (options.budget ? "batch.max_tokens " : "batch.pack.seq_len ") +
         std::to_string(options.seq_len);
}

Status PackLeftOut(int64_t tokens, const PackOptions& options) {
  return Status::PackSkipped(PackTooLong(tokens, options) +
                             ": left out (batch.pack.overflow: skip)");
}

Result<Packer> Packer::Make(std::vector<FieldSpec> layout, PackOptions options) {
  if (options.seq_len <= 0) {
    return Status::InvalidArgument("batch.pack.seq_len: must be > 0 (got " +
                                   std::to_string(options.seq_len) + ")");
  }
  if (options.window < 0) {
    return Status::InvalidArgument("batch.pack.window: must be >= 0 (got " +
                                   std::to_string(options.window) + ")");
  }
  // A per-token field of another sequence (labels, position ids: tokens_of names
  // input_ids) is no sequence to pack by: its sequence would stay ragged beside it.
  for (const FieldSpec& f : layout) {
    if (f.name == options.token_field && !f.tokens_of.empty() && f.tokens_of != f.name) {
      return Status::InvalidArgument("batch.pack.field: '" + f.name + "' is a per-token field "
                                     "of '" + f.tokens_of + "': pack by the sequence itself, "
                                     "field: " + f.tokens_of);
    }
  }
  Packer packer(std::move(layout), std::move(options));
  if (packer.token_ < 0) {
    std::string ragged;
    for (const FieldSpec& f : packer.layout_) {
      if (f.layout == FieldLayout::kRagged && f.count_field.empty()) {
        ragged += (ragged.empty() ? "" : ", ") + f.name;
      }
    }
    return Status::InvalidArgument(
        "batch.pack: packing needs the per-sample token field '" + packer.options_.token_field +
        "' as an unpadded sequence (text.tokenize {pad: false}); the batch's ragged per-sample "
        "fields: " + (ragged.empty() ? "none" : ragged));
  }
  return packer;
}

Packer::Packer(std::vector<FieldSpec> layout, PackOptions options)
    : layout_(std::move(layout)),
      options_(std::move(options)),
      memory_(MakeVaryingPool(options_.allocator != nullptr ? options_.allocator
                                                            : DefaultAllocator(),
                              static_cast<size_t>(std::max<int64_t>(options_.pool_bytes, 0)),
                              RegionAllocator::Fit::kBest,
                              RegionAllocator::OnClose::kKeepForNext)) {
  layout_.push_back(FieldSpec{"index", DType::kI64, {}});
  packed_.assign(layout_.size(), false);
  lengths_of_.assign(layout_.size(), -1);
  for (size_t f = 0; f < layout_.size(); ++f) {
    const FieldSpec& field = layout_[f];
    const bool per_sample_ragged =
        field.layout == FieldLayout::kRagged && field.count_field.empty();
    if (per_sample_ragged && field.name == options_.token_field && field.sample_shape.empty() &&
        (field.dtype == DType::kI64 || field.dtype == DType::kI32)) {
      token_ = static_cast<int>(f);
    }
    packed_[f] = per_sample_ragged && (field.name == options_.token_field ||
                                       field.tokens_of == options_.token_field);
    if (field.layout == FieldLayout::kLengths && f > 0) lengths_of_[f] = static_cast<int>(f) - 1;
  }
}

Status Packer::Admit(const Batch& input, int64_t position, std::vector<SampleError>& errors) {
  // The waiting samples point into their batch's buffers (a Batch copy shares them), or,
  // for a batch that left its concatenated fields unjoined (Batch::sample_rows), into
  // each sample's own rows.
  auto held = std::make_shared<const Batch>(input);
  const bool from_rows = !held->sample_rows.empty();
  if (from_rows && static_cast<int64_t>(held->sample_rows.size()) != held->size()) {
    return Status::Internal("packing: the batch has " + std::to_string(held->size()) +
                            " samples but the rows of " +
                            std::to_string(held->sample_rows.size()));
  }
  const auto in_rows = [&](size_t f) { return from_rows && layout_[f].concatenated(); };
  std::vector<std::vector<int64_t>> offsets;
  std::vector<const Tensor*> tensors;
  int64_t tensor_bytes = 0;
  for (size_t f = 0; f < layout_.size(); ++f) {
    tensors.push_back(held->Find(layout_[f].name));
    if (in_rows(f)) {
      offsets.emplace_back();
      continue;
    }
    HR_ASSIGN_OR_RETURN(std::vector<int64_t> o, SampleOffsets(*held, layout_[f]));
    offsets.push_back(std::move(o));
    tensor_bytes += static_cast<int64_t>(tensors.back()->nbytes());
  }
  // Sample s's values of field f: their bytes and rows (entries for a lengths field).
  const auto view = [&](size_t f, int64_t s) -> std::pair<std::string_view, int64_t> {
    const FieldSpec& field = layout_[f];
    if (in_rows(f)) {
      const RaggedRows& r = *held->sample_rows[static_cast<size_t>(s)];
      if (field.layout == FieldLayout::kLengths) {  // of the ragged field before it
        const std::span<const int32_t> l = r.lengths(static_cast<int>(f) - 1);
        return {{reinterpret_cast<const char*>(l.data()), l.size_bytes()},
                static_cast<int64_t>(l.size())};
      }
      const std::span<const uint8_t> b = r.bytes(static_cast<int>(f));
      return {{reinterpret_cast<const char*>(b.data()), b.size()}, r.rows(static_cast<int>(f))};
    }
    const int64_t begin = offsets[f][s];
    const int64_t rows = offsets[f][s + 1] - begin;
    const size_t row_bytes = field.sample_bytes();
    return {{reinterpret_cast<const char*>(tensors[f]->buffer().data()) +
                 row_bytes * static_cast<size_t>(begin),
             row_bytes * static_cast<size_t>(rows)},
            rows};
  };
  if (string_names_.empty()) {
    for (const Batch::Strings& column : input.strings) {
      string_names_.push_back(column.name);
      string_lists_.push_back(column.list);
    }
  }
  std::vector<const Batch::Strings*> columns;
  for (const std::string& name : string_names_) {
    const auto it = std::find_if(input.strings.begin(), input.strings.end(),
                                 [&](const Batch::Strings& c) { return c.name == name; });
    if (it == input.strings.end() || static_cast<int64_t>(it->rows.size()) != input.size()) {
      return Status::InvalidArgument("packing: the batch's string field '" + name +
                                     "' is missing or has another number of rows");
    }
    columns.push_back(&*it);
  }
  const bool replay = replaying(position);
  const DType token_dtype = layout_[static_cast<size_t>(token_)].dtype;
  const int64_t* index = input.Find("index")->data<int64_t>();
  const auto id_of = [&](int64_t s) -> std::string {
    for (const Batch::Strings* c : columns) {
      if (c->name == "id" && !c->rows[static_cast<size_t>(s)].empty()) {
        return c->rows[static_cast<size_t>(s)].front();
      }
    }
    return "";
  };
  for (int64_t s = 0; s < input.size(); ++s) {
    if (replay && !std::binary_search(replay_waiting_.begin(), replay_waiting_.end(), index[s])) {
      continue;  // packed before the state was taken
    }
    const auto [token_bytes, length] = view(static_cast<size_t>(token_), s);
    int64_t keep = length;
    // Data lost: an error of the packed batch, and a sample the consumer counts as lost.
    const auto lose = [&](Status status) {
      SampleError e{input.epoch, index[s], id_of(s), std::move(status)};
      lost_.push_back(LostSample{e, /*was_delivered=*/true});
      errors.push_back(std::move(e));
    };
    if (length > options_.seq_len) {
      const std::string too_long = PackTooLong(length, options_);
      if (options_.overflow == PackOverflow::kSkip) {
        if (!replay) {
          ++stats_.skipped;
          lose(PackLeftOut(length, options_));
        }
        continue;
      }
      int64_t cut_vision = 0;
      int64_t vision = 0;
      for (int64_t t = 0; t < length; ++t) {
        const int64_t id = TokenAt(token_bytes, token_dtype, t);
        if (std::find(options_.vision_token_ids.begin(), options_.vision_token_ids.end(), id) !=
            options_.vision_token_ids.end()) {
          ++vision;
          if (t >= options_.seq_len) ++cut_vision;
        }
      }
      if (cut_vision > 0) {
        if (!replay) {
          ++stats_.failed;
          lose(Status::InvalidArgument(
              too_long + ", and the cut would drop " + std::to_string(cut_vision) + " of its " +
              std::to_string(vision) +
              " vision tokens (raise seq_len, or lower the images' max_pixels)"));
        }
        continue;
      }
      keep = options_.seq_len;
      if (!replay) {
        ++stats_.truncated;
        lose(Status::PackTruncated(too_long + ": cut to " + std::to_string(keep) +
                                   " (batch.pack.overflow: truncate)"));
      }
    }
    Waiting w;
    w.index = index[s];
    w.from_batch = position;
    w.tokens = keep;
    w.owner = held;
    w.owner_bytes = tensor_bytes;
    if (from_rows) w.rows_owner = held->sample_rows[static_cast<size_t>(s)];
    bool aligned = true;
    for (size_t f = 0; f < layout_.size(); ++f) {
      auto [bytes, rows] = view(f, s);
      if (packed_[f]) {
        aligned = aligned && rows == length;
        rows = keep;
      }
      if (lengths_of_[f] >= 0 && packed_[static_cast<size_t>(lengths_of_[f])]) rows = 0;  // remade
      w.bytes.push_back(bytes.substr(0, layout_[f].sample_bytes() * static_cast<size_t>(rows)));
      w.rows.push_back(rows);
    }
    if (!aligned) {
      return Status::InvalidArgument("packing: sample " + std::to_string(w.index) +
                                     " has token fields of different lengths (each field with "
                                     "tokens_of '" + options_.token_field + "' must have one row "
                                     "per token)");
    }
    for (const Batch::Strings* c : columns) w.strings.push_back(c->rows[static_cast<size_t>(s)]);
    const int64_t arrival = arrivals_++;
    by_tokens_.emplace(w.tokens, arrival);
    window_.emplace(arrival, std::move(w));
  }
  CountWindowBytes();
  last_input_ = held.get();
  return Status::Ok();
}

void Packer::CountWindowBytes() {
  std::vector<std::pair<const void*, int64_t>> owners;
  stats_.window_bytes = 0;
  for (const auto& [arrival, w] : window_) {
    owners.emplace_back(w.owner.get(), w.owner_bytes);
    if (w.rows_owner != nullptr) stats_.window_bytes += static_cast<int64_t>(w.rows_owner->held_bytes());
  }
  std::sort(owners.begin(), owners.end());
  owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
  for (const auto& [owner, bytes] : owners) stats_.window_bytes += bytes;
  stats_.window_samples = static_cast<int64_t>(window_.size());
  stats_.max_window_bytes = std::max(stats_.max_window_bytes, stats_.window_bytes);
}

Status Packer::Carry(const void* input) {
  const auto aligned = [](size_t n) {
    return (n + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  };
  // A sample's fields in its own rows (rows_owner) stay there; the rest is copied.
  const auto own = [&](const Waiting& w, size_t f) {
    return w.rows_owner != nullptr && layout_[f].concatenated();
  };
  size_t total = 0;
  for (const auto& [arrival, w] : window_) {
    if (w.owner.get() != input) continue;
    for (size_t f = 0; f < w.bytes.size(); ++f) {
      if (!own(w, f)) total += aligned(w.bytes[f].size());
    }
  }
  if (total == 0) {
    for (auto& [arrival, w] : window_) {
      if (w.owner.get() == input) w.owner.reset(), w.owner_bytes = 0;
    }
    return Status::Ok();
  }
  HR_ASSIGN_OR_RETURN(Buffer copy, Buffer::Allocate(total, memory_));
  auto owner = std::make_shared<const Buffer>(copy);
  char* at = reinterpret_cast<char*>(copy.mutable_data());
  for (auto& [arrival, w] : window_) {
    if (w.owner.get() != input) continue;
    for (size_t f = 0; f < w.bytes.size(); ++f) {
      if (own(w, f)) continue;
      std::string_view& b = w.bytes[f];
      if (!b.empty()) std::memcpy(at, b.data(), b.size());
      stats_.bytes_copied += static_cast<int64_t>(b.size());
      b = std::string_view(at, b.size());
      at += aligned(b.size());
    }
    w.owner = owner;
    w.owner_bytes = static_cast<int64_t>(total);
  }
  CountWindowBytes();
  return Status::Ok();
}

int64_t PackWindowAt(const PackOptions& options, int64_t position, int64_t samples) {
  if (options.budget || options.epoch_batches <= 0) return options.window;
  const int64_t still = std::max<int64_t>(options.epoch_batches - 1 - position, 0);
  return std::min(options.window, still * std::max<int64_t>(samples, 1) / 2);
}

int64_t Packer::WindowAt(int64_t position, int64_t samples) const {
  return PackWindowAt(options_, position, samples);
}

std::vector<std::vector<Packer::Waiting>> Packer::BuildRows(bool flush, int64_t window) {
  return TakePackRows(window_, by_tokens_, options_.seq_len, flush, window);
}

Result<std::optional<std::vector<std::vector<Packer::Waiting>>>> Packer::Take(
    const Batch& input, int64_t position, bool last_in_epoch, std::vector<SampleError>& errors) {
  if (epoch_ >= 0 && (input.epoch != epoch_ || position != next_batch_)) {
    return Status::Internal("packing: expected input batch " + std::to_string(next_batch_) +
                            " of epoch " + std::to_string(epoch_) + ", got batch " +
                            std::to_string(position) + " of epoch " +
                            std::to_string(input.epoch) + " (batches must come in order)");
  }
  epoch_ = input.epoch;
  HR_RETURN_IF_ERROR(Admit(input, position, errors));
  next_batch_ = position + 1;
  if (replaying(position)) {
    HR_RETURN_IF_ERROR(Carry(last_input_));
    return std::optional<std::vector<std::vector<Waiting>>>();
  }
  if (replay_.has_value()) {
    // The replay is over: the window must be the saved one.
    std::vector<int64_t> now;
    for (const auto& [arrival, w] : window_) {
      if (w.from_batch < replay_->next_batch) now.push_back(w.index);
    }
    std::sort(now.begin(), now.end());
    if (now != replay_waiting_) {
      return Status::InvalidArgument(
          "packing: resume: the saved window's " + std::to_string(replay_waiting_.size()) +
          " samples are not those the replayed batches hold (" + std::to_string(now.size()) +
          " found): the dataset or the pipeline changed since the state was saved");
    }
    replay_.reset();
    replay_waiting_.clear();
  }
  std::vector<std::vector<Waiting>> rows =
      BuildRows(last_in_epoch, WindowAt(position, static_cast<int64_t>(input.size())));
  HR_RETURN_IF_ERROR(Carry(last_input_));
  if (last_in_epoch) {
    epoch_ = input.epoch + 1;
    next_batch_ = 0;
  }
  return std::optional<std::vector<std::vector<Waiting>>>(std::move(rows));
}

namespace {
Batch EmptyLike(const Batch& input) {
  Batch empty;
  empty.epoch = input.epoch;
  empty.index_in_epoch = input.index_in_epoch;
  empty.global_index = input.global_index;
  return empty;
}
}  // namespace

Result<Batch> Packer::Push(const Batch& input, int64_t position, bool last_in_epoch) {
  std::vector<SampleError> errors;
  HR_ASSIGN_OR_RETURN(auto rows, Take(input, position, last_in_epoch, errors));
  if (!rows.has_value()) return EmptyLike(input);
  return Emit(input, *rows, std::move(errors));
}

Result<std::vector<Batch>> Packer::PushBudget(const Batch& input, int64_t position,
                                              bool last_in_epoch) {
  std::vector<SampleError> errors;
  HR_ASSIGN_OR_RETURN(auto rows, Take(input, position, last_in_epoch, errors));
  if (!rows.has_value()) return std::vector<Batch>();
  return EmitEach(input, std::move(*rows), std::move(errors));
}

Result<Batch> Packer::PushPlanned(const Batch& input, int64_t position,
                                  const std::vector<std::vector<int64_t>>& rows,
                                  std::vector<SampleError> skipped,
                                  std::vector<SampleError> failed) {
  std::vector<SampleError> errors = std::move(skipped);
  for (SampleError& e : failed) errors.push_back(std::move(e));
  HR_ASSIGN_OR_RETURN(auto laid, LayPlanned(input, position, rows, errors));
  return Emit(input, laid, std::move(errors));
}

Result<std::vector<Batch>> Packer::PushPlannedBudget(
    const Batch& input, int64_t position, const std::vector<std::vector<int64_t>>& rows,
    std::vector<SampleError> skipped, std::vector<SampleError> failed) {
  std::vector<SampleError> errors = std::move(skipped);
  for (SampleError& e : failed) errors.push_back(std::move(e));
  HR_ASSIGN_OR_RETURN(auto laid, LayPlanned(input, position, rows, errors));
  return EmitEach(input, std::move(laid), std::move(errors));
}

PackState Packer::state() const {
  PackState s;
  s.epoch = std::max<int64_t>(epoch_, 0);
  s.next_batch = next_batch_;
  s.from_batch = window_.empty() ? next_batch_ : window_.begin()->second.from_batch;
  for (const auto& [arrival, w] : window_) s.waiting.push_back(w.index);
  return s;
}

void Packer::Restore(const PackState& state) {
  window_.clear();
  by_tokens_.clear();
  CountWindowBytes();
  epoch_ = state.epoch;
  next_batch_ = state.from_batch;
  if (state.from_batch < state.next_batch) {
    replay_ = state;
    replay_waiting_ = state.waiting;
    std::sort(replay_waiting_.begin(), replay_waiting_.end());
  } else {
    replay_.reset();
    replay_waiting_.clear();
  }
}

}  // namespace headrace
