// Test helpers (video op tests): small H.264 clips, flat frames that say which they are
// and moving ones that make every kind of frame.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "headrace/ops/av/av_encode.h"

namespace headrace::testing {

// `frames` frames of 64x48 at 10 fps, a keyframe every 5: frame i is one flat colour,
// red 8 i, green `green(i)`, blue 100.
template <typename Green>
std::vector<uint8_t> FlatColourClip(int frames, Green green) {
  av::VideoClip c;
  c.width = 64;
  c.height = 48;
  c.frames = frames;
  c.fps = 10;
  c.gop = 5;
  c.paint = [green](int frame, uint8_t* rgb) {
    for (int i = 0; i < 64 * 48; ++i) {
      rgb[3 * i] = static_cast<uint8_t>(8 * frame);
      rgb[3 * i + 1] = static_cast<uint8_t>(green(frame));
      rgb[3 * i + 2] = 100;
    }
  };
  auto bytes = av::EncodeVideo(c);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

// `frames` frames of 64x48 at `fps`, a keyframe every `gop`, `b_frames` as VideoClip's:
// a flat stripe on the left and a texture moving on the rest, with some noise.
inline std::vector<uint8_t> MovingClip(int frames, int fps, int gop, int b_frames,
                                       std::string_view container = "mp4") {
  av::VideoClip c;
  c.width = 64;
  c.height = 48;
  c.frames = frames;
  c.fps = fps;
  c.gop = gop;
  c.b_frames = b_frames;
  c.paint = [](int frame, uint8_t* rgb) {
    uint32_t noise = 2654435761u * static_cast<uint32_t>(frame + 1);
    for (int y = 0; y < 48; ++y) {
      for (int x = 0; x < 64; ++x) {
        noise = noise * 1664525u + 1013904223u;
        uint8_t* p = rgb + 3 * (y * 64 + x);
        const bool flat = x < 16;
        p[0] = static_cast<uint8_t>(flat ? 2 * frame : x * 4 + (noise >> 29));
        p[1] = static_cast<uint8_t>(flat ? 128 : ((x + 3 * frame) * 9 ^ y * 5));
        p[2] = static_cast<uint8_t>(flat ? 128 : (y + frame) * 7 + (noise >> 30));
      }
    }
  };
  auto bytes = av::EncodeVideo(c, container);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

}  // namespace headrace::testing
