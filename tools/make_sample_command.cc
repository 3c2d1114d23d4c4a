#include <cstdio>

#include "commands.h"
#include "make_sample/make_sample.h"
#include "make_sample/make_sample_speech.h"
#include "shard.h"

namespace headrace::tools {

int MakeSampleCommand(const Args& args) {
  MakeSampleOptions options;
  ArgReader r{args};
  std::string value;
  bool shards = false;
  int64_t shard_bytes = 0;  // 0: WriteShards' default
  while (!r.done()) {
    const std::string flag = r.peek();
    if (flag == "--shards") {  // no value
      shards = true;
      ++r.i;
      continue;
    }
    if (flag != "--out" && flag != "--samples" && flag != "--seed" && flag != "--threads" &&
        flag != "--size" && flag != "--shard-size" && flag != "--modalities" &&
        flag != "--mix") {
      std::fprintf(stderr,
                   "headrace make-sample: unknown flag '%s' (allowed: --out, "
                   "--samples, --seed, --threads, --size WxH, --shards, --shard-size BYTES, "
                   "--modalities LIST, --mix vqa|vlm)\n",
                   flag.c_str());
      return 2;
    }
    if (!r.Value(flag, &value)) return 2;
    if (flag == "--mix") {  // make_sample.h: SampleMix
      if (value != "vqa" && value != "vlm") {
        std::fprintf(stderr,
                     "headrace make-sample: --mix: unknown mix '%s' (allowed: vqa, vlm)\n",
                     value.c_str());
        return 2;
      }
      options.mix = value == "vlm" ? SampleMix::kVlm : SampleMix::kVqa;
      continue;
    }
    if (flag == "--modalities") {
      // Images always; the rest by name.
      for (size_t start = 0; start <= value.size();) {
        size_t comma = value.find(',', start);
        if (comma == std::string::npos) comma = value.size();
        const std::string m = value.substr(start, comma - start);
        if (m == "video" || m == "all") options.video = true;
        if (m == "audio" || m == "all") options.audio = true;
        if (m == "ocr" || m == "all") options.ocr = true;
        if (m == "pointcloud" || m == "all") options.pointcloud = true;
        if (m != "image" && m != "video" && m != "audio" && m != "ocr" && m != "pointcloud" &&
            m != "all") {
          std::fprintf(stderr,
                       "headrace make-sample: --modalities: unknown modality '%s' (allowed: "
                       "image, video, audio, ocr, pointcloud, all)\n",
                       m.c_str());
          return 2;
        }
        start = comma + 1;
      }
      continue;
    }
    try {
      if (flag == "--out") options.out_dir = value;
      if (flag == "--samples") options.samples = std::stoll(value);
      if (flag == "--seed") options.seed = std::stoull(value);
      if (flag == "--threads") options.threads = std::stoi(value);
      if (flag == "--shard-size") {
        shard_bytes = std::stoll(value);
        if (shard_bytes < 1) throw std::invalid_argument("shard-size");
      }
      if (flag == "--size") {
        const size_t x = value.find('x');
        if (x == std::string::npos) throw std::invalid_argument("size");
        options.width = std::stoi(value.substr(0, x));
        options.height = std::stoi(value.substr(x + 1));
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "headrace make-sample: %s needs a number, got '%s'\n", flag.c_str(),
                   value.c_str());
      return 2;
    }
  }
  if (options.out_dir.empty() || options.samples < 1) {
    std::fprintf(stderr,
                 "headrace make-sample: --out DIR is required and --samples must be >= 1\n");
    return 2;
  }
  if (options.mix == SampleMix::kVlm &&
      (options.video || options.audio || options.ocr || options.pointcloud || options.width > 0)) {
    std::fprintf(stderr,
                 "headrace make-sample: --mix vlm writes its own images and videos: "
                 "--modalities and --size do not apply to it\n");
    return 2;
  }
  if (options.audio) {
    // Speech clips beside the tones when espeak-ng is installed (scripts/setup.sh
    // installs it); without it the dataset is complete but has no speech/.
    options.espeak = FindOnPath("espeak-ng");
    if (options.espeak.empty()) {
      std::fprintf(stderr,
                   "headrace make-sample: espeak-ng is not on PATH: audio is tones only, no "
                   "speech clips (apt-get install espeak-ng to add them)\n");
    }
  }
  auto stats = MakeSample(options);
  if (!stats.ok()) {
    std::fprintf(stderr, "headrace make-sample: %s\n", stats.status().ToString().c_str());
    return 1;
  }
  std::string more;
  if (options.mix == SampleMix::kVlm) {
    more += ", " + std::to_string(stats->images) + " images, " + std::to_string(stats->videos) +
            " videos (" + std::to_string(stats->video_bytes / 1000) + " KB of H.264)";
  }
  if (options.video) more += ", " + std::to_string(stats->video_bytes / 1000) + " KB of H.264";
  if (options.audio) more += ", " + std::to_string(stats->audio_bytes / 1000) + " KB of WAV";
  if (stats->speech_clips > 0) {
    more += ", " + std::to_string(stats->speech_clips) + " speech clips (" +
            std::to_string(stats->speech_bytes / 1000) + " KB)";
  }
  if (options.ocr) more += ", " + std::to_string(stats->ocr_bytes / 1000) + " KB of OCR PNG";
  if (options.pointcloud) {
    more += ", " + std::to_string(stats->pointcloud_bytes / 1000) + " KB of point clouds (.bin; " +
            std::to_string(stats->pointcloud_pcd_bytes / 1000) + " KB as .pcd)";
  }
  std::printf("wrote %lld samples (%.1f MB of JPEG%s) to %s in %.1f s\n",
              static_cast<long long>(stats->samples), stats->image_bytes / 1e6, more.c_str(),
              options.out_dir.c_str(), stats->seconds);
  if (shards) {
    // The same dataset as WebDataset tar shards with their indexes, in manifest order
    // (tools/shard.h): OUT/shards/shard-000000.tar, ...
    ShardOptions shard_options;
    shard_options.manifest = options.out_dir + "/manifest.jsonl";
    shard_options.out_dir = options.out_dir + "/shards";
    if (shard_bytes > 0) shard_options.target_bytes = shard_bytes;
    // Several media per sample: each its own member (<key>.jpg, <key>.mp4, <key>.wav,
    // <key>.png for the OCR page, <key>.bin for the point cloud). Not the speech clip
    // (a second <key>.wav) nor the PCD copy of the point cloud.
    if (options.mix == SampleMix::kVlm) {  // <key>.<n>.jpg per picture, <key>.mp4
      shard_options.media = {"images:" + std::to_string(kVlmMaxImages), "video"};
    }
    if (options.video || options.audio || options.ocr || options.pointcloud) {
      shard_options.media.push_back("image");
    }
    if (options.video) shard_options.media.push_back("video");
    if (options.audio) shard_options.media.push_back("audio");
    if (options.ocr) shard_options.media.push_back("ocr_image");
    if (options.pointcloud) shard_options.media.push_back("pointcloud");
    auto written = WriteShards(shard_options);
    if (!written.ok()) {
      std::fprintf(stderr, "headrace make-sample: --shards: %s\n",
                   written.status().ToString().c_str());
      return 1;
    }
    std::printf("wrote %lld samples in %lld shards (%.1f MB) to %s\n",
                static_cast<long long>(written->samples), static_cast<long long>(written->shards),
                written->bytes / 1e6, shard_options.out_dir.c_str());
  }
  return 0;
}

}  // namespace headrace::tools
