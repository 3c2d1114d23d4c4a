// make-sample's OCR pages (`--modalities ocr`): sample i gets ocr/<id>.png, two lines of
// known words drawn with FreeType in DejaVu Sans (ops/ocr/render.h), black on white,
// 8-bit gray; its manifest line gets "ocr_image" (the file) and "ocr_text" (the lines,
// joined by "\n": what ocr.text should read).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "headrace/core/status.h"

namespace headrace {

// The lines drawn on sample i's page: five common English words picked by i, then i
// itself (sample 0: "river silver water" / "table animal 0"). A pure function of i.
std::vector<std::string> OcrLines(int64_t i);

// Writes sample i's page as a PNG at `path`; returns its size in bytes.
Result<int64_t> WriteOcrPage(int64_t i, const std::filesystem::path& path);

}  // namespace headrace
