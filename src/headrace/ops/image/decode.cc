#include "headrace/ops/image/decode.h"

#include "headrace/ops/schema.h"

#include <png.h>
#include <turbojpeg.h>
#include <webp/decode.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>

#include "libyuv/rotate_argb.h"

namespace headrace {
namespace {

constexpr uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};

std::string Dims(int64_t w, int64_t h) { return std::to_string(w) + "x" + std::to_string(h); }

uint32_t LoadBE32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// --- format detection -----------------------------------------------------------------

// Which format the first bytes announce. Inputs shorter than a magic number that are a
// prefix of one are truncated files of that format, not unknown ones.
Result<ImageFormat> DetectFormat(const uint8_t* data, size_t size) {
  if (size == 0) return Status::CorruptData("empty (zero-byte) image data");
  auto prefix_of = [&](const uint8_t* magic, size_t n) {
    return std::memcmp(data, magic, std::min(size, n)) == 0;
  };
  static constexpr uint8_t kJpegMagic[3] = {0xFF, 0xD8, 0xFF};
  if (prefix_of(kJpegMagic, 3)) {
    if (size < 3) return Status::CorruptData("truncated JPEG: " + std::to_string(size) + " bytes");
    return ImageFormat::kJpeg;
  }
  if (prefix_of(kPngMagic, 8)) {
    if (size < 8) return Status::CorruptData("truncated PNG: " + std::to_string(size) + " bytes");
    return ImageFormat::kPng;
  }
  static constexpr uint8_t kRiff[4] = {'R', 'I', 'F', 'F'};
  static constexpr uint8_t kWebp[4] = {'W', 'E', 'B', 'P'};
  if (prefix_of(kRiff, 4) &&
      (size <= 8 || std::memcmp(data + 8, kWebp, std::min<size_t>(size - 8, 4)) == 0)) {
    if (size < 12) return Status::CorruptData("truncated WebP: " + std::to_string(size) + " bytes");
    return ImageFormat::kWebp;
  }
  return Status::UnsupportedFormat("unknown image format (not JPEG, PNG or WebP)");
}

// --- JPEG -------------------------------------------------------------------------------

struct TjDestroyer {
  void operator()(void* handle) const { tjDestroy(handle); }
};

using TjHandle = std::unique_ptr<void, TjDestroyer>;

// One decompressor per thread: tjInitDecompress allocates, and a handle must not be used
// by two threads at once. Executor threads are long-lived, so this is set up once.
TjHandle& ThreadDecompressorSlot() {
  thread_local TjHandle handle;
  return handle;
}

tjhandle ThreadDecompressor() {
  TjHandle& handle = ThreadDecompressorSlot();
  if (handle == nullptr) handle.reset(tjInitDecompress());
  return handle.get();
}

// TurboJPEG 2.1 does not always rewind the libjpeg state after an error (a header read
// that fails mid-marker leaves it inside that marker, and the next, valid, file then
// fails with "Bogus Huffman table definition"). Replace the handle after every failure.
void DiscardThreadDecompressor() { ThreadDecompressorSlot().reset(); }

// EXIF orientation from the first APP1 "Exif" segment, 1 if absent or malformed.
//
// Handwritten rather than libexif: we need one tag of IFD0, and libexif parses and
// allocates every IFD (maker notes included) on each image, in the hot path of every
// sample. Every read below is bounds-checked against the segment.
int OrientationFromTiff(const uint8_t* tiff, size_t size) {
  if (size < 8) return 1;
  bool little;
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    little = true;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    little = false;
  } else {
    return 1;
  }
  auto u16 = [&](uint64_t off) -> uint32_t {
    return little ? (tiff[off] | (tiff[off + 1] << 8)) : ((tiff[off] << 8) | tiff[off + 1]);
  };
  auto u32 = [&](uint64_t off) -> uint32_t {
    return little ? (u16(off) | (u16(off + 2) << 16)) : ((u16(off) << 16) | u16(off + 2));
  };
  if (u16(2) != 42) return 1;
  const uint64_t ifd = u32(4);
  if (ifd + 2 > size) return 1;
  const uint32_t count = u16(ifd);
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t entry = ifd + 2 + uint64_t{12} * i;
    if (entry + 12 > size) return 1;
    if (u16(entry) != 0x0112) continue;  // Orientation
    const uint32_t type = u16(entry + 2);
    if (u32(entry + 4) < 1) return 1;
    uint32_t value = 0;
    if (type == 3)
      value = u16(entry + 8);  // SHORT, the standard type
    else if (type == 4)
      value = u32(entry + 8);  // LONG, written by a few tools
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

int ReadJpegOrientation(const uint8_t* data, size_t size) {
  size_t pos = 2;  // after SOI
  while (pos + 4 <= size) {
    if (data[pos] != 0xFF) return 1;  // not a marker: leave the verdict to the decoder
    const uint8_t marker = data[pos + 1];
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) {  // markers without length
      pos += 2;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return 1;  // SOS / EOI: no more headers
    const size_t length = (size_t{data[pos + 2]} << 8) | data[pos + 3];
    if (length < 2 || pos + 2 + length > size) return 1;
    static constexpr uint8_t kExif[6] = {'E', 'x', 'i', 'f', 0, 0};
    if (marker == 0xE1 && length >= 2 + 6 && std::memcmp(data + pos + 4, kExif, 6) == 0) {
      return OrientationFromTiff(data + pos + 10, length - 8);
    }
    pos += 2 + length;
  }
  return 1;
}

Result<ImageHeader> ReadJpegHeader(const uint8_t* data, size_t size) {
  tjhandle handle = ThreadDecompressor();
  if (handle == nullptr) return Status::ResourceExhausted("tjInitDecompress failed");
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(handle, data, static_cast<unsigned long>(size), &width, &height, &subsamp,
                          &colorspace) != 0) {
    Status status = Status::CorruptData(std::string("bad JPEG header: ") + tjGetErrorStr2(handle));
    DiscardThreadDecompressor();
    return status;
  }
  if (width <= 0 || height <= 0) {
    return Status::CorruptData("JPEG header declares " + Dims(width, height) + " pixels");
  }
  ImageHeader header;
  header.format = ImageFormat::kJpeg;
  header.width = width;
  header.height = height;
  header.cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  header.orientation = ReadJpegOrientation(data, size);
  return header;
}

// libjpeg warnings that lose no pixel data (commonly seen in real datasets, which PIL
// decodes without complaint). Every other warning, notably "Premature end of JPEG file"
// and "premature end of data segment" (a truncated scan, filled with grey by libjpeg),
// "bad Huffman code" and resync markers, means pixels were invented: corrupt.
bool IsBenignJpegWarning(const char* message) {
  for (const char* benign : {"extraneous bytes before marker", "Invalid SOS parameters",
                             "Inconsistent progression sequence", "unknown JFIF revision",
                             "Unknown Adobe color transform", "bad ICC marker"}) {
    if (std::strstr(message, benign) != nullptr) return true;
  }
  return false;
}

// Exact round(x / 255) for x in [0, 255 * 255].
inline uint8_t Div255(uint32_t x) {
  return static_cast<uint8_t>((x + 128 + ((x + 128) >> 8)) >> 8);
}

Status DecodeJpegInto(const uint8_t* data, size_t size, const DecodePlan& plan,
                      MutableImageView dst) {
  tjhandle handle = ThreadDecompressor();
  if (handle == nullptr) return Status::ResourceExhausted("tjInitDecompress failed");
  // TurboJPEG will not convert CMYK to RGB (it takes a colour-management decision), so
  // CMYK is decoded as is, into the same 4 bytes per pixel, and converted below.
  const int pixel_format = plan.header.cmyk ? TJPF_CMYK : TJPF_RGBX;
  const int flags = plan.fast_upsample ? TJFLAG_FASTUPSAMPLE : 0;
  // Passing the exact scaled size makes TurboJPEG pick exactly 1/scale_denom.
  if (tjDecompress2(handle, data, static_cast<unsigned long>(size), dst.data, dst.width,
                    static_cast<int>(dst.stride), dst.height, pixel_format, flags) != 0) {
    const char* message = tjGetErrorStr2(handle);
    if (tjGetErrorCode(handle) == TJERR_FATAL || !IsBenignJpegWarning(message)) {
      const bool truncated = std::strstr(message, "remature end") != nullptr;
      Status status = Status::CorruptData(
          std::string(truncated ? "truncated JPEG: " : "corrupt JPEG: ") + message);
      DiscardThreadDecompressor();
      return status;
    }
  }
  if (plan.header.cmyk) {
    // Adobe (Photoshop) stores CMYK inverted and libjpeg returns it as stored, so with
    // c = 255 - C etc. the usual R = (255 - C)(255 - K) / 255 is c * k / 255.
    for (int y = 0; y < dst.height; ++y) {
      uint8_t* p = dst.row(y);
      for (int x = 0; x < dst.width; ++x, p += 4) {
        const uint32_t k = p[3];
        p[0] = Div255(p[0] * k);
        p[1] = Div255(p[1] * k);
        p[2] = Div255(p[2] * k);
        p[3] = 0xFF;
      }
    }
  }
  return Status::Ok();
}

int ChooseScaleDenom(const ImageHeader& header, DecodeTarget target) {
  if (header.format != ImageFormat::kJpeg || !target.any()) return 1;
  const bool swap = header.orientation >= 5;
  for (int denom : {8, 4, 2}) {
    const int w = (header.width + denom - 1) / denom;  // TJSCALED for 1/denom
    const int h = (header.height + denom - 1) / denom;
    const int out_w = swap ? h : w;
    const int out_h = swap ? w : h;
    if (std::min(out_w, out_h) >= target.min_shorter_side && out_w >= target.min_width &&
        out_h >= target.min_height) {
      return denom;
    }
  }
  return 1;
}

// --- PNG --------------------------------------------------------------------------------

struct PngInput {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char error[200];
};

[[noreturn]] void PngOnError(png_structp png, png_const_charp message) {
  auto* input = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(input->error, sizeof(input->error), "%s", message);
  png_longjmp(png, 1);
}

void PngOnWarning(png_structp, png_const_charp) {}

void PngOnRead(png_structp png, png_bytep out, png_size_t length) {
  auto* input = static_cast<PngInput*>(png_get_io_ptr(png));
  if (length > input->size - input->pos) png_error(png, "truncated PNG data");
  std::memcpy(out, input->data + input->pos, length);
  input->pos += length;
}

struct PngReader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReader() {
    if (png != nullptr) png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
  }
};

// libpng reports errors by longjmp to here. Every object with a destructor lives in the
// caller, so the jump skips none; nothing set after setjmp is read after the jump.
Status ReadPngPixels(png_structp png, png_infop info, PngInput* input, MutableImageView dst) {
  if (setjmp(png_jmpbuf(png))) {
    return Status::CorruptData(std::string("corrupt PNG: ") + input->error);
  }
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);  // max_pixels was checked already
  png_read_info(png, info);
  png_uint_32 width = 0, height = 0;
  int depth = 0, color = 0;
  png_get_IHDR(png, info, &width, &height, &depth, &color, nullptr, nullptr, nullptr);
  if (width != static_cast<png_uint_32>(dst.width) ||
      height != static_cast<png_uint_32>(dst.height)) {
    return Status::Internal("PNG destination is not the header's size");
  }
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);  // also tRNS -> alpha
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_scale_16(png);
  png_set_strip_alpha(png);  // alpha is dropped, see decode.h
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_gray_to_rgb(png);
  }
  png_set_filler(png, 0xFF, PNG_FILLER_AFTER);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(dst.width) * 4) {
    return Status::Internal("PNG transforms did not produce RGBX rows");
  }
  for (int pass = 0; pass < passes; ++pass) {
    for (int y = 0; y < dst.height; ++y) png_read_row(png, dst.row(y), nullptr);
  }
  png_read_end(png, nullptr);  // checks the last chunks' CRCs
  return Status::Ok();
}

Status DecodePngInto(const uint8_t* data, size_t size, MutableImageView dst) {
  PngInput input{data, size, 0, {}};
  PngReader reader;
  reader.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &input, PngOnError, PngOnWarning);
  if (reader.png == nullptr) return Status::ResourceExhausted("png_create_read_struct failed");
  reader.info = png_create_info_struct(reader.png);
  if (reader.info == nullptr) return Status::ResourceExhausted("png_create_info_struct failed");
  png_set_read_fn(reader.png, &input, PngOnRead);
  return ReadPngPixels(reader.png, reader.info, &input, dst);
}

Result<ImageHeader> ReadPngHeader(const uint8_t* data, size_t size) {
  // signature, IHDR length and type, 13 bytes of IHDR, CRC
  if (size < 8 + 8 + 13 + 4) return Status::CorruptData("truncated PNG header");
  if (LoadBE32(data + 8) != 13 || std::memcmp(data + 12, "IHDR", 4) != 0) {
    return Status::CorruptData("PNG does not start with an IHDR chunk");
  }
  const uint32_t width = LoadBE32(data + 16);
  const uint32_t height = LoadBE32(data + 20);
  if (width == 0 || height == 0 || width > 0x7fffffff || height > 0x7fffffff) {
    return Status::CorruptData("PNG header declares " + Dims(width, height) + " pixels");
  }
  ImageHeader header;
  header.format = ImageFormat::kPng;
  header.width = static_cast<int>(width);
  header.height = static_cast<int>(height);
  return header;
}

// --- WebP -------------------------------------------------------------------------------

Status WebpStatus(VP8StatusCode code) {
  switch (code) {
    case VP8_STATUS_OK: return Status::Ok();
    case VP8_STATUS_NOT_ENOUGH_DATA: return Status::CorruptData("truncated WebP");
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return Status::UnsupportedFormat("WebP feature not supported by libwebp");
    case VP8_STATUS_OUT_OF_MEMORY: return Status::ResourceExhausted("libwebp out of memory");
    default:
      return Status::CorruptData("corrupt WebP (libwebp status " +
                                 std::to_string(static_cast<int>(code)) + ")");
  }
}

Result<ImageHeader> ReadWebpHeader(const uint8_t* data, size_t size) {
  WebPBitstreamFeatures features;
  HR_RETURN_IF_ERROR(WebpStatus(WebPGetFeatures(data, size, &features)));
  if (features.has_animation) return Status::UnsupportedFormat("animated WebP");
  if (features.width <= 0 || features.height <= 0) {
    return Status::CorruptData("WebP header declares " + Dims(features.width, features.height) +
                               " pixels");
  }
  ImageHeader header;
  header.format = ImageFormat::kWebp;
  header.width = features.width;
  header.height = features.height;
  return header;
}

Status DecodeWebpInto(const uint8_t* data, size_t size, MutableImageView dst) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return Status::Internal("libwebp version mismatch");
  config.output.colorspace = MODE_RGBA;  // the A byte is our X: alpha is dropped
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = dst.data;
  config.output.u.RGBA.stride = static_cast<int>(dst.stride);
  config.output.u.RGBA.size =
      static_cast<size_t>(dst.stride) * (dst.height - 1) + static_cast<size_t>(dst.width) * 4;
  const VP8StatusCode code = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);
  return WebpStatus(code);
}

}  // namespace

std::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg: return "jpeg";
    case ImageFormat::kPng: return "png";
    case ImageFormat::kWebp: return "webp";
  }
  return "?";
}

Result<ImageHeader> ReadImageHeader(const uint8_t* data, size_t size) {
  HR_ASSIGN_OR_RETURN(ImageFormat format, DetectFormat(data, size));
  switch (format) {
    case ImageFormat::kJpeg: return ReadJpegHeader(data, size);
    case ImageFormat::kPng: return ReadPngHeader(data, size);
    case ImageFormat::kWebp: return ReadWebpHeader(data, size);
  }
  return Status::Internal("unhandled image format");
}

Result<DecodePlan> PlanDecode(const uint8_t* data, size_t size, const DecodeSpec& spec,
                              DecodeTarget target) {
  DecodePlan plan;
  HR_ASSIGN_OR_RETURN(plan.header, ReadImageHeader(data, size));
  const ImageHeader& h = plan.header;
  const int64_t pixels = int64_t{h.width} * h.height;
  if (pixels > spec.max_pixels) {
    return Status::PixelLimit(std::string(ImageFormatName(h.format)) + " header declares " +
                              Dims(h.width, h.height) + " = " + std::to_string(pixels) +
                              " pixels, above max_pixels " + std::to_string(spec.max_pixels));
  }
  // libpng reads a row into two buffers of its own (the file's row, up to 8 bytes a
  // pixel, and the transformed RGBX one), each as wide as the image: an 89,478,485 x 1
  // PNG took 626 MB in them beside its 358 MB of pixels.
  if (h.format == ImageFormat::kPng && h.width > kPngMaxWidth) {
    return Status::PixelLimit("PNG header declares " + Dims(h.width, h.height) +
                              ": rows wider than " + std::to_string(kPngMaxWidth) +
                              " pixels are refused (libpng holds two rows of up to 12 bytes a "
                              "pixel as it reads; SECURITY.md)");
  }
  // The same rule and words as image.smart_resize's (SmartResizeSize), from the header:
  // a 1 x 89M image would otherwise be decoded (hundreds of MB) only to be refused.
  const double ratio = static_cast<double>(std::max(h.width, h.height)) /
                       std::max(1, std::min(h.width, h.height));
  if (target.max_aspect_ratio > 0 && ratio > target.max_aspect_ratio) {
    return Status::PixelLimit("image " + std::to_string(h.width) + "x" +
                              std::to_string(h.height) + ": aspect ratio " +
                              schema::FormatDouble(ratio) + " is above max_aspect_ratio " +
                              schema::FormatDouble(target.max_aspect_ratio) +
                              " (image.smart_resize; refused from the header)");
  }
  plan.scale_denom = ChooseScaleDenom(h, target);
  plan.fast_upsample = target.any();
  plan.decoded_width = (h.width + plan.scale_denom - 1) / plan.scale_denom;
  plan.decoded_height = (h.height + plan.scale_denom - 1) / plan.scale_denom;
  const bool swap = h.orientation >= 5;
  plan.width = swap ? plan.decoded_height : plan.decoded_width;
  plan.height = swap ? plan.decoded_width : plan.decoded_height;
  return plan;
}

Status DecodeInto(const uint8_t* data, size_t size, const DecodePlan& plan, MutableImageView dst) {
  if (dst.channels != 4 || dst.width != plan.decoded_width || dst.height != plan.decoded_height ||
      dst.stride < int64_t{dst.width} * 4 || dst.stride > 0x7fffffff) {
    return Status::Internal("DecodeInto: destination is not a " +
                            Dims(plan.decoded_width, plan.decoded_height) + " RGBX image");
  }
  switch (plan.header.format) {
    case ImageFormat::kJpeg: return DecodeJpegInto(data, size, plan, dst);
    case ImageFormat::kPng: return DecodePngInto(data, size, dst);
    case ImageFormat::kWebp: return DecodeWebpInto(data, size, dst);
  }
  return Status::Internal("unhandled image format");
}

Status ApplyOrientation(ImageView src, int orientation, MutableImageView dst) {
  if (orientation < 1 || orientation > 8) {
    return Status::InvalidArgument("EXIF orientation must be 1-8, got " +
                                   std::to_string(orientation));
  }
  const bool swap = orientation >= 5;
  if (src.channels != 4 || dst.channels != 4 || src.empty() ||
      dst.width != (swap ? src.height : src.width) ||
      dst.height != (swap ? src.width : src.height)) {
    return Status::Internal("ApplyOrientation: bad source or destination shape");
  }
  // Every orientation is one libyuv rotation (clockwise), applied to the source as is or
  // flipped upside down first (negative height); e.g. transpose (5) = flip, then 90.
  struct Transform {
    bool flip_first;
    libyuv::RotationMode rotation;
  };
  static constexpr Transform kTransforms[9] = {
      {false, libyuv::kRotate0},                                  // unused
      {false, libyuv::kRotate0},   {true, libyuv::kRotate180},    // 1 as is, 2 mirror
      {false, libyuv::kRotate180}, {true, libyuv::kRotate0},      // 3, 4 upside down
      {true, libyuv::kRotate90},   {false, libyuv::kRotate90},    // 5 transpose, 6
      {true, libyuv::kRotate270},  {false, libyuv::kRotate270}};  // 7 transverse, 8
  const Transform t = kTransforms[orientation];
  if (libyuv::ARGBRotate(src.data, static_cast<int>(src.stride), dst.data,
                         static_cast<int>(dst.stride), src.width,
                         t.flip_first ? -src.height : src.height, t.rotation) != 0) {
    return Status::Internal("libyuv::ARGBRotate failed");
  }
  return Status::Ok();
}

Result<Image> DecodeImage(const uint8_t* data, size_t size, const DecodeSpec& spec,
                          DecodeTarget target) {
  HR_ASSIGN_OR_RETURN(DecodePlan plan, PlanDecode(data, size, spec, target));
  HR_ASSIGN_OR_RETURN(Image decoded, Image::Allocate(plan.decoded_width, plan.decoded_height, 4));
  HR_RETURN_IF_ERROR(DecodeInto(data, size, plan, decoded.mutable_view()));
  if (plan.header.orientation == 1) return decoded;
  HR_ASSIGN_OR_RETURN(Image oriented, Image::Allocate(plan.width, plan.height, 4));
  HR_RETURN_IF_ERROR(
      ApplyOrientation(decoded.view(), plan.header.orientation, oriented.mutable_view()));
  return oriented;
}

namespace {

// A width x height RGBX scratch image whose rows all start 16 bytes past a 32-byte
// boundary. libjpeg-turbo's AVX2 colour converters write a row that starts 32-byte
// aligned with non-temporal stores, which bypass the cache, so the next operator reads
// the whole image back from DRAM: measured 15-20% slower for the 640x480 chain than
// with rows at this offset, which get ordinary stores.
// The padding is paid only where it costs little: a narrow image (1 pixel wide, 32
// bytes a row for 4) or a flat one (the extra row doubles 1 row) is laid out plainly,
// so that a decode holds at most max_pixels x 4 bytes and an eighth (SECURITY.md); a
// 1 x 89M PNG took 2.9 GB padded.
Result<MutableImageView> CachedScratchImage(SampleContext& ctx, int width, int height) {
  constexpr int64_t kAlign = 32, kOffset = 16;
  const int64_t stride = (int64_t{width} * 4 + kAlign - 1) / kAlign * kAlign;
  const int64_t plain = int64_t{width} * height * 4;
  if (stride * (height + 1) > plain + plain / 8) return ctx.NextScratchImage(width, height, 4);
  // Scratch memory is 64-byte aligned; one extra row covers the offset.
  HR_ASSIGN_OR_RETURN(MutableImageView block,
                      ctx.NextScratchImage(static_cast<int>(stride / 4), height + 1, 4));
  return MutableImageView{block.data + kOffset, width, height, 4, stride};
}

}  // namespace

Status DecodeOp::Validate(const Spec& spec, const std::string& key) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(key + ".field", spec.field, "the value to decode"));
  return schema::AtLeast<int64_t>(key + ".max_pixels", spec.max_pixels, 1);
}

Status DecodeOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_RETURN_IF_ERROR(ctx.Read(spec.field, ValueKind::kEncoded).status());
  return ctx.Write(spec.field,
                   ValueDesc{ValueKind::kImage, {-1, -1, 4}, ctx.key() + " (each image's own size)"});
}

Result<std::unique_ptr<Op>> DecodeOp::Make(const Spec& spec, PlanContext& ctx) {
  const SizeHint hint = ctx.hint(spec.field);
  const DecodeTarget target{hint.min_shorter_side, hint.min_width, hint.min_height,
                            hint.max_aspect_ratio};
  return std::unique_ptr<Op>(std::make_unique<DecodeOp>(spec, target, ctx.slot(spec.field)));
}

DecodeOp::DecodeOp(const DecodeSpec& spec, DecodeTarget target, int slot)
    : spec_(spec), target_(target), slot_(slot) {}

Status DecodeOp::Run(SampleContext& ctx) const {
  const EncodedBytes* media = ctx.Get<EncodedBytes>(slot_);
  if (media == nullptr) {
    return Status::MissingField("the record has no " + spec_.field +
                                " but the pipeline decodes one (image.decode)");
  }
  // A copy: writing the image below replaces the value that held the bytes.
  const EncodedBytes bytes = *media;
  HR_ASSIGN_OR_RETURN(DecodePlan plan, PlanDecode(bytes.data, bytes.size, spec_, target_));
  HR_ASSIGN_OR_RETURN(MutableImageView decoded,
                      CachedScratchImage(ctx, plan.decoded_width, plan.decoded_height));
  HR_RETURN_IF_ERROR(DecodeInto(bytes.data, bytes.size, plan, decoded));
  if (plan.header.orientation == 1) {
    ctx.Set(slot_, ImageView(decoded));
    return Status::Ok();
  }
  HR_ASSIGN_OR_RETURN(MutableImageView oriented, ctx.NextScratchImage(plan.width, plan.height, 4));
  HR_RETURN_IF_ERROR(ApplyOrientation(decoded, plan.header.orientation, oriented));
  ctx.Set(slot_, ImageView(oriented));
  return Status::Ok();
}

bool DecodeOp::Predict(SizePass& pass) const {
  const EncodedBytes* media = pass.ctx->Get<EncodedBytes>(slot_);
  if (media == nullptr) return false;
  const Result<DecodePlan> plan = PlanDecode(media->data, media->size, spec_, target_);
  if (!plan.ok()) return false;
  pass.images[static_cast<size_t>(slot_)] = {plan->width, plan->height};
  return true;
}

}  // namespace headrace
