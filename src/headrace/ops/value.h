// Named values: what operators read and write in a sample's context.
//
// A sample's chain passes values between operators by name ("image", "conversation",
// "depth"). The planner gives each name a slot at plan time (pipeline/plan.cc), so an
// operator finds its input by index, never by string, and a value is a small view:
// the bytes or pixels it points at live in the sample (encoded media, the record's
// turns) or in the thread's scratch arena.
//
// A new modality adds an alternative to Value and a ValueKind (audio samples, video
// frames, point clouds); existing operators do not change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>

#include "headrace/core/sample.h"
#include "headrace/ops/image_view.h"

namespace headrace {

// Encoded media as read from storage (a JPEG file, a WAV file, ...): a view of the
// sample's bytes, decoded in place.
struct EncodedBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
  // An object read in ranges instead (PlanContext::ReadInRanges): data is then null.
  MediaReader* reader = nullptr;
};

// A conversation: a view of the record's turns.
struct TurnsView {
  std::span<const Turn> turns;
};

// Decoded audio: float samples in [-1, 1], planar (channel c's frames at data + c *
// frames), in the thread's scratch arena.
//
// A view may hold only part of its stream: samples [first, first + frames) of
// `stream_frames`, when the planner found that the ops after the producer read one window
// of it and told the producer which (AudioWindowHint, ops/op_plan.h: audio.decode then
// decodes little more than the window audio.crop keeps). Only the ops that asked for the
// window get such a view; any other reader gets the whole stream.
struct AudioView {
  const float* data = nullptr;
  int channels = 0;
  int64_t frames = 0;  // samples per channel held
  int sample_rate = 0;
  int64_t first = 0;          // the stream's sample at data (0: from the start)
  int64_t stream_frames = 0;  // the stream's length; 0: `frames` (the whole stream is held)

  const float* channel(int c) const { return data + static_cast<int64_t>(c) * frames; }
  int64_t total_frames() const { return stream_frames > 0 ? stream_frames : frames; }
  bool whole() const { return first == 0 && total_frames() == frames; }
};

// A point cloud: `count` points of `channels` float32 values each, row-major (point i's
// values at data + i * channels), in the thread's scratch arena. The point-cloud ops
// write kPointChannels: x, y, z (metres, sensor frame) and intensity.
inline constexpr int kPointChannels = 4;
struct PointsView {
  const float* data = nullptr;
  int64_t count = 0;
  int channels = kPointChannels;
  const float* point(int64_t i) const { return data + i * channels; }
};

// One value of a sample. std::monostate: the sample has no such value (a record without
// an item for a media field).
using Value =
    std::variant<std::monostate, EncodedBytes, ImageView, TurnsView, AudioView, PointsView>;

// What a value holds, as declared at plan time. Each kind is one alternative of Value.
enum class ValueKind {
  kEncoded,       // EncodedBytes: media not decoded yet
  kImage,         // ImageView: 8-bit pixels (shape: height, width, channels)
  kConversation,  // TurnsView: the record's turns
  kAudio,         // AudioView: samples (shape: channels, frames; ValueDesc::rate)
  kPoints,        // PointsView: a point cloud (shape: points, channels)
};

// "encoded bytes", "an image", "a conversation": for messages.
std::string_view ValueKindName(ValueKind kind);

// The Value alternative of each kind.
template <ValueKind K>
struct ValueTypeOf;
template <>
struct ValueTypeOf<ValueKind::kEncoded> {
  using type = EncodedBytes;
};
template <>
struct ValueTypeOf<ValueKind::kImage> {
  using type = ImageView;
};
template <>
struct ValueTypeOf<ValueKind::kConversation> {
  using type = TurnsView;
};
template <>
struct ValueTypeOf<ValueKind::kAudio> {
  using type = AudioView;
};
template <>
struct ValueTypeOf<ValueKind::kPoints> {
  using type = PointsView;
};

// A value filled from the sample before its chain runs: the planner's binding of one
// source field to a context slot.
struct SourceValue {
  enum class From {
    kMedia,         // EncodedBytes of the sample's media item for `field`; absent if none
    kConversation,  // TurnsView of the record's turns
  };
  From from = From::kMedia;
  int field = 0;  // the source field's index (what MediaRef::field names)
  int slot = 0;
};

// Empties `values` and fills the `sources` from `sample`: what the executor (and
// `bench ops`) does before a sample's chain. Allocates nothing.
void FillSourceValues(std::span<const SourceValue> sources, const Sample& sample,
                      std::span<Value> values);

}  // namespace headrace
