// Fuzz target: image.decode on arbitrary bytes (JPEG, PNG, WebP or anything else).
//
// Each input goes through both forms of the decoder:
//   - the kernel, PlanDecode + DecodeInto + ApplyOrientation, into exactly-sized
//     images at full size, so AddressSanitizer sees a write one byte past a row;
//   - the operator, DecodeOp::Run, with a downscale target, as the engine calls it
//     (DCT scaling, fast upsampling, the scratch arena).
// Properties checked besides "no crash, no leak, no UB": a failure is a data error
// (never kInternal, which would skip the sample for a programming error), and nothing
// larger than max_pixels is ever decoded.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "headrace/core/sample.h"
#include "headrace/ops/image/decode.h"

namespace headrace::fuzz {
namespace {

// Small enough that a header declaring the limit decodes in milliseconds under ASan,
// and that libFuzzer's -rss_limit_mb is never the reason a run stops.
constexpr int64_t kMaxPixels = 1 << 18;  // 512 x 512

bool IsDataError(const Status& s) {
  switch (s.code()) {
    case StatusCode::kCorruptData:
    case StatusCode::kUnsupportedFormat:
    case StatusCode::kPixelLimit:
    case StatusCode::kResourceExhausted: return true;
    default: return false;
  }
}

void CheckFailure(const Status& s) {
  HR_FUZZ_CHECK(IsDataError(s), "unexpected status for bad image data: %s", s.ToString().c_str());
}

void CheckSize(int width, int height) {
  HR_FUZZ_CHECK(width > 0 && height > 0 && int64_t{width} * height <= kMaxPixels,
                "decoded %dx%d, max_pixels is %lld", width, height,
                static_cast<long long>(kMaxPixels));
}

void DecodeWithKernel(const Buffer& bytes, const DecodeSpec& spec) {
  Result<DecodePlan> plan = PlanDecode(bytes.data(), bytes.size(), spec, DecodeTarget{});
  if (!plan.ok()) return CheckFailure(plan.status());
  CheckSize(plan->decoded_width, plan->decoded_height);
  const int w = plan->decoded_width, h = plan->decoded_height;
  std::vector<uint8_t> pixels(static_cast<size_t>(w) * h * 4);
  const MutableImageView decoded{pixels.data(), w, h, 4, int64_t{w} * 4};
  if (Status s = DecodeInto(bytes.data(), bytes.size(), *plan, decoded); !s.ok()) {
    return CheckFailure(s);
  }
  if (plan->header.orientation == 1) return;
  std::vector<uint8_t> oriented(pixels.size());
  const MutableImageView out{oriented.data(), plan->width, plan->height, 4,
                             int64_t{plan->width} * 4};
  const Status s = ApplyOrientation(decoded, plan->header.orientation, out);
  HR_FUZZ_CHECK(s.ok(), "ApplyOrientation: %s", s.ToString().c_str());
}

void DecodeWithOp(const Buffer& bytes, const DecodeSpec& spec) {
  static const DecodeOp op(spec, DecodeTarget{.min_shorter_side = 16}, /*slot=*/0);
  SampleRecord record;
  record.media.push_back(MediaRef{0, "fuzz"});
  Sample sample;
  sample.record = &record;
  sample.media = {Sample::Item{0, bytes, "fuzz"}};
  ScratchArena scratch;
  Value values[1] = {EncodedBytes{bytes.data(), bytes.size()}};
  SampleContext ctx;
  ctx.sample = &sample;
  ctx.scratch = &scratch;
  ctx.values = values;
  if (Status s = op.Run(ctx); !s.ok()) return CheckFailure(s);
  const ImageView* image = ctx.Get<ImageView>(0);
  HR_FUZZ_CHECK(image != nullptr, "no decoded image");
  CheckSize(image->width, image->height);
  HR_FUZZ_CHECK(image->channels == 4 && image->data != nullptr, "bad decoded image");
}

}  // namespace
}  // namespace headrace::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headrace;
  const Buffer bytes = fuzz::ExactCopy(data, size);
  const DecodeSpec spec{.max_pixels = fuzz::kMaxPixels};
  fuzz::DecodeWithKernel(bytes, spec);
  fuzz::DecodeWithOp(bytes, spec);
  return 0;
}
