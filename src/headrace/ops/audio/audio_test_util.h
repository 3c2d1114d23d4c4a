// Test helpers: encoded tones and their measured frequency.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "headrace/ops/av/av_encode.h"
#include "headrace/ops/op.h"

namespace headrace::testing {

// A tone of `hz` (channel c at hz * (c + 1)) encoded with `codec` into a file of `ext`.
inline std::vector<uint8_t> Tone(double hz, int rate, int channels, double seconds,
                                 const std::string& codec = "pcm_s16le",
                                 const std::string& ext = "wav") {
  av::AudioClip clip;
  clip.sample_rate = rate;
  clip.channels = channels;
  clip.seconds = seconds;
  clip.codec = codec;
  clip.sample = [=](int64_t i, int c) {
    return static_cast<float>(0.5 * std::sin(2 * M_PI * hz * (c + 1) * static_cast<double>(i) / rate));
  };
  auto bytes = av::EncodeAudio(clip, ext);
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

// The dominant frequency of `x` (n samples at `rate`) from its zero crossings.
inline double ZeroCrossingHz(const float* x, int64_t n, int rate) {
  int64_t crossings = 0;
  for (int64_t i = 1; i < n; ++i) crossings += (x[i - 1] < 0) != (x[i] < 0);
  return static_cast<double>(crossings) / 2.0 / (static_cast<double>(n) / rate);
}

}  // namespace headrace::testing
