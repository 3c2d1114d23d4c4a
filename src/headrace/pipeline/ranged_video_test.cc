// video.decode `read: ranges` against `read: whole`: the same frames from fewer bytes,
// through the real readers (io/ranged_reader.h) over local files and the loopback
// object server, and through the Loader.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "headrace/io/loopback_server.h"
#include "headrace/io/ranged_reader.h"
#include "headrace/io/storage.h"
#include "headrace/ops/av/av_encode.h"
#include "headrace/ops/av/av_input.h"
#include "headrace/ops/op_test_util.h"
#include "headrace/ops/video/decode.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/loader.h"
#include "headrace/pipeline/plan.h"

namespace headrace {
namespace {

std::filesystem::path TestDir() {
  const char* tmp = std::getenv("HEADRACE_TEST_TMP");
  auto dir = std::filesystem::path(tmp ? tmp : "/tmp") /
             ("ranged_video_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// `seconds` of 64x48 at 25 fps, a keyframe a second, B-frames (x264's pyramid) unless
// `b_frames` is 0; noisy, so that a GOP holds real bytes.
std::vector<uint8_t> Clip(int seconds, int b_frames, std::string_view container = "mp4") {
  av::VideoClip c;
  c.width = 64;
  c.height = 48;
  c.frames = 25 * seconds;
  c.fps = 25;
  c.gop = 25;
  c.b_frames = b_frames;
  c.paint = [](int frame, uint8_t* rgb) {
    uint32_t noise = 2654435761u * static_cast<uint32_t>(frame + 1);
    for (int i = 0; i < 64 * 48; ++i) {
      noise = noise * 1664525u + 1013904223u;
      rgb[3 * i] = static_cast<uint8_t>(frame * 3 + (noise >> 27));
      rgb[3 * i + 1] = static_cast<uint8_t>((i % 64) * 4 + frame);
      rgb[3 * i + 2] = static_cast<uint8_t>(noise >> 24);
    }
  };
  auto bytes = av::EncodeVideo(c, container);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

std::string Write(const std::string& name, const std::vector<uint8_t>& bytes) {
  const auto path = (TestDir() / name).string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

struct Decoded {
  Status status;
  std::vector<uint8_t> row;
};

Decoded Decode(const VideoDecodeSpec& spec, EncodedBytes input, uint64_t seed) {
  VideoDecodeOp op(spec, 0, 0, 0);
  Decoded out;
  out.row.assign(static_cast<size_t>(spec.frames) * 3 * spec.width * spec.height, 0xEE);
  std::vector<Value> values = {input};
  uint8_t* rows[1] = {out.row.data()};
  out.status = testing::RunOp(op, values, rows, seed);
  return out;
}

// Exact and keyframe frames, whole clips and short random clips of them, MP4 with and
// without B-frames and MKV: read in ranges they are the bytes' frames, byte for byte.
// For an MP4 the plan from its index covers every read the decode makes (no unplanned
// read), and a short clip of a long video reads a fraction of it.
TEST(RangedVideo, TheFramesOfTheWholeBytesFromTheRangesThePlanRead) {
  struct Case {
    std::string name;
    std::vector<uint8_t> bytes;
    bool mp4;
  };
  const std::vector<Case> cases = {{"b-pyramid.mp4", Clip(12, -1), true},
                                   {"no-b.mp4", Clip(12, 0), true},
                                   {"b-pyramid.mkv", Clip(12, -1, "mkv"), false}};
  auto storage = MakeLocalStorage();
  int compared = 0;
  for (const Case& c : cases) {
    const std::string path = Write(c.name, c.bytes);
    for (VideoSeek seek : {VideoSeek::kExact, VideoSeek::kKeyframe}) {
      for (double clip_seconds : {0.0, 1.5}) {
        for (uint64_t seed : {1u, 2u, 3u}) {
          const VideoDecodeSpec spec{.frames = 8, .width = 24, .height = 16,
                                     .clip_seconds = clip_seconds, .seek = seek,
                                     .read = VideoRead::kRanges};
          const Decoded whole = Decode(spec, EncodedBytes{c.bytes.data(), c.bytes.size()}, seed);
          ASSERT_TRUE(whole.status.ok()) << whole.status.ToString();
          auto reader = OpenRangedReader(*storage, path, {.head_bytes = 4096, .read_ahead = 8192});
          ASSERT_TRUE(reader.ok()) << reader.status().ToString();
          const Decoded ranged = Decode(spec, EncodedBytes{nullptr, 0, reader->get()}, seed);
          ASSERT_TRUE(ranged.status.ok()) << c.name << ": " << ranged.status.ToString();
          EXPECT_EQ(ranged.row, whole.row) << c.name << ", clip " << clip_seconds << ", seed "
                                           << seed << ", seek " << static_cast<int>(seek);
          const MediaReader::Stats stats = (*reader)->stats();
          if (c.mp4) {
            EXPECT_EQ(stats.unplanned, 0) << c.name << ", clip " << clip_seconds << ", seed "
                                          << seed << ", seek " << static_cast<int>(seek);
            if (clip_seconds > 0) {
              EXPECT_LT(stats.bytes, static_cast<int64_t>(c.bytes.size()) / 2)
                  << c.name << ", clip " << clip_seconds << ", seed " << seed;
            }
          }
          EXPECT_LE(stats.bytes, static_cast<int64_t>(c.bytes.size()));
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 36);
}

// PlanReads, which the engine runs ahead of the sample, asks for every stretch Run then
// reads: Run adds no request, and takes the frames it would have.
TEST(RangedVideo, PlanReadsAheadAsksForEveryStretchRunReads) {
  const std::vector<uint8_t> clip = Clip(12, -1);
  const std::string path = Write("planned.mp4", clip);
  auto storage = MakeLocalStorage();
  for (VideoSeek seek : {VideoSeek::kExact, VideoSeek::kKeyframe}) {
    const VideoDecodeSpec spec{.frames = 8, .width = 24, .height = 16, .clip_seconds = 3,
                               .seek = seek, .read = VideoRead::kRanges};
    auto reader = *OpenRangedReader(*storage, path);
    const int64_t opened = reader->stats().requests;
    VideoDecodeOp op(spec, 0, 0, 0);
    std::vector<Value> values = {EncodedBytes{nullptr, 0, reader.get()}};
    SampleContext plan;
    plan.sample_seed = 7;
    plan.values = values;
    op.PlanReads(plan);
    const int64_t planned = reader->stats().requests;
    EXPECT_GT(planned, opened);
    const Decoded ranged = Decode(spec, EncodedBytes{nullptr, 0, reader.get()}, 7);
    ASSERT_TRUE(ranged.status.ok()) << ranged.status.ToString();
    EXPECT_EQ(reader->stats().requests, planned);
    EXPECT_EQ(reader->stats().unplanned, 0);
    EXPECT_EQ(ranged.row, Decode(spec, EncodedBytes{clip.data(), clip.size()}, 7).row);
  }
}

// The index read in ranges is held outside the budgets: one larger than the decode
// allowance fails the sample, naming the key, before FFmpeg parses it.
TEST(RangedVideo, AnIndexPastTheDecodeAllowanceIsANamedError) {
  const std::string path = Write("index.mp4", Clip(12, -1));
  auto storage = MakeLocalStorage();
  auto reader = *OpenRangedReader(*storage, path, {.head_bytes = 4096});
  auto in = av::Input::Open(*reader, av::Input::Media::kVideo, 1, /*frame_bytes_limit=*/2000);
  EXPECT_EQ(in.status().code(), StatusCode::kResourceExhausted) << in.status().ToString();
  EXPECT_NE(in.status().message().find("memory.decode_bytes_per_thread"), std::string::npos);
  EXPECT_NE(in.status().message().find("moov"), std::string::npos);
}

// A clip cut short: the ranges read are the truncated file's, and the sample fails as the
// whole bytes do (corrupt_data), never with made-up frames.
TEST(RangedVideo, ATruncatedClipFailsAsItsWholeBytesDo) {
  std::vector<uint8_t> bytes = Clip(4, -1);
  bytes.resize(bytes.size() / 3);
  const std::string path = Write("truncated.mp4", bytes);
  auto storage = MakeLocalStorage();
  const VideoDecodeSpec spec{.frames = 4, .width = 24, .height = 16, .read = VideoRead::kRanges};
  const Decoded whole = Decode(spec, EncodedBytes{bytes.data(), bytes.size()}, 1);
  auto reader = *OpenRangedReader(*storage, path);
  const Decoded ranged = Decode(spec, EncodedBytes{nullptr, 0, reader.get()}, 1);
  EXPECT_EQ(ranged.status.code(), whole.status.code()) << ranged.status.ToString() << " / "
                                                       << whole.status.ToString();
  EXPECT_FALSE(ranged.status.ok());
}

Buffer BufferOf(const std::vector<uint8_t>& bytes) {
  Buffer b = *Buffer::Allocate(bytes.size());
  std::memcpy(b.mutable_data(), bytes.data(), bytes.size());
  return b;
}

struct Epoch {
  std::vector<std::vector<uint8_t>> batches;
  int64_t storage_bytes = 0;
  int64_t errors = 0;
  MediaReader::Stats ranged;  // EngineMetrics::ranged_reads
};

Epoch RunLoader(const std::string& origin, const std::string& read) {
  auto spec = ParsePipelineConfig(
      "source:\n"
      "  manifest: s3://bkt/videos.jsonl\n"
      "  fields:\n"
      "    - {name: video, kind: video, required: true}\n"
      "storage:\n"
      "  endpoint: " + origin + "\n"
      "  anonymous: true\n"
      "epochs: 1\n"
      "batch:\n"
      "  size: 2\n"
      "ops:\n"
      "  - video.decode: {frames: 4, width: 24, height: 16, clip_seconds: 1, read: " + read +
      "}\n"
      "execution:\n"
      "  cpu_threads: 2\n");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  Epoch out;
  auto loader = Loader::Make(*spec);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  if (!loader.ok()) return out;
  while (true) {
    auto batch = (*loader)->Next();
    EXPECT_TRUE(batch.ok()) << batch.status().ToString();
    if (!batch.ok() || !batch->has_value()) break;
    const Tensor* video = (*batch)->Find("video");
    EXPECT_NE(video, nullptr);
    if (video == nullptr) break;
    const uint8_t* p = video->data<uint8_t>();
    out.batches.emplace_back(p, p + video->nbytes());
    out.errors += static_cast<int64_t>((*batch)->errors.size());
  }
  for (const StorageStats& s : (*loader)->storage_stats()) out.storage_bytes += s.bytes;
  out.ranged = (*loader)->engine_metrics().ranged_reads;
  return out;
}

// Through the Loader from an object store: the batches of `read: ranges` are those of
// `read: whole`, from a fraction of the bytes.
TEST(RangedVideo, TheLoaderReadsRangesFromObjectStorageForTheSameBatches) {
  auto server = *LoopbackServer::Start();
  std::string manifest;
  int64_t total = 0;
  for (int i = 0; i < 4; ++i) {
    const std::vector<uint8_t> clip = Clip(40, i % 2 == 0 ? -1 : 0);
    total += static_cast<int64_t>(clip.size());
    server->Put("/bkt/v" + std::to_string(i) + ".mp4", BufferOf(clip));
    manifest += R"({"id": ")" + std::to_string(i) + R"(", "video": "v)" + std::to_string(i) +
                R"(.mp4"})" + "\n";
  }
  server->Put("/bkt/videos.jsonl", BufferOf({manifest.begin(), manifest.end()}));
  const Epoch whole = RunLoader(server->origin(), "whole");
  const Epoch ranged = RunLoader(server->origin(), "ranges");
  ASSERT_EQ(whole.batches.size(), 2u);
  EXPECT_EQ(ranged.batches, whole.batches);
  EXPECT_EQ(ranged.errors, 0);
  EXPECT_GE(whole.storage_bytes, total);
  EXPECT_LT(ranged.storage_bytes, total / 3) << "of " << total;
  EXPECT_EQ(whole.ranged.requests, 0);
  EXPECT_GT(ranged.ranged.requests, 0);
  EXPECT_EQ(ranged.ranged.unplanned, 0);
  // What the readers read is what the store served, besides the sizes (a byte each) and
  // the manifest.
  EXPECT_LE(ranged.ranged.bytes, ranged.storage_bytes);
}

}  // namespace
}  // namespace headrace

namespace headrace {
namespace {

std::vector<bool> RangedFieldsOf(const std::string& ops, const std::string& fields) {
  auto spec = ParsePipelineConfig("source:\n  manifest: m.jsonl\n  fields: " + fields +
                                  "\nops:\n" + ops);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return {};
  auto storage = MakeLocalStorage();
  auto plan = PlanPipeline(*spec, *storage);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? plan->ranged_fields : std::vector<bool>();
}

// The engine hands a reader only to a field whose one reader asked for ranges.
TEST(RangedVideo, AFieldIsReadInRangesOnlyWhenItsOneReaderAsks) {
  const std::string video = "[{name: video, kind: video}]";
  EXPECT_EQ(RangedFieldsOf("  - video.decode: {read: ranges}\n", video), std::vector<bool>{true});
  EXPECT_EQ(RangedFieldsOf("  - video.decode: {}\n", video), std::vector<bool>{false});
  // Another op reads the same bytes: they are read whole for both.
  EXPECT_EQ(RangedFieldsOf("  - video.decode: {read: ranges}\n"
                           "  - video.decode: {output: again}\n",
                           video),
            std::vector<bool>{false});
  // A list's items are read whole (each item's op runs on its bytes).
  EXPECT_EQ(RangedFieldsOf("  - video.decode: {read: ranges}\n",
                           "[{name: video, kind: video, max_items: 2}]"),
            std::vector<bool>{false});
}

}  // namespace
}  // namespace headrace
