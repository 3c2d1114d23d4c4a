// Fuzz target: video.decode on arbitrary bytes (MP4, MKV or anything else), through
// the operator as the engine runs it: av::Input over the sample's bytes in memory (a
// custom AVIOContext, no file), libavformat/libavcodec, the seek to a late clip, then
// libswscale into the batch row. Two specs: a random clip of frames spread over it
// (seeks), and the first frames at a fixed fps.
//
// Properties checked besides "no crash, no leak, no UB": a failure is a data error
// (kCorruptData, kUnsupportedFormat, kResourceExhausted; never kInternal, which would
// skip the sample for a programming error). The input and the batch row are allocated
// to their exact size, so a read or write one byte past either is an ASan report.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/op_fuzz_util.h"
#include "headrace/ops/video/decode.h"

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
  return 0;
}
