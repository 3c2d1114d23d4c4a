#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "headrace/core/rng.h"
#include "headrace/ops/pointcloud/read.h"
#include "make_sample/make_sample.h"
#include "test_files.h"

namespace headrace {
namespace {

namespace fs = std::filesystem;

// What pointcloud.read's kernel reads from `bytes` as `format`, every point kept.
std::vector<float> Read(const std::string& bytes, PointFormat format) {
  std::vector<float> points;
  auto n = ParsePoints(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), format,
                       PointRange{}, [&](int64_t count) -> Result<float*> {
                         points.resize(static_cast<size_t>(std::max<int64_t>(count, 1)) * 4);
                         return points.data();
                       });
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  if (!n.ok()) return {};
  points.resize(static_cast<size_t>(*n) * 4);
  return points;
}

TEST(MakeSamplePointCloud, EveryPcdFormReadsBackToThePoints) {
  const std::vector<float> want = PointCloudScene(7);
  for (PcdForm form : {PcdForm::kAscii, PcdForm::kBinary, PcdForm::kBinaryCompressed}) {
    auto bytes = PcdBytes(want, form);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_EQ(Read(*bytes, PointFormat::kPcd), want) << static_cast<int>(form);
    EXPECT_EQ(Read(*bytes, PointFormat::kAuto), want) << "detected as PCD";
  }
  // Compression is what makes binary_compressed worth writing: smaller than binary.
  EXPECT_LT(PcdBytes(want, PcdForm::kBinaryCompressed)->size(),
            PcdBytes(want, PcdForm::kBinary)->size());
  auto empty = PcdBytes({}, PcdForm::kBinaryCompressed);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(Read(*empty, PointFormat::kPcd).empty());
}

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

TEST(MakeSamplePointCloud, WritesKittiAndPcdFilesOfTheSameSceneAndTheirManifestKeys) {
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
  int64_t total = 0, pcd_total = 0;
  const char* kData[] = {"DATA ascii\n", "DATA binary\n", "DATA binary_compressed\n"};
  for (uint64_t i = 0; i < 3; ++i) {
    const std::string name = "pointclouds/00000" + std::to_string(i) + ".bin";
    EXPECT_NE(lines[i].find("\"pointcloud\":\"" + name + "\""), std::string::npos) << lines[i];
    const std::string bytes = test::ReadFile(root / name);
    const std::vector<float> want = PointCloudScene(HashKeys(4, i));
    ASSERT_EQ(bytes.size(), want.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(bytes.data(), want.data(), bytes.size()), 0);
    total += static_cast<int64_t>(bytes.size());

    // The same scene as PCD, sample i in form i % 3: the three read equal to the .bin.
    const std::string pcd_name = "pointclouds/00000" + std::to_string(i) + ".pcd";
    EXPECT_NE(lines[i].find("\"pointcloud_pcd\":\"" + pcd_name + "\""), std::string::npos)
        << lines[i];
    const std::string pcd = test::ReadFile(root / pcd_name);
    EXPECT_NE(pcd.find(kData[i]), std::string::npos) << pcd_name;
    EXPECT_EQ(Read(pcd, PointFormat::kPcd), Read(bytes, PointFormat::kKitti)) << pcd_name;
    pcd_total += static_cast<int64_t>(pcd.size());
  }
  EXPECT_EQ(stats->pointcloud_bytes, total);
  EXPECT_EQ(stats->pointcloud_pcd_bytes, pcd_total);
  fs::remove_all(root);
}

}  // namespace
}  // namespace headrace
