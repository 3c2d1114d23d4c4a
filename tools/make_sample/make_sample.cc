#include "make_sample/make_sample.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "headrace/core/clock.h"
#include "headrace/core/rng.h"
#include "make_sample/make_sample_internal.h"
#include "make_sample/make_sample_ocr.h"
#include "make_sample/make_sample_speech.h"

namespace headrace {
namespace {

using make_sample_detail::ImageWriter;
using make_sample_detail::MakeConversation;
using make_sample_detail::MakeScene;
using make_sample_detail::ManifestLine;
using make_sample_detail::ManifestRecord;
using make_sample_detail::QA;
using make_sample_detail::Scene;
using make_sample_detail::SceneSizes;
using make_sample_detail::TrainTokenizer;
using make_sample_detail::WriteClip;
using make_sample_detail::WriteFile;
using make_sample_detail::WriteTone;
using make_sample_detail::WriteVlmSample;
using make_sample_detail::Written;
namespace fs = std::filesystem;

// Writes sample i's files (its image; the other media `options` asks for, speech when
// `speech`; the VLM mix's instead with SampleMix::kVlm), counts them in `written`, and
// fills its conversation and manifest line. Stops at the first file that fails.
Status WriteSample(const MakeSampleOptions& options, bool speech, int64_t i, ImageWriter& writer,
                   Written& written, std::vector<QA>& conversation, std::string& line) {
  const fs::path root(options.out_dir);
  const uint64_t key = HashKeys(options.seed, static_cast<uint64_t>(i));
  char id[32];
  std::snprintf(id, sizeof(id), "%06lld", static_cast<long long>(i));
  ManifestRecord record;
  if (options.mix == SampleMix::kVlm) {
    HR_RETURN_IF_ERROR(WriteVlmSample(root, key, id, writer, written, record));
    conversation = record.conversation;
    line = ManifestLine(record);
    return Status::Ok();
  }
  const Scene scene = MakeScene(HashKeys(key, 0), SceneSizes::kVqa, options.width, options.height);
  record.id = id;
  record.image = std::string("images/") + id + ".jpg";
  auto size = writer.Write(scene, HashKeys(key, 1), root / record.image);
  if (!size.ok()) return size.status();
  written.image.fetch_add(*size, std::memory_order_relaxed);
  written.images.fetch_add(1, std::memory_order_relaxed);
  if (options.video) {
    record.video = std::string("videos/") + id + ".mp4";
    auto clip = WriteClip(HashKeys(key, 0), HashKeys(key, 1), root / record.video);
    if (!clip.ok()) return clip.status();
    written.video.fetch_add(*clip, std::memory_order_relaxed);
    written.videos.fetch_add(1, std::memory_order_relaxed);
  }
  if (options.audio) {
    record.audio = std::string("audio/") + id + ".wav";
    auto tone = WriteTone(i, root / record.audio);
    if (!tone.ok()) return tone.status();
    written.audio.fetch_add(*tone, std::memory_order_relaxed);
  }
  if (speech) {
    record.speech = std::string("speech/") + id + ".wav";
    record.speech_text = SpeechText(i);
    auto spoken = WriteSpeech(options.espeak, record.speech_text, root / record.speech);
    if (!spoken.ok()) return spoken.status();
    written.speech.fetch_add(*spoken, std::memory_order_relaxed);
  }
  if (options.ocr) {
    record.ocr_image = std::string("ocr/") + id + ".png";
    record.ocr_lines = OcrLines(i);
    auto page = WriteOcrPage(i, root / record.ocr_image);
    if (!page.ok()) return page.status();
    written.ocr.fetch_add(*page, std::memory_order_relaxed);
  }
  if (options.pointcloud) {
    record.pointcloud = std::string("pointclouds/") + id + ".bin";
    auto cloud = WritePointCloud(key, (root / record.pointcloud).string());
    if (!cloud.ok()) return cloud.status();
    written.pointcloud.fetch_add(*cloud, std::memory_order_relaxed);
    record.pointcloud_pcd = std::string("pointclouds/") + id + ".pcd";
    auto pcd =
        WritePointCloudPcd(key, PointCloudPcdForm(i), (root / record.pointcloud_pcd).string());
    if (!pcd.ok()) return pcd.status();
    written.pointcloud_pcd.fetch_add(*pcd, std::memory_order_relaxed);
  }
  record.conversation = MakeConversation(scene, HashKeys(key, 2));
  conversation = record.conversation;
  line = ManifestLine(record);
  return Status::Ok();
}

}  // namespace

Result<MakeSampleStats> MakeSample(const MakeSampleOptions& options) {
  const Clock::time_point start = Clock::now();
  if (options.out_dir.empty()) return Status::InvalidArgument("make-sample: out_dir is required");
  if (options.samples < 1) {
    return Status::InvalidArgument("make-sample: samples must be at least 1");
  }
  if (options.threads < 0) return Status::InvalidArgument("make-sample: threads must be >= 0");
  if (options.width < 0 || options.height < 0 || (options.width > 0) != (options.height > 0) ||
      options.width > 8192 || options.height > 8192) {
    return Status::InvalidArgument("make-sample: size must be WxH with both in 1..8192");
  }
  if (options.mix == SampleMix::kVlm &&
      (options.video || options.audio || options.ocr || options.pointcloud || options.width > 0)) {
    return Status::InvalidArgument(
        "make-sample: the vlm mix writes its own images and videos: modalities and size do "
        "not apply to it");
  }

  const fs::path root(options.out_dir);
  std::error_code ec;
  const bool speech = options.audio && !options.espeak.empty();
  for (const char* dir : {"images", "videos", "audio", "speech", "ocr", "pointclouds"}) {
    if (std::string_view(dir) == "videos" && !options.video && options.mix != SampleMix::kVlm) {
      continue;
    }
    if (std::string_view(dir) == "audio" && !options.audio) continue;
    if (std::string_view(dir) == "speech" && !speech) continue;
    if (std::string_view(dir) == "ocr" && !options.ocr) continue;
    if (std::string_view(dir) == "pointclouds" && !options.pointcloud) continue;
    fs::create_directories(root / dir, ec);
    if (ec) return Status::IoError("cannot create " + (root / dir).string() + ": " + ec.message());
  }

  const int64_t n = options.samples;
  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, n));

  std::vector<std::string> lines(n);
  std::vector<std::vector<QA>> conversations(n);
  std::atomic<int64_t> next{0};
  Written written;
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  Status first_error;  // guarded by error_mutex

  auto work = [&] {
    ImageWriter writer;
    Status status = writer.Init();
    while (status.ok() && !failed.load(std::memory_order_relaxed)) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      status = WriteSample(options, speech, i, writer, written, conversations[i], lines[i]);
    }
    if (!status.ok()) {
      failed.store(true);
      std::lock_guard<std::mutex> lock(error_mutex);
      if (first_error.ok()) first_error = status;
    }
  };
  {
    std::vector<std::jthread> workers;
    for (int t = 1; t < threads; ++t) workers.emplace_back(work);
    work();
  }
  if (!first_error.ok()) return first_error;

  std::string manifest;
  for (const std::string& line : lines) manifest += line;
  HR_RETURN_IF_ERROR(WriteFile(root / "manifest.jsonl", manifest.data(), manifest.size()));
  HR_RETURN_IF_ERROR(TrainTokenizer(conversations, options));

  MakeSampleStats stats;
  stats.samples = n;
  stats.images = written.images.load();
  stats.image_bytes = written.image.load();
  stats.videos = written.videos.load();
  stats.video_bytes = written.video.load();
  stats.audio_bytes = written.audio.load();
  stats.speech_clips = speech ? n : 0;
  stats.speech_bytes = written.speech.load();
  stats.ocr_bytes = written.ocr.load();
  stats.pointcloud_bytes = written.pointcloud.load();
  stats.pointcloud_pcd_bytes = written.pointcloud_pcd.load();
  stats.seconds = SecondsSince(start);
  return stats;
}

}  // namespace headrace
