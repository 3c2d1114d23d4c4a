#include "make_sample/make_sample_ocr.h"

#include <png.h>

#include <array>
#include <string_view>

#include "headrace/ops/ocr/render.h"

namespace headrace {
namespace {

// Dictionary words of 4 to 7 letters: what Tesseract's English model reads reliably at
// the size drawn, so tests can expect them word for word.
constexpr std::array<std::string_view, 40> kWords = {
    "river",  "quiet",  "summer", "garden", "window", "bridge", "yellow", "market",
    "letter", "silver", "forest", "number", "orange", "travel", "winter", "simple",
    "people", "little", "water",  "house",  "green",  "light",  "music",  "paper",
    "train",  "stone",  "cloud",  "table",  "horse",  "sugar",  "north",  "south",
    "planet", "island", "doctor", "mother", "animal", "family", "friend", "school"};

}  // namespace

std::vector<std::string> OcrLines(int64_t i) {
  const auto word = [i](int k) {
    // Steps coprime with 40: a page's five words are distinct, and no line repeats
    // a neighbouring sample's.
    return std::string(kWords[static_cast<size_t>((i * 7 + k * 9) % 40)]);
  };
  return {word(0) + " " + word(1) + " " + word(2),
          word(3) + " " + word(4) + " " + std::to_string(i)};
}

Result<int64_t> WriteOcrPage(int64_t i, const std::filesystem::path& path) {
  const std::vector<std::string> lines = OcrLines(i);
  HR_ASSIGN_OR_RETURN(const Image page, RenderText(lines, {}));
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(page.width());
  png.height = static_cast<png_uint_32>(page.height());
  png.format = PNG_FORMAT_GRAY;
  const ImageView v = page.view();
  if (png_image_write_to_file(&png, path.c_str(), 0, v.data, static_cast<png_int_32>(v.stride),
                              nullptr) == 0) {
    const std::string why = png.message;
    png_image_free(&png);
    return Status::IoError("cannot write " + path.string() + ": " + why);
  }
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return Status::IoError("cannot stat " + path.string() + ": " + ec.message());
  return static_cast<int64_t>(size);
}

}  // namespace headrace
