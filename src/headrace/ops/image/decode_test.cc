#include "headrace/ops/image/decode.h"

#include <libexif/exif-data.h>

#include <cstdlib>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "headrace/ops/image/image_test_util.h"

namespace headrace {
namespace {

using testing::Bytes;
using testing::EncodeJpeg;
using testing::EncodeJpegRgb;
using testing::EncodePng;
using testing::EncodeWebp;
using testing::MakePixels;
using testing::Pixel;

// Left half red, right half blue; a green band over the bottom quarter.
uint8_t Quadrants(int x, int y, int c, int w, int h) {
  if (y >= h * 3 / 4) return c == 1 ? 255 : 0;
  if (x < w / 2) return c == 0 ? 255 : 0;
  return c == 2 ? 255 : 0;
}

void ExpectColour(ImageView v, int x, int y, int r, int g, int b, int tolerance) {
  const uint8_t* p = Pixel(v, x, y);
  EXPECT_NEAR(p[0], r, tolerance) << "at " << x << "," << y;
  EXPECT_NEAR(p[1], g, tolerance) << "at " << x << "," << y;
  EXPECT_NEAR(p[2], b, tolerance) << "at " << x << "," << y;
}

Result<Image> Decode(const Bytes& bytes, DecodeTarget target = {}) {
  return DecodeImage(bytes.data(), bytes.size(), DecodeSpec{}, target);
}

// A JPEG whose top-left 8x8 corner is red and the rest grey.
Bytes CornerJpeg(int w, int h) {
  return EncodeJpegRgb(w, h, [](int x, int y, int c) -> uint8_t {
    if (x < 8 && y < 8) return c == 0 ? 255 : 0;
    return 128;
  });
}

// Where the red corner is, as the quadrant (0 = top-left, 1 = top-right,
// 2 = bottom-left, 3 = bottom-right) whose corner pixel is red.
int RedCorner(ImageView v) {
  const int xs[2] = {2, v.width - 3};
  const int ys[2] = {2, v.height - 3};
  int found = -1;
  for (int q = 0; q < 4; ++q) {
    const uint8_t* p = Pixel(v, xs[q % 2], ys[q / 2]);
    if (p[0] > 200 && p[1] < 60 && p[2] < 60) {
      EXPECT_EQ(found, -1) << "two red corners";
      found = q;
    }
  }
  return found;
}

TEST(Decode, JpegHasHeaderSizeAndColours) {
  const Bytes jpeg =
      EncodeJpegRgb(64, 48, [](int x, int y, int c) { return Quadrants(x, y, c, 64, 48); });
  Result<Image> image = Decode(jpeg);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->width(), 64);
  EXPECT_EQ(image->height(), 48);
  EXPECT_EQ(image->channels(), 4);
  ExpectColour(image->view(), 10, 10, 255, 0, 0, 12);
  ExpectColour(image->view(), 50, 10, 0, 0, 255, 12);
  ExpectColour(image->view(), 30, 44, 0, 255, 0, 12);
}

TEST(Decode, ReadsHeaderWithoutDecoding) {
  const Bytes jpeg = EncodeJpegRgb(40, 30, [](int, int, int) { return 9; });
  Result<ImageHeader> header = ReadImageHeader(jpeg.data(), jpeg.size());
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->format, ImageFormat::kJpeg);
  EXPECT_EQ(header->width, 40);
  EXPECT_EQ(header->height, 30);
  EXPECT_EQ(header->orientation, 1);
}

TEST(Decode, PngRgbIsExact) {
  const Bytes pixels =
      MakePixels(33, 17, 3, [](int x, int y, int c) { return (x * 7 + y * 3 + c * 50) & 0xFF; });
  Result<Image> image = Decode(EncodePng(pixels, 33, 17, PNG_FORMAT_RGB));
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  ASSERT_EQ(image->width(), 33);
  ASSERT_EQ(image->height(), 17);
  for (int y = 0; y < 17; ++y) {
    for (int x = 0; x < 33; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(Pixel(image->view(), x, y)[c], pixels[(y * 33 + x) * 3 + c]);
      }
    }
  }
}

TEST(Decode, PngAlphaIsDroppedNotComposited) {
  // Colour (200, 100, 50) at alpha 0 and 128 stays exactly that colour.
  const Bytes pixels = MakePixels(8, 4, 4, [](int x, int, int c) -> uint8_t {
    const uint8_t rgba[4] = {200, 100, 50, static_cast<uint8_t>(x < 4 ? 0 : 128)};
    return rgba[c];
  });
  Result<Image> image = Decode(EncodePng(pixels, 8, 4, PNG_FORMAT_RGBA));
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  ExpectColour(image->view(), 1, 1, 200, 100, 50, 0);
  ExpectColour(image->view(), 6, 1, 200, 100, 50, 0);
}

TEST(Decode, PngGrayscaleBecomesRgb) {
  const Bytes pixels = MakePixels(10, 10, 1, [](int x, int, int) { return x * 20; });
  Result<Image> image = Decode(EncodePng(pixels, 10, 10, PNG_FORMAT_GRAY));
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  ExpectColour(image->view(), 7, 3, 140, 140, 140, 0);
}

// An RGB PNG `width` wide, `depth` bits a channel, of `rows`, by libpng's classic API
// (the simplified writer stores 16-bit data as linear, and refuses rows wider than
// 1,000,000 pixels: its limits are raised here).
Bytes ClassicRgbPng(int width, int depth, const std::vector<std::vector<uint8_t>>& rows) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  Bytes out;
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, png_size_t n) {
        auto* o = static_cast<Bytes*>(png_get_io_ptr(p));
        o->insert(o->end(), data, data + n);
      },
      nullptr);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_set_IHDR(png, info, width, static_cast<png_uint_32>(rows.size()), depth,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (const std::vector<uint8_t>& row : rows) png_write_row(png, row.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

TEST(Decode, PngSixteenBitIsScaledToEightBits) {
  const Bytes pixels = MakePixels(4, 4, 3, [](int x, int, int c) { return c == 0 ? 255 : x * 60; });
  // The simplified writer stores 16-bit linear data when given PNG_FORMAT_FLAG_LINEAR;
  // build a 16-bit RGB file with the classic API instead.
  std::vector<std::vector<uint8_t>> rows(4, std::vector<uint8_t>(4 * 3 * 2));
  for (int y = 0; y < 4; ++y) {
    for (int i = 0; i < 12; ++i) {
      rows[y][2 * i] = pixels[y * 12 + i];  // big-endian 16-bit: v * 257
      rows[y][2 * i + 1] = pixels[y * 12 + i];
    }
  }
  const Bytes out = ClassicRgbPng(4, 16, rows);
  Result<Image> image = Decode(out);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  ExpectColour(image->view(), 2, 1, 255, 120, 120, 0);
}

TEST(Decode, WebpLosslessIsExact) {
  const Bytes pixels =
      MakePixels(20, 12, 3, [](int x, int y, int c) { return (x * 11 + y * 5 + c * 70) & 0xFF; });
  Result<Image> image = Decode(EncodeWebp(pixels, 20, 12, 3, -1));
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  ASSERT_EQ(image->width(), 20);
  ASSERT_EQ(image->height(), 12);
  for (int i = 0; i < 20 * 12; ++i) {
    for (int c = 0; c < 3; ++c)
      ASSERT_EQ(Pixel(image->view(), i % 20, i / 20)[c], pixels[i * 3 + c]);
  }
}

TEST(Decode, WebpLossyHasApproximateColours) {
  const Bytes pixels =
      MakePixels(64, 48, 3, [](int x, int y, int c) { return Quadrants(x, y, c, 64, 48); });
  Result<Image> image = Decode(EncodeWebp(pixels, 64, 48, 3, 95));
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  ExpectColour(image->view(), 10, 10, 255, 0, 0, 20);
  ExpectColour(image->view(), 50, 10, 0, 0, 255, 20);
  ExpectColour(image->view(), 30, 44, 0, 255, 0, 20);
}

TEST(Decode, WebpAlphaIsDropped) {
  // Half-transparent, so that the lossless encoder keeps the colour as is.
  const Bytes pixels = MakePixels(8, 8, 4, [](int, int, int c) -> uint8_t {
    const uint8_t rgba[4] = {10, 200, 90, 128};
    return rgba[c];
  });
  Result<Image> image = Decode(EncodeWebp(pixels, 8, 8, 4, -1));
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  ExpectColour(image->view(), 3, 3, 10, 200, 90, 0);
}

TEST(Decode, GrayscaleJpegBecomesRgb) {
  const Bytes gray = MakePixels(32, 32, 1, [](int x, int, int) { return x < 16 ? 40 : 220; });
  Result<Image> image = Decode(EncodeJpeg(gray, 32, 32, TJPF_GRAY, TJSAMP_GRAY));
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  ExpectColour(image->view(), 4, 4, 40, 40, 40, 6);
  ExpectColour(image->view(), 28, 4, 220, 220, 220, 6);
}

TEST(Decode, CmykJpegBecomesRgb) {
  // Stored the Adobe way (inverted): red is C=0 M=Y=255 K=0, i.e. bytes 255, 0, 0, 255;
  // the right half is 50% grey: C=M=Y=0, K=128 -> bytes 255, 255, 255, 127.
  const Bytes cmyk = MakePixels(32, 16, 4, [](int x, int, int c) -> uint8_t {
    if (x < 16) return c == 0 || c == 3 ? 255 : 0;
    return c == 3 ? 127 : 255;
  });
  Result<Image> image = Decode(EncodeJpeg(cmyk, 32, 16, TJPF_CMYK, TJSAMP_444));
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  ExpectColour(image->view(), 4, 8, 255, 0, 0, 8);
  ExpectColour(image->view(), 28, 8, 127, 127, 127, 8);
}

TEST(Decode, ExifOrientation6RotatesClockwise) {
  const Bytes jpeg = testing::InsertAfterSoi(CornerJpeg(64, 32), testing::ExifApp1(6, false));
  Result<ImageHeader> header = ReadImageHeader(jpeg.data(), jpeg.size());
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->orientation, 6);
  Result<Image> image = Decode(jpeg);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->width(), 32);
  EXPECT_EQ(image->height(), 64);
  EXPECT_EQ(RedCorner(image->view()), 1);  // top-left turned clockwise -> top-right
}

TEST(Decode, ExifOrientation3RotatesHalfTurnBigEndian) {
  const Bytes jpeg = testing::InsertAfterSoi(CornerJpeg(64, 32), testing::ExifApp1(3, true));
  Result<Image> image = Decode(jpeg);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->width(), 64);
  EXPECT_EQ(image->height(), 32);
  EXPECT_EQ(RedCorner(image->view()), 3);  // -> bottom-right
}

TEST(Decode, ExifWrittenByLibexifIsRead) {
  ExifData* exif = exif_data_new();
  ASSERT_NE(exif, nullptr);
  exif_data_set_byte_order(exif, EXIF_BYTE_ORDER_INTEL);
  ExifEntry* entry = exif_entry_new();
  exif_content_add_entry(exif->ifd[EXIF_IFD_0], entry);
  exif_entry_initialize(entry, EXIF_TAG_ORIENTATION);
  exif_set_short(entry->data, EXIF_BYTE_ORDER_INTEL, 8);
  unsigned char* data = nullptr;
  unsigned int size = 0;
  exif_data_save_data(exif, &data, &size);
  ASSERT_NE(data, nullptr);
  Bytes segment = {0xFF, 0xE1, static_cast<uint8_t>((size + 2) >> 8),
                   static_cast<uint8_t>((size + 2) & 0xFF)};
  segment.insert(segment.end(), data, data + size);  // starts with "Exif\0\0"
  std::free(data);
  exif_entry_unref(entry);
  exif_data_unref(exif);
  const Bytes jpeg = testing::InsertAfterSoi(CornerJpeg(64, 32), segment);
  Result<Image> image = Decode(jpeg);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->width(), 32);
  EXPECT_EQ(RedCorner(image->view()), 2);  // counter-clockwise -> bottom-left
}

// Where each orientation sends output pixel (x, y), from EXIF's definitions.
void SourceOf(int orientation, int x, int y, int w, int h, int* sx, int* sy) {
  switch (orientation) {
    case 1: *sx = x, *sy = y; break;
    case 2: *sx = w - 1 - x, *sy = y; break;
    case 3: *sx = w - 1 - x, *sy = h - 1 - y; break;
    case 4: *sx = x, *sy = h - 1 - y; break;
    case 5: *sx = y, *sy = x; break;
    case 6: *sx = y, *sy = h - 1 - x; break;
    case 7: *sx = w - 1 - y, *sy = h - 1 - x; break;
    case 8: *sx = w - 1 - y, *sy = x; break;
  }
}

TEST(Decode, ApplyOrientationMatchesExifDefinitionForAllEight) {
  const int w = 5, h = 3;
  Image src = testing::MakeImage(w, h, 4, [](int x, int y, int c) {
    return c == 0 ? x : c == 1 ? y : 0;
  });
  for (int o = 1; o <= 8; ++o) {
    const bool swap = o >= 5;
    Image dst = *Image::Allocate(swap ? h : w, swap ? w : h, 4);
    ASSERT_TRUE(ApplyOrientation(src.view(), o, dst.mutable_view()).ok());
    for (int y = 0; y < dst.height(); ++y) {
      for (int x = 0; x < dst.width(); ++x) {
        int sx, sy;
        SourceOf(o, x, y, w, h, &sx, &sy);
        EXPECT_EQ(Pixel(dst.view(), x, y)[0], sx) << "orientation " << o;
        EXPECT_EQ(Pixel(dst.view(), x, y)[1], sy) << "orientation " << o;
      }
    }
  }
}

TEST(Decode, DctScalingPicksSmallestPowerOfTwoMeetingTarget) {
  const Bytes jpeg = EncodeJpegRgb(
      1600, 1200, [](int x, int y, int c) { return (x + y + c) & 0xFF; }, TJSAMP_420, 80);
  auto plan = [&](DecodeTarget t) {
    return *PlanDecode(jpeg.data(), jpeg.size(), DecodeSpec{}, t);
  };
  EXPECT_EQ(plan({}).scale_denom, 1);
  EXPECT_EQ(plan({.min_shorter_side = 256}).scale_denom, 4);  // 300 >= 256, 150 < 256
  EXPECT_EQ(plan({.min_shorter_side = 300}).scale_denom, 4);
  EXPECT_EQ(plan({.min_shorter_side = 301}).scale_denom, 2);
  EXPECT_EQ(plan({.min_shorter_side = 1000}).scale_denom, 1);
  EXPECT_EQ(plan({.min_width = 400}).scale_denom, 4);
  EXPECT_EQ(plan({.min_width = 201}).scale_denom, 4);
  EXPECT_EQ(plan({.min_width = 200, .min_height = 150}).scale_denom, 8);

  Result<Image> image = Decode(jpeg, {.min_shorter_side = 256});
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->width(), 400);
  EXPECT_EQ(image->height(), 300);
}

TEST(Decode, DctScalingConstrainsTheRotatedImage) {
  // Stored 1600x1200 with orientation 6: displayed 1200 wide, 1600 high.
  const Bytes jpeg = testing::InsertAfterSoi(
      EncodeJpegRgb(
          1600, 1200, [](int x, int, int) { return x & 0xFF; }, TJSAMP_420, 80),
      testing::ExifApp1(6, false));
  Result<DecodePlan> plan = PlanDecode(jpeg.data(), jpeg.size(), DecodeSpec{}, {.min_width = 400});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->scale_denom, 2);  // 1/4 would make the displayed width 300 < 400
  EXPECT_EQ(plan->width, 600);
  EXPECT_EQ(plan->height, 800);
  Result<Image> image = Decode(jpeg, {.min_width = 400});
  ASSERT_TRUE(image.ok());
  EXPECT_EQ(image->width(), 600);
  EXPECT_EQ(image->height(), 800);
}

TEST(Decode, MaxPixelsRejectsFromTheHeader) {
  const Bytes jpeg = EncodeJpegRgb(64, 48, [](int, int, int) { return 1; });
  DecodeSpec spec;
  spec.max_pixels = 64 * 48 - 1;
  Result<Image> image = DecodeImage(jpeg.data(), jpeg.size(), spec);
  EXPECT_EQ(image.status().code(), StatusCode::kPixelLimit);
  spec.max_pixels = 64 * 48;
  EXPECT_TRUE(DecodeImage(jpeg.data(), jpeg.size(), spec).ok());
}

TEST(Decode, MaxPixelsRejectsBeforeDecodingAnyPixel) {
  // A header that declares 60000x60000 over data that could not be decoded: only a check
  // made before decoding can answer PixelLimit rather than CorruptData.
  Bytes jpeg = EncodeJpegRgb(64, 48, [](int x, int, int) { return x; });
  size_t pos = 2;  // walk the marker segments to SOF0: FF C0 len(2) precision(1) h(2) w(2)
  while (jpeg[pos + 1] != 0xC0) pos += 2 + ((jpeg[pos + 2] << 8) | jpeg[pos + 3]);
  jpeg[pos + 5] = 0xEA, jpeg[pos + 6] = 0x60, jpeg[pos + 7] = 0xEA, jpeg[pos + 8] = 0x60;
  ASSERT_EQ(ReadImageHeader(jpeg.data(), jpeg.size())->width, 60000);
  while (jpeg[pos + 1] != 0xDA) pos += 2 + ((jpeg[pos + 2] << 8) | jpeg[pos + 3]);
  jpeg.resize(pos + 20);  // headers intact, scan cut short: undecodable
  EXPECT_EQ(Decode(jpeg).status().code(), StatusCode::kPixelLimit)
      << Decode(jpeg).status().ToString();
  const Bytes png = EncodePng(Bytes(40 * 30 * 3, 7), 40, 30, PNG_FORMAT_RGB);
  DecodeSpec spec;
  spec.max_pixels = 1000;
  EXPECT_EQ(DecodeImage(png.data(), png.size(), spec).status().code(), StatusCode::kPixelLimit);
}

TEST(Decode, MaxPixelsRejectsWebpBeforeDecodingAnyPixel) {
  // The VP8 frame header's 14-bit sizes (bytes 26-29: RIFF, chunk header, frame tag,
  // start code) set to 16383 x 16383, over a bitstream cut short: undecodable, so only
  // the check on the header can answer PixelLimit.
  Bytes webp = EncodeWebp(Bytes(48 * 40 * 3, 90), 48, 40, 3, 80);
  ASSERT_EQ(std::memcmp(webp.data() + 12, "VP8 ", 4), 0);
  webp[26] = 0xFF, webp[27] = 0x3F, webp[28] = 0xFF, webp[29] = 0x3F;
  ASSERT_EQ(ReadImageHeader(webp.data(), webp.size())->width, 16383);
  webp.resize(40);
  EXPECT_EQ(Decode(webp).status().code(), StatusCode::kPixelLimit)
      << Decode(webp).status().ToString();
}

TEST(Decode, ZeroBytesAreCorrupt) {
  Result<Image> image = DecodeImage(nullptr, 0, DecodeSpec{});
  EXPECT_EQ(image.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(image.status().message().find("zero-byte"), std::string::npos);
}

TEST(Decode, TruncatedJpegIsCorrupt) {
  const Bytes jpeg =
      EncodeJpegRgb(256, 256, [](int x, int y, int c) { return (x * y + c * 40) & 0xFF; });
  const Bytes cut(jpeg.begin(), jpeg.begin() + jpeg.size() * 6 / 10);  // mid-scan
  Result<Image> image = Decode(cut);
  EXPECT_EQ(image.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(image.status().message().find("truncated"), std::string::npos)
      << image.status().message();
  const Bytes header_only(jpeg.begin(), jpeg.begin() + 20);
  EXPECT_EQ(Decode(header_only).status().code(), StatusCode::kCorruptData);
}

TEST(Decode, PngWithFlippedCrcIsCorrupt) {
  Bytes png = EncodePng(MakePixels(16, 16, 3, [](int x, int y, int) { return x * y; }), 16, 16,
                        PNG_FORMAT_RGB);
  // Find IDAT and flip a bit of its CRC (the 4 bytes after its data).
  for (size_t i = 8; i + 8 <= png.size();) {
    const uint32_t length = (png[i] << 24) | (png[i + 1] << 16) | (png[i + 2] << 8) | png[i + 3];
    if (std::memcmp(&png[i + 4], "IDAT", 4) == 0) {
      png[i + 8 + length] ^= 0x01;
      break;
    }
    i += 12 + length;
  }
  Result<Image> image = Decode(png);
  EXPECT_EQ(image.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(image.status().message().find("CRC"), std::string::npos) << image.status().message();
}

TEST(Decode, TruncatedPngAndWebpAreCorrupt) {
  const Bytes pixels =
      MakePixels(64, 64, 3, [](int x, int y, int c) { return (x * 13 + y * 7 + c) & 0xFF; });
  const Bytes png = EncodePng(pixels, 64, 64, PNG_FORMAT_RGB);
  EXPECT_EQ(Decode(Bytes(png.begin(), png.begin() + png.size() / 2)).status().code(),
            StatusCode::kCorruptData);
  const Bytes webp = EncodeWebp(pixels, 64, 64, 3, 80);
  EXPECT_EQ(Decode(Bytes(webp.begin(), webp.begin() + webp.size() / 2)).status().code(),
            StatusCode::kCorruptData);
  EXPECT_EQ(Decode(Bytes(webp.begin(), webp.begin() + 6)).status().code(),
            StatusCode::kCorruptData);
}

TEST(Decode, UnknownBytesAreUnsupported) {
  std::mt19937 rng(7);
  Bytes random(1000);
  for (uint8_t& b : random) b = static_cast<uint8_t>(rng());
  random[0] = 0x42;  // not the first byte of any magic
  EXPECT_EQ(Decode(random).status().code(), StatusCode::kUnsupportedFormat);
  const Bytes gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0};
  EXPECT_EQ(Decode(gif).status().code(), StatusCode::kUnsupportedFormat);
}

TEST(Decode, DamagedFilesNeverCrash) {
  // Random byte damage: every result must be a decoded image or a data error.
  const Bytes pixels =
      MakePixels(48, 40, 3, [](int x, int y, int c) { return (x * 5 + y * 9 + c * 80) & 0xFF; });
  const std::vector<Bytes> files = {EncodeJpeg(pixels, 48, 40, TJPF_RGB, TJSAMP_420, 90),
                                    EncodePng(pixels, 48, 40, PNG_FORMAT_RGB),
                                    EncodeWebp(pixels, 48, 40, 3, 80)};
  std::mt19937 rng(123);
  int failures = 0;
  for (const Bytes& file : files) {
    for (int trial = 0; trial < 150; ++trial) {
      Bytes damaged = file;
      const int hits = 1 + static_cast<int>(rng() % 8);
      for (int i = 0; i < hits; ++i) damaged[rng() % damaged.size()] = static_cast<uint8_t>(rng());
      if (trial % 3 == 0) damaged.resize(rng() % damaged.size());
      DecodeSpec spec;
      spec.max_pixels = 1 << 20;  // damaged headers may declare huge images
      Result<Image> image = DecodeImage(damaged.data(), damaged.size(), spec);
      if (!image.ok()) {
        ++failures;
        const StatusCode code = image.status().code();
        EXPECT_TRUE(code == StatusCode::kCorruptData || code == StatusCode::kUnsupportedFormat ||
                    code == StatusCode::kPixelLimit)
            << image.status().ToString();
      }
      // A failure must not poison the decoder for the next, valid, file.
      ASSERT_TRUE(Decode(file).ok()) << "after damaged trial " << trial;
    }
  }
  EXPECT_GT(failures, 0);
}

TEST(DecodeOp, DecodesSampleMediaIntoScratch) {
  testing::TestContext t;
  t.SetMedia(EncodeJpegRgb(64, 48, [](int x, int y, int c) { return Quadrants(x, y, c, 64, 48); }));
  DecodeOp op(DecodeSpec{}, DecodeTarget{}, testing::TestContext::kImageSlot);
  EXPECT_EQ(op.name(), "image.decode");
  const Status status = op.Run(t.ctx);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(t.image().width, 64);
  EXPECT_EQ(t.image().height, 48);
  EXPECT_EQ(t.image().channels, 4);
  EXPECT_EQ(t.ctx.next_scratch, 1);
  ExpectColour(t.image(), 10, 10, 255, 0, 0, 12);
  // The media buffer is read in place: no handle to it was kept or copied.
  EXPECT_EQ(t.sample.media[0].bytes.use_count(), 1);
}

TEST(DecodeOp, AppliesOrientationAndTarget) {
  testing::TestContext t;
  t.SetMedia(testing::InsertAfterSoi(CornerJpeg(128, 64), testing::ExifApp1(6, false)));
  DecodeOp op(DecodeSpec{}, DecodeTarget{.min_shorter_side = 32}, testing::TestContext::kImageSlot);
  const Status status = op.Run(t.ctx);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(t.image().width, 32);  // 1/2 scale, then rotated
  EXPECT_EQ(t.image().height, 64);
  EXPECT_EQ(RedCorner(t.image()), 1);
}

TEST(DecodeOp, ANarrowImageHoldsNoMoreThanItsPixels) {
  // 1 x 20000 and 20000 x 1: rows padded to 32 bytes (or an extra row) would hold 8x
  // (2x) the pixels' 4 bytes each; the decode holds at most an eighth more.
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{1, 20000}, {20000, 1}}) {
    testing::TestContext t;
    Bytes pixels(static_cast<size_t>(w) * h * 3);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
    t.SetMedia(EncodePng(pixels, w, h, PNG_FORMAT_RGB));
    DecodeOp op(DecodeSpec{}, DecodeTarget{}, testing::TestContext::kImageSlot);
    const Status status = op.Run(t.ctx);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_EQ(t.image().width, w);
    ASSERT_EQ(t.image().height, h);
    // What the arena holds for the pixels' bytes and an eighth (it rounds up its own way).
    const size_t bytes = static_cast<size_t>(w) * h * 4;
    ScratchArena plain;
    plain.Get(0, bytes + bytes / 8);
    EXPECT_LE(t.scratch.capacity(), plain.capacity()) << w << "x" << h;
    EXPECT_EQ(PixelsOf(t.image())[4 * (static_cast<size_t>(w) * h - 1)],
              pixels[3 * (static_cast<size_t>(w) * h - 1)]);
  }
}

// A PNG row wider than kPngMaxWidth is refused from its header: libpng's two row
// buffers would take up to 12 bytes a pixel of it (an 89,478,485 x 1 PNG took 626 MB
// in them). The widest it takes is decoded.
TEST(DecodeOp, APngWiderThanItsRowBuffersMayHoldIsRefusedFromItsHeader) {
  for (const int w : {kPngMaxWidth + 1, kPngMaxWidth}) {
    testing::TestContext t;
    // One black row: the simplified writer refuses rows wider than 1,000,000 pixels.
    t.SetMedia(ClassicRgbPng(w, 8, {std::vector<uint8_t>(static_cast<size_t>(w) * 3, 0)}));
    DecodeOp op(DecodeSpec{}, DecodeTarget{}, testing::TestContext::kImageSlot);
    const Status status = op.Run(t.ctx);
    if (w > kPngMaxWidth) {
      EXPECT_EQ(status.code(), StatusCode::kPixelLimit) << status.ToString();
      EXPECT_THAT(status.message(),
                  ::testing::HasSubstr("rows wider than 5592405 pixels are refused"));
      EXPECT_EQ(t.scratch.capacity(), 0u) << "nothing decoded";
    } else {
      ASSERT_TRUE(status.ok()) << status.ToString();
      EXPECT_EQ(t.image().width, w);
    }
  }
}

// image.smart_resize's max_aspect_ratio, passed back by the planner: a wider image is
// refused from its header, with smart_resize's rule (above, not at, the ratio).
TEST(DecodeOp, AnImageWiderThanTheLaterResizeTakesIsRefusedFromItsHeader) {
  for (const auto& [w, h, refused] :
       std::vector<std::tuple<int, int, bool>>{{1, 201, true}, {603, 3, true}, {1, 200, false}}) {
    testing::TestContext t;
    t.SetMedia(EncodePng(Bytes(static_cast<size_t>(w) * h * 3, 9), w, h, PNG_FORMAT_RGB));
    DecodeOp op(DecodeSpec{}, DecodeTarget{.max_aspect_ratio = 200},
                testing::TestContext::kImageSlot);
    const Status status = op.Run(t.ctx);
    EXPECT_EQ(!status.ok(), refused) << w << "x" << h << ": " << status.ToString();
    if (refused) {
      EXPECT_EQ(status.code(), StatusCode::kPixelLimit);
      EXPECT_NE(status.message().find("is above max_aspect_ratio 200 (image.smart_resize; "
                                      "refused from the header)"),
                std::string::npos)
          << status.message();
      EXPECT_EQ(t.scratch.capacity(), 0u) << "nothing decoded";
    }
  }
}

TEST(DecodeOp, ReportsErrorsAsStatus) {
  testing::TestContext t;
  DecodeOp op(DecodeSpec{}, DecodeTarget{}, testing::TestContext::kImageSlot);
  // No media item for the field: a clear per-sample error.
  const Status missing = op.Run(t.ctx);
  EXPECT_EQ(missing.code(), StatusCode::kMissingField);
  EXPECT_THAT(missing.message(), ::testing::HasSubstr("the record has no image"));
  t.SetMedia({});
  EXPECT_EQ(op.Run(t.ctx).code(), StatusCode::kCorruptData);  // zero bytes
  t.SetMedia({1, 2, 3, 4, 5});
  EXPECT_EQ(op.Run(t.ctx).code(), StatusCode::kUnsupportedFormat);
}

}  // namespace
}  // namespace headrace
