// Test helpers: clouds as KITTI and PCD bytes, and running one op on a sample.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <lzf.h>

#include "headrace/ops/op.h"

namespace headrace::testing {

// x, y, z, intensity per point, as a KITTI .bin.
inline std::vector<uint8_t> KittiBytes(const std::vector<float>& points) {
  std::vector<uint8_t> bytes(points.size() * sizeof(float));
  if (!bytes.empty()) std::memcpy(bytes.data(), points.data(), bytes.size());
  return bytes;
}

inline std::vector<uint8_t> Text(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// A PCD v0.7 header for `fields` ("x y z intensity"), `size`/`type`/`count` lines, and
// `points` points (WIDTH points, HEIGHT 1), then the DATA line.
inline std::string PcdHeader(const std::string& fields, const std::string& size,
                             const std::string& type, const std::string& count, int64_t points,
                             const std::string& data) {
  return "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS " + fields +
         "\nSIZE " + size + "\nTYPE " + type + "\nCOUNT " + count + "\nWIDTH " +
         std::to_string(points) + "\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS " +
         std::to_string(points) + "\nDATA " + data + "\n";
}

// `points` (x, y, z, intensity each) as a binary PCD of four float32 fields.
inline std::vector<uint8_t> PcdBinary(const std::vector<float>& points) {
  std::vector<uint8_t> bytes =
      Text(PcdHeader("x y z intensity", "4 4 4 4", "F F F F", "1 1 1 1",
                     static_cast<int64_t>(points.size() / 4), "binary"));
  const std::vector<uint8_t> body = KittiBytes(points);
  bytes.insert(bytes.end(), body.begin(), body.end());
  return bytes;
}

// `points` (x, y, z, intensity each) as PCL writes DATA binary_compressed: the four
// float32 columns one after another, LZF-compressed (liblzf, the library PCL bundles),
// after a uint32 compressed size and a uint32 uncompressed size.
inline std::vector<uint8_t> PcdCompressed(const std::vector<float>& points) {
  const size_t n = points.size() / 4;
  std::vector<float> columns(points.size());
  for (size_t i = 0; i < n; ++i) {
    for (size_t c = 0; c < 4; ++c) columns[c * n + i] = points[i * 4 + c];
  }
  const auto raw = static_cast<unsigned>(columns.size() * sizeof(float));
  std::vector<uint8_t> packed(raw + raw / 16 + 64);  // room for incompressible data
  const unsigned size = raw == 0 ? 0
                                 : lzf_compress(columns.data(), raw, packed.data(),
                                                static_cast<unsigned>(packed.size()));
  const uint32_t sizes[2] = {size, raw};
  std::vector<uint8_t> bytes = Text(PcdHeader("x y z intensity", "4 4 4 4", "F F F F",
                                              "1 1 1 1", static_cast<int64_t>(n),
                                              "binary_compressed"));
  const auto* prefix = reinterpret_cast<const uint8_t*>(sizes);
  bytes.insert(bytes.end(), prefix, prefix + sizeof sizes);
  bytes.insert(bytes.end(), packed.begin(), packed.begin() + size);
  return bytes;
}

}  // namespace headrace::testing
