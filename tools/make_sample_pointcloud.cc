// make-sample's point clouds: a LiDAR-like scene per sample (make_sample.h).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "headrace/core/rng.h"
#include "make_sample.h"

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

Result<int64_t> WritePointCloud(uint64_t key, const std::string& path) {
  const std::vector<float> points = PointCloudScene(key);
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (file == nullptr) return Status::IoError("cannot create " + path);
  const size_t bytes = points.size() * sizeof(float);  // little-endian float32, as KITTI's
  if (std::fwrite(points.data(), 1, bytes, file.get()) != bytes) {
    return Status::IoError("cannot write " + path);
  }
  if (std::fclose(file.release()) != 0) return Status::IoError("cannot write " + path);
  return static_cast<int64_t>(bytes);
}

}  // namespace headrace
