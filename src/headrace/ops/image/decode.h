// image.decode: encoded bytes (JPEG, PNG, WebP) -> an 8-bit RGBX image.
//
// Output is always 4 channels (RGBX): the padding byte is unspecified (0xFF, or the
// dropped alpha) and no operator reads it. RGBX is what the libyuv kernels used
// downstream (scale, mirror, rotate) take natively, and TurboJPEG writes it as fast as
// RGB; see README.md for the measurements.
//
// Colour handling, all converted to RGB:
//   - grayscale: replicated into R, G and B;
//   - CMYK / YCCK JPEG: converted with R = C*K/255 on the stored (Adobe-inverted)
//     values, as PIL and browsers do (TurboJPEG itself refuses CMYK -> RGB);
//   - alpha (PNG, WebP, PNG tRNS): DROPPED, not composited, the colour channels are kept
//     as stored. This matches PIL's `convert("RGB")`, which is what torchvision pipelines
//     train on.
// EXIF orientation (1-8) is applied to JPEGs; PNG and WebP are returned as stored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"

namespace headrace {

struct DecodeSpec {  // image.decode
  // Images whose header declares more pixels are rejected before decoding
  // (decompression bombs). Default: PIL's MAX_IMAGE_PIXELS.
  int64_t max_pixels = 89'478'485;
  // The value read (encoded bytes: a media field of the source) and replaced by the
  // decoded image.
  std::string field = "image";
};

// The container formats image.decode recognises (by magic bytes, not by file name).
enum class ImageFormat {
  kJpeg,  // starts FF D8 FF
  kPng,   // starts 89 'PNG' 0D 0A 1A 0A
  kWebp,  // starts 'RIFF' <size> 'WEBP'
};

std::string_view ImageFormatName(ImageFormat format);  // "jpeg", "png", "webp"

// What the header says, read without decoding any pixels.
struct ImageHeader {
  ImageFormat format = ImageFormat::kJpeg;
  int width = 0;        // as stored, before orientation
  int height = 0;       // as stored, before orientation
  int orientation = 1;  // EXIF orientation 1-8 (JPEG only; 1 when absent or invalid)
  bool cmyk = false;    // a JPEG stored as CMYK or YCCK
};

// The smallest image the following operators need, so that JPEG decoding can scale in
// the DCT domain (by 1/2, 1/4 or 1/8: the only factors faster than a full decode). All
// sizes are of the displayed image, i.e. after EXIF rotation. 0 = no constraint; when
// all are 0 the image is decoded at full size.
//
// Setting any constraint also declares that a downscale follows, so JPEG chroma is
// upsampled with the fast (nearest) method, as libyuv's YUV -> RGB does: ~9% faster at
// 640x480 and averaged away by the resize.
struct DecodeTarget {
  int min_shorter_side = 0;
  int min_width = 0;
  int min_height = 0;
  // SizeHint::max_aspect_ratio: an image whose header is wider is refused (kPixelLimit)
  // before any pixel is decoded, as the image.smart_resize after would refuse it. 0: none.
  double max_aspect_ratio = 0;

  bool any() const { return min_shorter_side > 0 || min_width > 0 || min_height > 0; }
};

// How an image will be decoded: the header plus the chosen DCT scale and the sizes.
struct DecodePlan {
  ImageHeader header;
  int scale_denom = 1;         // JPEG DCT scale 1/scale_denom: 1, 2, 4 or 8
  bool fast_upsample = false;  // JPEG: nearest chroma upsampling (target.any())
  int decoded_width = 0;       // what the decoder writes (before orientation)
  int decoded_height = 0;
  int width = 0;  // the final image (after orientation)
  int height = 0;
};

// Reads the header. Fails with kCorruptData for zero-byte, truncated or malformed
// headers and kUnsupportedFormat for unknown magic bytes.
Result<ImageHeader> ReadImageHeader(const uint8_t* data, size_t size);

// The widest PNG decoded: libpng's two row buffers (up to 8 + 4 bytes a pixel) stay
// within 64 MiB. (JPEG and WebP headers cannot declare rows this wide.)
inline constexpr int kPngMaxWidth = (64 << 20) / 12;

// Reads the header, enforces spec.max_pixels and kPngMaxWidth (kPixelLimit, before any
// pixel is decoded) and picks the DCT scale for `target`.
Result<DecodePlan> PlanDecode(const uint8_t* data, size_t size, const DecodeSpec& spec,
                              DecodeTarget target);

// Decodes into `dst`, which must be plan.decoded_width x plan.decoded_height with 4
// channels; orientation is NOT applied (see ApplyOrientation). Fails with
// kCorruptData (message says what) for damaged data.
Status DecodeInto(const uint8_t* data, size_t size, const DecodePlan& plan, MutableImageView dst);

// Writes `src` transformed by EXIF `orientation` (1-8) into `dst`, whose size must be
// src's, swapped for orientations 5-8. 4-channel images only; dst must not alias src.
Status ApplyOrientation(ImageView src, int orientation, MutableImageView dst);

// Plan + decode + orientation into a newly allocated RGBX image (tests and tools).
Result<Image> DecodeImage(const uint8_t* data, size_t size, const DecodeSpec& spec,
                          DecodeTarget target = {});

// The operator: decodes the encoded bytes of value `field` in place (no copy) into
// scratch and replaces the value with the image. Uses one scratch slot, two when the
// image needs re-orienting. A sample without the value fails with kMissingField.
class DecodeOp : public Op {
 public:
  static constexpr std::string_view kName = "image.decode";
  static constexpr std::string_view kDoc =
      "JPEG/PNG/WebP to RGB pixels; rejects images above max_pixels.";
  using Spec = DecodeSpec;
  static void Fields(auto& s, auto&& f) {
    f("max_pixels", s.max_pixels);
    f("field", s.field);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads `field` as encoded bytes, writes it as an RGBX image of unknown size.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  // The decoder scales to what the ops after it need of the image (ctx.hint).
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{}; }

  // slot: the value read and written (SampleContext::values).
  DecodeOp(const DecodeSpec& spec, DecodeTarget target, int slot);

  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;
  // The image's size from its header (PlanDecode: orientation and DCT scale included).
  bool Predict(SizePass& pass) const override;
  Telling Tells() const override { return Telling::kRows; }
  // The size the ops after it need (from ResizeOp::Hint through the planner).
  const DecodeTarget& target() const { return target_; }

 private:
  DecodeSpec spec_;
  DecodeTarget target_;
  int slot_;
};

}  // namespace headrace
