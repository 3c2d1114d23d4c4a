// Fuzz target: video.decode on arbitrary bytes (MP4, MKV or anything else), through
// the operator as the engine runs it: av::Input over the sample's bytes in memory (a
// custom AVIOContext, no file), libavformat/libavcodec, the seek to a late clip, then
// libswscale into the batch row. Two specs: a random clip of frames spread over it
// (seeks), and the first frames at a fixed fps. Then video.patchify's walk to frames by
// index (DecodeAtIndices: the packets read first, keyframe restarts without a seek,
// unreferenced frames dropped, its fallback to every frame).
//
// Properties checked besides "no crash, no leak, no UB": a failure is a data error
// (kCorruptData, kUnsupportedFormat, kResourceExhausted; never kInternal, which would
// skip the sample for a programming error). The input and the batch row are allocated
// to their exact size, so a read or write one byte past either is an ASan report.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/op_fuzz_util.h"
#include "headrace/ops/av/av_input.h"
#include "headrace/ops/video/decode.h"
#include "headrace/ops/video/patchify.h"

namespace headrace::fuzz {
namespace {

void DecodeWith(const Buffer& bytes, const VideoDecodeSpec& spec, uint64_t seed) {
  const VideoDecodeOp op(spec, /*op_position=*/0, /*slot=*/0, /*row=*/0);
  const size_t row_bytes = size_t{3} * spec.width * spec.height * spec.frames;
  std::vector<uint8_t> row(row_bytes);
  uint8_t* rows[1] = {row.data()};
  Value values[1] = {EncodedBytes{bytes.data(), bytes.size()}};
  const Status s = RunOp(op, values, rows, seed);
  HR_FUZZ_CHECK(s.ok() || IsMediaDataError(s), "unexpected status for bad video data: %s",
                s.ToString().c_str());
}

// The frames at a few indices, each handed over once per position, in order.
void WalkTo(const Buffer& bytes, const std::vector<int64_t>& indices) {
  const auto open = [&] {
    return av::Input::Open(bytes.data(), bytes.size(), av::Input::Media::kVideo, 1,
                           int64_t{64} << 20);
  };
  auto in = open();
  if (!in.ok()) {
    HR_FUZZ_CHECK(IsMediaDataError(in.status()), "unexpected status opening: %s",
                  in.status().ToString().c_str());
    return;
  }
  size_t filled = 0;
  const auto r = DecodeAtIndices(std::move(*in), open, indices, FrameWalk::kNeeded,
                                 [&](size_t first, size_t last, const AVFrame&) {
                                   HR_FUZZ_CHECK(first < last && last <= indices.size(),
                                                 "positions [%zu, %zu) of %zu", first, last,
                                                 indices.size());
                                   filled = std::max(filled, last);
                                   return Status::Ok();
                                 });
  HR_FUZZ_CHECK(r.ok() || IsMediaDataError(r.status()), "unexpected status walking: %s",
                r.status().ToString().c_str());
  if (r.ok()) HR_FUZZ_CHECK(r->filled <= indices.size(), "filled %zu", r->filled);
}

}  // namespace
}  // namespace headrace::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headrace;
  const Buffer bytes = fuzz::ExactCopy(data, size);
  fuzz::DecodeWith(bytes,
                   VideoDecodeSpec{.frames = 4, .width = 16, .height = 12, .clip_seconds = 0.5},
                   size);
  fuzz::DecodeWith(bytes,
                   VideoDecodeSpec{.frames = 3, .width = 8, .height = 8, .fps = 5,
                                   .clip_start = ClipStart::kStart,
                                   .layout = VideoLayout::kTHWC},
                   1);
  // seek: keyframe, and the exact decode it falls back to when the index lies.
  fuzz::DecodeWith(bytes,
                   VideoDecodeSpec{.frames = 4, .width = 16, .height = 12,
                                   .seek = VideoSeek::kKeyframe},
                   2);
  fuzz::WalkTo(bytes, {0, 3, 3, 7, 20, 45});
  return 0;
}
