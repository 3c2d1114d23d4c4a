#include "headrace/ops/op.h"

#include <vector>

#include "headrace/core/atomic_max.h"

namespace headrace {

void ScratchUsage::Add(int64_t delta) {
  const int64_t held = held_.fetch_add(delta, std::memory_order_relaxed) + delta;
  StoreMax(peak_, held);
}

ScratchArena::~ScratchArena() { Account(nullptr); }

void ScratchArena::Account(ScratchUsage* usage) {
  if (nested_ != nullptr) nested_->Account(usage);
  if (usage == usage_) return;
  const auto held = static_cast<int64_t>(capacity());
  if (usage_ != nullptr) usage_->Add(-held);
  usage_ = usage;
  if (usage_ != nullptr) usage_->Add(held);
}

uint8_t* ScratchArena::Get(int slot, size_t bytes) {
  Buffer& buffer = slots_[slot];
  if (buffer.size() < bytes) {
    // Grow with headroom so that images of slowly increasing size do not reallocate
    // on every sample.
    auto grown = Buffer::Allocate(bytes + bytes / 4);
    if (!grown.ok()) return nullptr;
    if (usage_ != nullptr) {
      usage_->Add(static_cast<int64_t>(grown->size()) - static_cast<int64_t>(buffer.size()));
    }
    buffer = *std::move(grown);
  }
  return buffer.mutable_data();
}

size_t ScratchArena::capacity() const {
  size_t total = nested_ != nullptr ? nested_->capacity() : 0;
  for (const Buffer& b : slots_) total += b.size();
  return total;
}

ScratchArena& ScratchArena::Nested() {
  if (nested_ == nullptr) {
    nested_ = std::make_unique<ScratchArena>();
    nested_->Account(usage_);
  }
  return *nested_;
}

void TellRows(std::span<const std::unique_ptr<Op>> ops, const SampleContext& ctx,
              std::span<int64_t> rows, ToldSequence* sequence, std::vector<int64_t>* patches) {
  thread_local std::vector<SizePass::Size> images;
  thread_local std::vector<std::vector<int64_t>> grids;
  images.assign(ctx.values.size(), {});
  grids.resize(rows.size());
  for (std::vector<int64_t>& g : grids) g.clear();
  SizePass pass{&ctx, images, rows, std::span(grids.data(), rows.size()), sequence};
  for (const auto& op : ops) {
    if (!op->Predict(pass)) break;
  }
  if (patches == nullptr) return;
  for (const std::vector<int64_t>& g : grids) {
    for (size_t i = 0; i + 2 < g.size(); i += 3) patches->push_back(g[i] * g[i + 1] * g[i + 2]);
  }
}

Status ReserveRows(std::span<const std::unique_ptr<Op>> ops, SampleContext& ctx) {
  if (ctx.ragged == nullptr) return Status::Ok();
  thread_local std::vector<int64_t> rows;
  rows.assign(static_cast<size_t>(ctx.ragged->fields()), 0);
  TellRows(ops, ctx, rows);
  HR_RETURN_IF_ERROR(ctx.ragged->CheckTold(rows));
  (void)ctx.ragged->ReserveTold(rows);  // not the sample's failure: an Append says so
  return Status::Ok();
}

template <typename F>
void ScratchArena::ForEachBuffer(F&& f) {
  for (Buffer& b : slots_) f(b);
  if (nested_ != nullptr) {
    for (Buffer& b : nested_->slots_) f(b);
  }
}

size_t ScratchArena::Trim(size_t retain_bytes) {
  size_t freed = 0;
  for (size_t held = capacity(); held > retain_bytes;) {
    Buffer* largest = &slots_[0];
    ForEachBuffer([&](Buffer& b) {
      if (b.size() > largest->size()) largest = &b;
    });
    held -= largest->size();
    freed += largest->size();
    *largest = Buffer();
  }
  // Both arenas count in the same usage (Account keeps them together).
  if (usage_ != nullptr) usage_->Add(-static_cast<int64_t>(freed));
  return freed;
}

Result<MutableImageView> SampleContext::NextScratchImage(int width, int height, int channels) {
  const int64_t stride = static_cast<int64_t>(width) * channels;
  uint8_t* data = scratch->Get(next_scratch, static_cast<size_t>(stride) * height);
  if (data == nullptr) return Status::ResourceExhausted("scratch image allocation failed");
  next_scratch = (next_scratch + 1) % ScratchArena::kSlots;
  return MutableImageView{data, width, height, channels, stride};
}

Result<uint8_t*> SampleContext::NextScratchBytes(size_t bytes) {
  uint8_t* data = scratch->Get(next_scratch, bytes);
  if (data == nullptr) return Status::ResourceExhausted("scratch allocation failed");
  next_scratch = (next_scratch + 1) % ScratchArena::kSlots;
  return data;
}

}  // namespace headrace
