#include "headrace/ops/pointcloud/read.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include <lzf.h>

#include "headrace/core/rng.h"
#include "headrace/ops/pointcloud/pointcloud_test_util.h"

namespace headrace {
namespace {

using testing::KittiBytes;
using testing::PcdBinary;
using testing::PcdCompressed;
using testing::PcdHeader;
using testing::Text;

struct Read {
  Status status;
  std::vector<float> points;  // x, y, z, intensity per point
};

// Runs pointcloud.read on `bytes` as the engine does (scratch, a value slot).
Read ReadWith(const std::vector<uint8_t>& bytes, PointReadSpec spec = {}, int64_t decode_bytes = 0) {
  std::vector<Value> values = {EncodedBytes{bytes.data(), bytes.size()}};
  ScratchArena scratch;
  SampleContext ctx;
  ctx.scratch = &scratch;
  ctx.values = values;
  PointReadOp op(spec, 0, decode_bytes);
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

  // The same records as binary_compressed: column by column (a field of COUNT 3 takes
  // its 3 bytes per point together), LZF-compressed.
  const std::string header = PcdHeader("x rgb y z _ intensity", "8 4 8 8 1 1", "F U F F I U",
                                       "1 1 1 1 3 1", 2, "binary_compressed");
  const uint8_t* records = bytes.data() + bytes.size() - 2 * 32;
  std::vector<uint8_t> columns;
  for (const auto& [offset, width] : {std::pair{0, 8}, {8, 4}, {12, 8}, {20, 8}, {28, 3}, {31, 1}}) {
    for (int i = 0; i < 2; ++i) {
      columns.insert(columns.end(), records + i * 32 + offset, records + i * 32 + offset + width);
    }
  }
  std::vector<uint8_t> packed(256);
  const uint32_t sizes[2] = {lzf_compress(columns.data(), 64, packed.data(), 256), 64};
  ASSERT_GT(sizes[0], 0u);
  std::vector<uint8_t> compressed = Text(header);
  compressed.insert(compressed.end(), reinterpret_cast<const uint8_t*>(sizes),
                    reinterpret_cast<const uint8_t*>(sizes) + 8);
  compressed.insert(compressed.end(), packed.begin(), packed.begin() + sizes[0]);
  EXPECT_EQ(ReadWith(compressed).points, r.points);
  // The decode allowance bounds the body (64 bytes) and its 2 points (32): 96 bytes.
  EXPECT_EQ(ReadWith(compressed, {}, 96).points, r.points);
  const Read over = ReadWith(compressed, {}, 95);
  EXPECT_EQ(over.status.code(), StatusCode::kResourceExhausted) << over.status.ToString();
  EXPECT_THAT(over.status.message(), ::testing::HasSubstr("memory.decode_bytes_per_thread"));
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
}

// A larger cloud with repetition, so that LZF finds back references, and a NaN point.
std::vector<float> CompressibleCloud() {
  std::vector<float> cloud;
  for (int i = 0; i < 500; ++i) {
    cloud.insert(cloud.end(), {0.5f * static_cast<float>(i % 50), -1.0f, 0.01f * static_cast<float>(i),
                               static_cast<float>(i % 4)});
  }
  cloud[4 * 7] = std::nanf("");  // dropped, as in binary and ascii
  return cloud;
}

TEST(PointRead, PcdBinaryCompressedReadsAsBinaryAndAscii) {
  const std::vector<float> cloud = CompressibleCloud();
  std::string ascii = PcdHeader("x y z intensity", "4 4 4 4", "F F F F", "1 1 1 1",
                                static_cast<int64_t>(cloud.size() / 4), "ascii");
  char line[128];
  for (size_t i = 0; i < cloud.size(); i += 4) {
    std::snprintf(line, sizeof line, "%.9g %.9g %.9g %.9g\n", cloud[i], cloud[i + 1],
                  cloud[i + 2], cloud[i + 3]);
    ascii += line;
  }
  const std::vector<uint8_t> compressed = PcdCompressed(cloud);
  EXPECT_LT(compressed.size(), PcdBinary(cloud).size() / 2);  // LZF found repetition
  const Read r = ReadWith(compressed);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.points.size(), cloud.size() - 4);
  EXPECT_EQ(r.points, ReadWith(PcdBinary(cloud)).points);
  EXPECT_EQ(r.points, ReadWith(Text(ascii)).points);
  EXPECT_EQ(ReadWith(PcdCompressed(kCloud)).points, kCloud);  // incompressible: literals
  EXPECT_TRUE(ReadWith(PcdCompressed({})).points.empty());    // POINTS 0
}

TEST(PointRead, PcdBinaryCompressedThatLiesIsCorruptData) {
  const std::vector<float> cloud = CompressibleCloud();
  const std::vector<uint8_t> good = PcdCompressed(cloud);
  // Where the size prefix starts: after the header.
  const size_t prefix = PcdHeader("x y z intensity", "4 4 4 4", "F F F F", "1 1 1 1", 500,
                                  "binary_compressed").size();
  auto with_size = [&](int which, uint32_t value) {
    std::vector<uint8_t> bytes = good;
    std::memcpy(bytes.data() + prefix + 4 * which, &value, sizeof value);
    return bytes;
  };
  uint32_t compressed_size = 0;
  std::memcpy(&compressed_size, good.data() + prefix, sizeof compressed_size);
  auto expect = [](const std::vector<uint8_t>& bytes, const std::string& what) {
    const Status s = ReadWith(bytes).status;
    EXPECT_EQ(s.code(), StatusCode::kCorruptData) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  // The compressed size past the end of the file, the data cut short.
  expect(with_size(0, compressed_size + 1), "compressed bytes, but");
  expect(std::vector<uint8_t>(good.begin(), good.end() - 10), "compressed bytes, but");
  expect(std::vector<uint8_t>(good.begin(), good.begin() + prefix + 5), "8-byte size prefix");
  // The uncompressed size against POINTS x record (fewer points than declared), and
  // against what LZF can expand to.
  expect(with_size(1, 499 * 16), "binary_compressed says 7984 uncompressed bytes");
  std::string huge = PcdHeader("x y z intensity", "4 4 4 4", "F F F F", "1 1 1 1",
                               100000000, "binary_compressed");
  std::vector<uint8_t> liar = Text(huge);
  const uint32_t sizes[2] = {16, 1600000000u};
  liar.insert(liar.end(), reinterpret_cast<const uint8_t*>(sizes),
              reinterpret_cast<const uint8_t*>(sizes) + 8);
  liar.resize(liar.size() + 16, 0);
  expect(liar, "more than LZF can expand to");
  // A stream that decompresses to fewer bytes than declared (a cut stream with a
  // matching size), and one that is not LZF.
  std::vector<uint8_t> cut = with_size(0, compressed_size - 40);
  cut.resize(cut.size() - 40);
  expect(cut, "does not decompress");
  std::vector<uint8_t> garbage = good;
  std::fill(garbage.begin() + prefix + 8, garbage.end(), 0xff);
  expect(garbage, "does not decompress");
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
                                                   Text(ascii), PcdCompressed(cloud)};
  Rng rng(HashKeys(11, 11));
  int ok = 0;
  for (int round = 0; round < 800; ++round) {
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
