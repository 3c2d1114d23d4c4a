// make-sample's point clouds: a LiDAR-like scene per sample (make_sample.h).
#include <lzf.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "headrace/core/rng.h"
#include "make_sample/make_sample.h"

namespace headrace {

std::vector<PointCloudBox> PointCloudBoxes(uint64_t key) {
  Rng rng(HashKeys(key, 0x9C));
  const int n = 2 + static_cast<int>(rng.Below(3));
  std::vector<PointCloudBox> boxes;
  for (int b = 0; b < n; ++b) {
    // Cars in front of the sensor, one lane apart, so that no two overlap.
    PointCloudBox box;
    box.center[0] = static_cast<float>(8 + 10 * b + rng.Uniform(0, 6));
    box.center[1] = static_cast<float>((b % 2 == 0 ? -1 : 1) * rng.Uniform(2, 12));
    box.size[0] = static_cast<float>(rng.Uniform(3.5, 4.5));
    box.size[1] = static_cast<float>(rng.Uniform(1.6, 2.0));
    box.size[2] = static_cast<float>(rng.Uniform(1.4, 1.7));
    box.center[2] = kPointCloudGroundZ + box.size[2] / 2;
    boxes.push_back(box);
  }
  return boxes;
}

std::vector<float> PointCloudScene(uint64_t key) {
  Rng rng(HashKeys(key, 0x9D));
  std::vector<float> points;
  points.reserve((kPointCloudGroundPoints + 4 * kPointCloudBoxPoints) * 4);
  for (int i = 0; i < kPointCloudGroundPoints; ++i) {
    // Ground returns, denser near the sensor as a spinning LiDAR's are.
    const double r = 2 + 48 * rng.Uniform() * rng.Uniform();
    const double a = rng.Uniform(-M_PI / 2, M_PI / 2);
    points.insert(points.end(),
                  {static_cast<float>(r * std::cos(a)), static_cast<float>(r * std::sin(a)),
                   static_cast<float>(kPointCloudGroundZ + rng.Uniform(-0.02, 0.02)), 0.2f});
  }
  for (const PointCloudBox& box : PointCloudBoxes(key)) {
    // Points on the box's top and on its side that faces the sensor (-x).
    for (int i = 0; i < kPointCloudBoxPoints; ++i) {
      const bool top = rng.Bernoulli(0.4);
      const double u = rng.Uniform(-0.5, 0.5), v = rng.Uniform(-0.5, 0.5);
      const float x = top ? box.center[0] + static_cast<float>(u) * box.size[0]
                          : box.center[0] - box.size[0] / 2;
      const float y = box.center[1] + static_cast<float>(v) * box.size[1];
      const float z = top ? box.center[2] + box.size[2] / 2
                          : box.center[2] + static_cast<float>(u) * box.size[2];
      points.insert(points.end(), {x, y, z, 0.8f});
    }
  }
  return points;
}

namespace {

Result<int64_t> WriteBytes(const void* data, size_t bytes, const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (file == nullptr) return Status::IoError("cannot create " + path);
  if (std::fwrite(data, 1, bytes, file.get()) != bytes) {
    return Status::IoError("cannot write " + path);
  }
  if (std::fclose(file.release()) != 0) return Status::IoError("cannot write " + path);
  return static_cast<int64_t>(bytes);
}

}  // namespace

Result<int64_t> WritePointCloud(uint64_t key, const std::string& path) {
  const std::vector<float> points = PointCloudScene(key);
  // Little-endian float32, as KITTI's.
  return WriteBytes(points.data(), points.size() * sizeof(float), path);
}

Result<std::string> PcdBytes(const std::vector<float>& points, PcdForm form) {
  const size_t n = points.size() / 4;
  static constexpr const char* kData[] = {"ascii", "binary", "binary_compressed"};
  std::string out =
      "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS x y z intensity\n"
      "SIZE 4 4 4 4\nTYPE F F F F\nCOUNT 1 1 1 1\nWIDTH " +
      std::to_string(n) + "\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS " + std::to_string(n) +
      "\nDATA " + kData[static_cast<int>(form)] + "\n";
  switch (form) {
    case PcdForm::kAscii: {
      // std::to_chars' shortest form reads back (from_chars) to the same float.
      char buf[32];
      for (size_t i = 0; i < 4 * n; ++i) {
        const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, points[i]);
        if (ec != std::errc()) return Status::Internal("to_chars failed");
        out.append(buf, end);
        out += i % 4 == 3 ? '\n' : ' ';
      }
      return out;
    }
    case PcdForm::kBinary:
      out.append(reinterpret_cast<const char*>(points.data()), 4 * n * sizeof(float));
      return out;
    case PcdForm::kBinaryCompressed: {
      // As PCL writes it: uint32 compressed size, uint32 raw size, then the LZF stream
      // of the columns (every x, then every y, z, intensity).
      std::vector<float> columns(4 * n);
      for (size_t i = 0; i < n; ++i) {
        for (size_t c = 0; c < 4; ++c) columns[c * n + i] = points[i * 4 + c];
      }
      const size_t raw = columns.size() * sizeof(float);
      if (raw > UINT32_MAX / 2) return Status::InvalidArgument("PCD: too many points");
      // LZF grows incompressible input by at most 1/32 + 1 byte.
      std::vector<char> packed(raw + raw / 16 + 64);
      const unsigned size =
          raw == 0 ? 0
                   : lzf_compress(columns.data(), static_cast<unsigned>(raw), packed.data(),
                                  static_cast<unsigned>(packed.size()));
      if (raw > 0 && size == 0) return Status::Internal("lzf_compress failed");
      const uint32_t sizes[2] = {size, static_cast<uint32_t>(raw)};
      out.append(reinterpret_cast<const char*>(sizes), sizeof sizes);
      out.append(packed.data(), size);
      return out;
    }
  }
  return Status::InvalidArgument("PCD: unknown form");
}

Result<int64_t> WritePointCloudPcd(uint64_t key, PcdForm form, const std::string& path) {
  HR_ASSIGN_OR_RETURN(const std::string bytes, PcdBytes(PointCloudScene(key), form));
  return WriteBytes(bytes.data(), bytes.size(), path);
}

}  // namespace headrace
