// Test helpers: clouds as KITTI and PCD bytes, and running one op on a sample.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

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

}  // namespace headrace::testing
