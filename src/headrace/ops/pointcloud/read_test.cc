#include "headrace/ops/pointcloud/read.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "headrace/core/rng.h"
#include "headrace/ops/pointcloud/pointcloud_test_util.h"

namespace headrace {
namespace {

using testing::KittiBytes;
using testing::PcdBinary;
using testing::PcdHeader;
using testing::Text;

struct Read {
  Status status;
  std::vector<float> points;  // x, y, z, intensity per point
};

// Runs pointcloud.read on `bytes` as the engine does (scratch, a value slot).
Read ReadWith(const std::vector<uint8_t>& bytes, PointReadSpec spec = {}) {
  std::vector<Value> values = {EncodedBytes{bytes.data(), bytes.size()}};
  ScratchArena scratch;
  SampleContext ctx;
  ctx.scratch = &scratch;
  ctx.values = values;
  PointReadOp op(spec, 0);
  Read out;
  out.status = op.Run(ctx);
  if (out.status.ok()) {
    const auto* v = std::get_if<PointsView>(&values[0]);
    EXPECT_NE(v, nullptr);
    if (v != nullptr) out.points.assign(v->data, v->data + v->count * v->channels);
  }
  return out;
}

const std::vector<float> kCloud = {1, 2, 3, 0.5f, -4, 5.5f, -6, 1, 0.25f, 0, 100, 0};

TEST(PointRead, KittiIsFloatRecords) {
  const Read r = ReadWith(KittiBytes(kCloud));
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.points, kCloud);
  PointReadSpec kitti;
  kitti.format = PointFormat::kKitti;
  EXPECT_EQ(ReadWith(KittiBytes(kCloud), kitti).points, kCloud);
}

TEST(PointRead, KittiOfAPartialRecordIsCorruptData) {
  std::vector<uint8_t> bytes = KittiBytes(kCloud);
  bytes.pop_back();  // 47 bytes
  const Read r = ReadWith(bytes);
  EXPECT_EQ(r.status.code(), StatusCode::kCorruptData);
  EXPECT_NE(r.status.message().find("47 bytes is not a whole number of 16-byte records"),
            std::string::npos)
      << r.status.message();
  EXPECT_EQ(ReadWith({}).status.code(), StatusCode::kCorruptData) << "an empty file";
}

TEST(PointRead, RangeCropAndNonFinitePointsAreDropped) {
  std::vector<float> cloud = kCloud;
  cloud.insert(cloud.end(), {std::nanf(""), 0, 0, 1, 0, INFINITY, 0, 1});
  PointReadSpec spec;
  EXPECT_EQ(ReadWith(KittiBytes(cloud), spec).points, kCloud) << "non-finite points dropped";
  spec.point_range = {0, 0, 0, 10, 10, 10};  // only the first point is inside
  EXPECT_EQ(ReadWith(KittiBytes(cloud), spec).points, (std::vector<float>{1, 2, 3, 0.5f}));
  spec.point_range = {0, 0, 0, 1, 10, 10};  // max is exclusive: x = 1 is out
  const Read none = ReadWith(KittiBytes(cloud), spec);
  ASSERT_TRUE(none.status.ok()) << "an empty cloud is a cloud";
  EXPECT_TRUE(none.points.empty());
}

TEST(PointRead, PcdBinary) {
  const Read r = ReadWith(PcdBinary(kCloud));
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.points, kCloud);
}

TEST(PointRead, PcdBinaryOfMixedTypesSkipsOtherFields) {
  // x y z as doubles, an rgb uint32 between them, intensity as uint8, a padding field.
  std::vector<uint8_t> bytes = Text(PcdHeader("x rgb y z _ intensity", "8 4 8 8 1 1",
                                              "F U F F I U", "1 1 1 1 3 1", 2, "binary"));
  auto put = [&bytes]<typename T>(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
  };
  for (int i = 0; i < 2; ++i) {
    put(1.5 + i);
    put(uint32_t{0xFF00FF});
    put(-2.0 * i);
    put(0.125);
    for (int k = 0; k < 3; ++k) put(int8_t{7});
    put(uint8_t(200 + i));
  }
  const Read r = ReadWith(bytes);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.points, (std::vector<float>{1.5f, 0, 0.125f, 200, 2.5f, -2, 0.125f, 201}));
}

TEST(PointRead, PcdAsciiWithoutIntensity) {
  const std::string text = PcdHeader("x y z", "4 4 4", "F F F", "1 1 1", 4, "ascii") +
                           "1 2 3\n-4.5 5e-1 6\nnan nan nan\n1e300 0 0\n";
  const Read r = ReadWith(Text(text));
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.points, (std::vector<float>{1, 2, 3, 0, -4.5f, 0.5f, 6, 0}))
      << "intensity 0; the nan point and the one beyond float's range dropped";
  // Auto-detected by a header that starts at VERSION or FIELDS too.
  const std::string bare = "FIELDS x y z intensity\nSIZE 4 4 4 4\nTYPE F F F F\nWIDTH 1\n"
                           "POINTS 1\nDATA ascii\n7 8 9 10";
  EXPECT_EQ(ReadWith(Text(bare)).points, (std::vector<float>{7, 8, 9, 10}));
}

TEST(PointRead, APcdHeaderThatLiesIsCorruptData) {
  const std::vector<uint8_t> good = PcdBinary(kCloud);  // 3 points
  auto error_of = [](const std::vector<uint8_t>& bytes) { return ReadWith(bytes).status; };
  // POINTS larger and smaller than the data.
  for (int claimed : {4, 2, 1000000000}) {
    std::vector<uint8_t> bytes =
        Text(PcdHeader("x y z intensity", "4 4 4 4", "F F F F", "1 1 1 1", claimed, "binary"));
    bytes.insert(bytes.end(), good.end() - 48, good.end());
    const Status s = error_of(bytes);
    EXPECT_EQ(s.code(), StatusCode::kCorruptData) << claimed;
    EXPECT_NE(s.message().find("header says " + std::to_string(claimed) + " points"),
              std::string::npos)
        << s.message();
  }
  // WIDTH x HEIGHT against POINTS.
  std::string text = PcdHeader("x y z", "4 4 4", "F F F", "1 1 1", 2, "ascii") + "1 2 3\n4 5 6\n";
  text.replace(text.find("POINTS 2"), 8, "POINTS 3");
  EXPECT_EQ(error_of(Text(text)).code(), StatusCode::kCorruptData);
  // ASCII lines against POINTS.
  const std::string three = PcdHeader("x y z", "4 4 4", "F F F", "1 1 1", 3, "ascii");
  EXPECT_EQ(error_of(Text(three + "1 2 3\n4 5 6\n")).code(), StatusCode::kCorruptData);
  EXPECT_EQ(error_of(Text(three + "1 2 3\n4 5 6\n1 1 1\n2 2 2\n")).code(),
            StatusCode::kCorruptData);
  EXPECT_EQ(error_of(Text(three + "1 2 3\n4 5\n1 1 1\n")).code(), StatusCode::kCorruptData);
  EXPECT_EQ(error_of(Text(three + "1 2 3\n4 5 x\n1 1 1\n")).code(), StatusCode::kCorruptData);
  // A header with no x, y, z; a SIZE that does not match FIELDS; no DATA line.
  EXPECT_EQ(error_of(Text(PcdHeader("a b c", "4 4 4", "F F F", "1 1 1", 0, "ascii"))).code(),
            StatusCode::kCorruptData);
  EXPECT_EQ(error_of(Text(PcdHeader("x y z", "4 4", "F F F", "1 1 1", 0, "ascii"))).code(),
            StatusCode::kCorruptData);
  EXPECT_EQ(error_of(Text("# .PCD v0.7\nFIELDS x y z\n")).code(), StatusCode::kCorruptData);
  // binary_compressed: refused by name.
  const Status compressed = error_of(
      Text(PcdHeader("x y z", "4 4 4", "F F F", "1 1 1", 1, "binary_compressed") + "xxxx"));
  EXPECT_EQ(compressed.code(), StatusCode::kUnsupportedFormat);
  EXPECT_NE(compressed.message().find("binary_compressed"), std::string::npos);
}

TEST(PointRead, ValidateNamesTheKey) {
  PointReadSpec spec;
  EXPECT_TRUE(PointReadOp::Validate(spec, "ops[0].pointcloud.read").ok());
  spec.point_range = {0, 0, 0, -1, 1, 1};
  const Status s = PointReadOp::Validate(spec, "ops[0].pointcloud.read");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ops[0].pointcloud.read.point_range"), std::string::npos);
  EXPECT_NE(s.message().find("axis x"), std::string::npos) << s.message();
}

// Fuzz-style: damaged files (bytes flipped, cut, zeroed, random; seeded) of each format
// never crash the op and never yield more points than the file can hold (the suite runs
// under ASan/UBSan too). Flipped bytes in a KITTI file are still a valid file.
TEST(PointRead, DamagedFilesGiveAStatusNeverACrash) {
  std::vector<float> cloud;
  for (int i = 0; i < 40; ++i) cloud.insert(cloud.end(), {0.5f * i, -0.25f * i, 0.1f * i, 1});
  std::string ascii = PcdHeader("x y z intensity", "4 4 4 4", "F F F F", "1 1 1 1", 40, "ascii");
  for (int i = 0; i < 40; ++i) ascii += std::to_string(i) + " 1.5 -2 0.5\n";
  const std::vector<std::vector<uint8_t>> files = {KittiBytes(cloud), PcdBinary(cloud),
                                                   Text(ascii)};
  Rng rng(HashKeys(11, 11));
  int ok = 0;
  for (int round = 0; round < 600; ++round) {
    std::vector<uint8_t> bytes = files[round % files.size()];
    switch ((round / 3) % 4) {
      case 0:
        for (int k = 0; k < 1 + round % 7; ++k) bytes[rng.Next() % bytes.size()] ^= 1 << (round % 8);
        break;
      case 1: bytes.resize(rng.Next() % bytes.size()); break;
      case 2: {
        const size_t at = rng.Next() % bytes.size();
        std::fill(bytes.begin() + at, bytes.begin() + std::min(bytes.size(), at + 16), 0);
        break;
      }
      case 3:
        for (auto& b : bytes) b = static_cast<uint8_t>(rng.Next());
        break;
    }
    const Read r = ReadWith(bytes);
    if (r.status.ok()) {
      ++ok;
      EXPECT_LE(r.points.size() / 4, std::max<size_t>(40, bytes.size() / 16));
    } else {
      EXPECT_TRUE(r.status.code() == StatusCode::kCorruptData ||
                  r.status.code() == StatusCode::kUnsupportedFormat)
          << r.status.ToString();
    }
  }
  EXPECT_GT(ok, 0);
}

}  // namespace
}  // namespace headrace
