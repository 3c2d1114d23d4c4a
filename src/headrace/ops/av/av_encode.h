// Writing small media files with FFmpeg's encoders: the clips and tones that
// `headrace make-sample --modalities` generates and the tests decode. Not on any hot path.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "headrace/core/status.h"

namespace headrace::av {

struct VideoClip {
  int width = 64;
  int height = 48;
  int frames = 25;
  int fps = 25;
  int gop = 12;                    // frames between keyframes
  std::string codec = "libx264";   // any FFmpeg encoder of video ("mpeg4", "libx264")
  // Paints frame `index` as RGB24 (width * height * 3 bytes, rows packed).
  std::function<void(int index, uint8_t* rgb)> paint;
};

// Encodes `clip` into the file `path`; the container comes from its extension (.mp4,
// .mkv, ...).
Status WriteVideo(const std::string& path, const VideoClip& clip);

// The same, returned as bytes (through a temporary file next to nothing: `scratch_path`
// is written and removed).
Result<std::vector<uint8_t>> EncodeVideo(const VideoClip& clip, const std::string& scratch_path);

}  // namespace headrace::av
