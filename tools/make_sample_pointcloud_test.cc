#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "headrace/core/rng.h"
#include "make_sample.h"
#include "test_files.h"

namespace headrace {
namespace {

namespace fs = std::filesystem;

TEST(MakeSamplePointCloud, ScenesAreAGroundPlaneAndBoxesStandingOnIt) {
  for (uint64_t key : {1u, 2u, 3u}) {
    const std::vector<float> p = PointCloudScene(key);
    const std::vector<PointCloudBox> boxes = PointCloudBoxes(key);
    ASSERT_GE(boxes.size(), 2u);
    ASSERT_LE(boxes.size(), 4u);
    ASSERT_EQ(p.size(), 4 * (kPointCloudGroundPoints + boxes.size() * kPointCloudBoxPoints));
    for (size_t i = 0; i < p.size(); i += 4) {
      const bool ground = i / 4 < static_cast<size_t>(kPointCloudGroundPoints);
      EXPECT_EQ(p[i + 3], ground ? 0.2f : 0.8f);
      if (ground) {
        EXPECT_NEAR(p[i + 2], kPointCloudGroundZ, 0.021);
        EXPECT_GT(p[i], 0) << "in front of the sensor";
        continue;
      }
      const PointCloudBox& b = boxes[(i / 4 - kPointCloudGroundPoints) / kPointCloudBoxPoints];
      for (int a = 0; a < 3; ++a) {
        EXPECT_LE(std::abs(p[i + a] - b.center[a]), b.size[a] / 2 + 1e-4f) << "on its box";
      }
    }
    EXPECT_EQ(PointCloudScene(key), p) << "a pure function of the key";
  }
  EXPECT_NE(PointCloudScene(1), PointCloudScene(2));
}

TEST(MakeSamplePointCloud, WritesKittiFilesAndTheManifestKey) {
  const char* env = std::getenv("HEADRACE_TEST_TMP");
  const fs::path root = fs::path(env != nullptr ? env : "/tmp") /
                        ("make_sample_pointcloud_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  MakeSampleOptions options;
  options.out_dir = root.string();
  options.samples = 3;
  options.seed = 4;
  options.threads = 1;
  options.vocab_size = 300;
  options.pointcloud = true;
  auto stats = MakeSample(options);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  const std::vector<std::string> lines = test::Lines(test::ReadFile(root / "manifest.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  int64_t total = 0;
  for (uint64_t i = 0; i < 3; ++i) {
    const std::string name = "pointclouds/00000" + std::to_string(i) + ".bin";
    EXPECT_NE(lines[i].find("\"pointcloud\":\"" + name + "\""), std::string::npos) << lines[i];
    const std::string bytes = test::ReadFile(root / name);
    const std::vector<float> want = PointCloudScene(HashKeys(4, i));
    ASSERT_EQ(bytes.size(), want.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(bytes.data(), want.data(), bytes.size()), 0);
    total += static_cast<int64_t>(bytes.size());
  }
  EXPECT_EQ(stats->pointcloud_bytes, total);
  fs::remove_all(root);
}

}  // namespace
}  // namespace headrace
