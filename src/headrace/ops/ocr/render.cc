#include "headrace/ops/ocr/render.h"

#include <ft2build.h>
#include FT_FREETYPE_H

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

namespace headrace {
namespace {

struct LibraryDeleter {
  void operator()(FT_Library lib) const { FT_Done_FreeType(lib); }
};
struct FaceDeleter {
  void operator()(FT_Face face) const { FT_Done_Face(face); }
};
using LibraryPtr = std::unique_ptr<std::remove_pointer_t<FT_Library>, LibraryDeleter>;
using FacePtr = std::unique_ptr<std::remove_pointer_t<FT_Face>, FaceDeleter>;

// The code points of UTF-8 `s`; a malformed byte becomes U+FFFD.
std::vector<char32_t> CodePoints(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + static_cast<size_t>(len) > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t c = len == 1 ? b : b & (0x7F >> len);
    for (int k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(c);
    i += static_cast<size_t>(len);
  }
  return out;
}

// Calls f(glyph slot, pen x) for each glyph of `line`, kerned; returns the advance.
template <typename F>
int LayOut(FT_Face face, const std::vector<char32_t>& line, F&& f) {
  int pen = 0;
  FT_UInt previous = 0;
  for (char32_t c : line) {
    const FT_UInt glyph = FT_Get_Char_Index(face, c);
    if (previous != 0 && glyph != 0 && FT_HAS_KERNING(face)) {
      FT_Vector delta;
      if (FT_Get_Kerning(face, previous, glyph, FT_KERNING_DEFAULT, &delta) == 0) {
        pen += static_cast<int>(delta.x >> 6);
      }
    }
    if (FT_Load_Glyph(face, glyph, FT_LOAD_RENDER) != 0) continue;
    f(face->glyph, pen);
    pen += static_cast<int>(face->glyph->advance.x >> 6);
    previous = glyph;
  }
  return pen;
}

}  // namespace

std::string DefaultFont() {
  const char* font = std::getenv("HEADRACE_FONT");
  return font != nullptr && *font != '\0' ? std::string(font) : std::string(kDejaVuSans);
}

Result<Image> RenderText(std::span<const std::string> lines, const RenderTextOptions& options) {
  if (options.pixel_size < 4 || options.pixel_size > 512 || options.margin < 0 ||
      options.margin > 4096 || (options.channels != 1 && options.channels != 3)) {
    return Status::InvalidArgument("RenderText: pixel_size must be in [4, 512], margin in "
                                   "[0, 4096], channels 1 or 3");
  }
  FT_Library lib_raw = nullptr;
  if (FT_Init_FreeType(&lib_raw) != 0) return Status::Internal("FreeType does not initialize");
  const LibraryPtr lib(lib_raw);
  FT_Face face_raw = nullptr;
  if (FT_New_Face(lib.get(), options.font.c_str(), 0, &face_raw) != 0) {
    return Status::InvalidArgument("RenderText: cannot load the font " + options.font +
                                   " (Debian: fonts-dejavu-core; or set HEADRACE_FONT)");
  }
  const FacePtr face(face_raw);
  if (FT_Set_Pixel_Sizes(face.get(), 0, static_cast<FT_UInt>(options.pixel_size)) != 0) {
    return Status::InvalidArgument("RenderText: the font " + options.font + " has no size " +
                                   std::to_string(options.pixel_size));
  }
  const int ascender = static_cast<int>(face->size->metrics.ascender >> 6);
  const int line_height = static_cast<int>(face->size->metrics.height >> 6);

  std::vector<std::vector<char32_t>> text;
  int width = 1;
  for (const std::string& line : lines) {
    text.push_back(CodePoints(line));
    int right = 0;
    const int advance = LayOut(face.get(), text.back(), [&](FT_GlyphSlot g, int pen) {
      right = std::max(right, pen + g->bitmap_left + static_cast<int>(g->bitmap.width));
    });
    width = std::max({width, advance, right});
  }
  const int height = std::max(1, static_cast<int>(text.size()) * line_height);
  HR_ASSIGN_OR_RETURN(Image image, Image::Allocate(width + 2 * options.margin,
                                                   height + 2 * options.margin, options.channels));
  const MutableImageView v = image.mutable_view();
  for (int y = 0; y < v.height; ++y) {
    std::fill(v.row(y), v.row(y) + static_cast<int64_t>(v.width) * v.channels, options.background);
  }
  const int bg = options.background, ink = options.ink;
  for (size_t l = 0; l < text.size(); ++l) {
    const int baseline = options.margin + static_cast<int>(l) * line_height + ascender;
    LayOut(face.get(), text[l], [&](FT_GlyphSlot g, int pen) {
      const FT_Bitmap& bm = g->bitmap;
      for (unsigned r = 0; r < bm.rows; ++r) {
        const int y = baseline - g->bitmap_top + static_cast<int>(r);
        if (y < 0 || y >= v.height) continue;
        for (unsigned c = 0; c < bm.width; ++c) {
          const int x = options.margin + pen + g->bitmap_left + static_cast<int>(c);
          if (x < 0 || x >= v.width) continue;
          const int coverage = bm.buffer[static_cast<int64_t>(r) * bm.pitch + c];
          if (coverage == 0) continue;
          uint8_t* px = v.row(y) + static_cast<int64_t>(x) * v.channels;
          // The glyph's shade over the background; where glyphs overlap, the inkier.
          const int shade = bg + (ink - bg) * coverage / 255;
          const auto value =
              static_cast<uint8_t>(ink < bg ? std::min<int>(px[0], shade) : std::max<int>(px[0], shade));
          for (int k = 0; k < v.channels; ++k) px[k] = value;
        }
      }
    });
  }
  return image;
}

}  // namespace headrace
