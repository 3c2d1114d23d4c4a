// Text rendered into an image with FreeType: the pages ocr.text's tests, make-sample's
// OCR data and the OCR benchmark read. Not an operator; a small kernel beside them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/ops/image/image.h"

namespace headrace {

// DejaVu Sans, from Debian's fonts-dejavu-core.
inline constexpr std::string_view kDejaVuSans = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

// $HEADRACE_FONT when set and not empty, else kDejaVuSans. The wheel ships DejaVu Sans in
// the package and its launcher and `import headrace` set HEADRACE_FONT to it (a machine
// without fonts-dejavu-core can still make the OCR sample pages).
std::string DefaultFont();

struct RenderTextOptions {
  std::string font = DefaultFont();  // a TrueType/OpenType file
  int pixel_size = 32;   // the font's em size in pixels
  int margin = 24;       // blank pixels around the text
  int channels = 1;      // 1 (gray) or 3 (RGB, the same value in each)
  uint8_t background = 255;
  uint8_t ink = 0;
};

// Renders `lines` (UTF-8), one under the other, left-aligned, antialiased ink on the
// background. The image is as large as the text plus margins; an empty list, or lines
// with no glyphs, gives a blank image of margins only (at least 1x1 inside them).
// kInvalidArgument when the font cannot be loaded (naming it) or the options are out of
// range (pixel_size 4..512, margin 0..4096, channels 1 or 3).
Result<Image> RenderText(std::span<const std::string> lines, const RenderTextOptions& options);

}  // namespace headrace
