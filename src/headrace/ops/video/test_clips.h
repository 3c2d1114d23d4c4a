// Test helper (video op tests): a small H.264 clip whose frames say which they are.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
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

}  // namespace headrace::testing
