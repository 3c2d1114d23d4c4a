// Helpers for this folder's tests: synthetic images and encoders (TurboJPEG, libpng,
// libwebp) so that every test image is generated, never checked in.
#pragma once

#include <array>

#include <png.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "headrace/ops/image/image.h"
#include "headrace/ops/op.h"

namespace headrace::testing {

using Bytes = std::vector<uint8_t>;

// An image whose channel c at (x, y) is fn(x, y, c).
inline Image MakeImage(int width, int height, int channels,
                       const std::function<uint8_t(int, int, int)>& fn) {
  Image image = *Image::Allocate(width, height, channels);
  MutableImageView v = image.mutable_view();
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) v.row(y)[x * channels + c] = fn(x, y, c);
    }
  }
  return image;
}

inline const uint8_t* Pixel(ImageView v, int x, int y) {
  return v.row(y) + static_cast<int64_t>(x) * v.channels;
}

// Tightly packed pixels of fn, `channels` per pixel.
inline Bytes MakePixels(int width, int height, int channels,
                        const std::function<uint8_t(int, int, int)>& fn) {
  Bytes out(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        out[(static_cast<size_t>(y) * width + x) * channels + c] = fn(x, y, c);
      }
    }
  }
  return out;
}

// Encodes packed pixels of TurboJPEG format `pixel_format` (TJPF_RGB, TJPF_GRAY,
// TJPF_CMYK, ...).
inline Bytes EncodeJpeg(const Bytes& pixels, int width, int height, int pixel_format,
                        int subsamp = TJSAMP_444, int quality = 95) {
  tjhandle handle = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(handle, pixels.data(), width, 0, height, pixel_format, &out, &size,
                             subsamp, quality, 0);
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(handle);
  Bytes jpeg(out, out + size);
  tjFree(out);
  tjDestroy(handle);
  return jpeg;
}

inline Bytes EncodeJpegRgb(int width, int height, const std::function<uint8_t(int, int, int)>& fn,
                           int subsamp = TJSAMP_444, int quality = 95) {
  return EncodeJpeg(MakePixels(width, height, 3, fn), width, height, TJPF_RGB, subsamp, quality);
}

// Inserts `segment` (a whole marker segment, FF xx len ...) right after SOI.
inline Bytes InsertAfterSoi(const Bytes& jpeg, const Bytes& segment) {
  Bytes out(jpeg.size() + segment.size());
  std::memcpy(out.data(), jpeg.data(), 2);
  std::memcpy(out.data() + 2, segment.data(), segment.size());
  std::memcpy(out.data() + 2 + segment.size(), jpeg.data() + 2, jpeg.size() - 2);
  return out;
}

// An APP1 Exif segment with one IFD0 entry, Orientation = `orientation`, written by hand
// in either byte order.
inline Bytes ExifApp1(int orientation, bool big_endian) {
  Bytes tiff;
  auto u16 = [&](uint32_t v) {
    if (big_endian) {
      tiff.push_back(v >> 8), tiff.push_back(v & 0xFF);
    } else {
      tiff.push_back(v & 0xFF), tiff.push_back(v >> 8);
    }
  };
  auto u32 = [&](uint32_t v) {
    if (big_endian) {
      u16(v >> 16), u16(v & 0xFFFF);
    } else {
      u16(v & 0xFFFF), u16(v >> 16);
    }
  };
  tiff.push_back(big_endian ? 'M' : 'I');
  tiff.push_back(big_endian ? 'M' : 'I');
  u16(42);
  u32(8);  // IFD0 offset
  u16(1);  // one entry
  u16(0x0112), u16(3), u32(1), u16(orientation), u16(0);
  u32(0);  // no next IFD
  static constexpr uint8_t kHeader[10] = {0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  Bytes segment(sizeof(kHeader) + tiff.size());
  std::memcpy(segment.data(), kHeader, sizeof(kHeader));
  std::memcpy(segment.data() + sizeof(kHeader), tiff.data(), tiff.size());
  const size_t length = segment.size() - 2;
  segment[2] = static_cast<uint8_t>(length >> 8);
  segment[3] = static_cast<uint8_t>(length & 0xFF);
  return segment;
}

// PNG of packed 8-bit pixels via libpng's simplified API; format is PNG_FORMAT_RGB,
// PNG_FORMAT_RGBA, PNG_FORMAT_GRAY, ...
inline Bytes EncodePng(const Bytes& pixels, int width, int height, uint32_t format) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = width;
  image.height = height;
  image.format = format;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr));
  Bytes png(size);
  EXPECT_TRUE(png_image_write_to_memory(&image, png.data(), &size, 0, pixels.data(), 0, nullptr))
      << image.message;
  png.resize(size);
  return png;
}

// WebP of packed RGB (channels 3) or RGBA (4) pixels; quality < 0 means lossless.
inline Bytes EncodeWebp(const Bytes& pixels, int width, int height, int channels, float quality) {
  uint8_t* out = nullptr;
  size_t size = 0;
  const int stride = width * channels;
  if (quality < 0) {
    size = channels == 4 ? WebPEncodeLosslessRGBA(pixels.data(), width, height, stride, &out)
                         : WebPEncodeLosslessRGB(pixels.data(), width, height, stride, &out);
  } else {
    size = channels == 4 ? WebPEncodeRGBA(pixels.data(), width, height, stride, quality, &out)
                         : WebPEncodeRGB(pixels.data(), width, height, stride, quality, &out);
  }
  EXPECT_GT(size, 0u);
  Bytes webp(out, out + size);
  WebPFree(out);
  return webp;
}

// A context over one sample, with its own scratch arena, named values (the image in
// slot kImageSlot) and (optionally) batch rows.
struct TestContext {
  static constexpr int kImageSlot = 0;
  SampleRecord record;  // one media item, of source field 0
  Sample sample;
  ScratchArena scratch;
  std::vector<uint8_t*> row_pointers;
  std::array<Value, 4> values{};
  SampleContext ctx;

  explicit TestContext(uint64_t sample_seed = 1) {
    record.media.push_back(MediaRef{0, "test-media"});
    sample.record = &record;
    ctx.sample = &sample;
    ctx.sample_seed = sample_seed;
    ctx.scratch = &scratch;
    ctx.values = values;
  }
  // The sample's encoded media, as the executor binds it: the value in kImageSlot.
  void SetMedia(const Bytes& bytes) {
    sample.media = {Sample::Item{0, *Buffer::CopyOf(bytes.data(), bytes.size()), "test-media"}};
    const Buffer& media = sample.media[0].bytes;
    values[kImageSlot] = EncodedBytes{media.data(), media.size()};
  }
  void SetImage(ImageView image) { values[kImageSlot] = image; }
  // The image in kImageSlot; empty when the slot holds none.
  ImageView image() const {
    const ImageView* v = std::get_if<ImageView>(&values[kImageSlot]);
    return v == nullptr ? ImageView{} : *v;
  }
  void SetRows(std::vector<uint8_t*> rows) {
    row_pointers = std::move(rows);
    ctx.rows = row_pointers.data();
  }
};

// Bytes of a view's pixels, row by row (for comparing images).
inline Bytes PixelsOf(ImageView v) {
  Bytes out;
  for (int y = 0; y < v.height; ++y) {
    out.insert(out.end(), v.row(y), v.row(y) + static_cast<size_t>(v.width) * v.channels);
  }
  return out;
}

}  // namespace headrace::testing
