#include "headrace/ops/op.h"

namespace headrace {

uint8_t* ScratchArena::Get(int slot, size_t bytes) {
  Buffer& buffer = slots_[slot];
  if (buffer.size() < bytes) {
    // Grow with headroom so that images of slowly increasing size do not reallocate
    // on every sample.
    auto grown = Buffer::Allocate(bytes + bytes / 4);
    if (!grown.ok()) return nullptr;
    buffer = *std::move(grown);
  }
  return buffer.mutable_data();
}

size_t ScratchArena::capacity() const {
  size_t total = 0;
  for (const Buffer& b : slots_) total += b.size();
  return total;
}

Result<MutableImageView> SampleContext::NextScratchImage(int width, int height, int channels) {
  const int64_t stride = static_cast<int64_t>(width) * channels;
  uint8_t* data = scratch->Get(next_scratch, static_cast<size_t>(stride) * height);
  if (data == nullptr) return Status::ResourceExhausted("scratch image allocation failed");
  next_scratch = (next_scratch + 1) % ScratchArena::kSlots;
  return MutableImageView{data, width, height, channels, stride};
}

}  // namespace headrace
