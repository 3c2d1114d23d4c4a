// The files of a sample: its manifest line, the JPEG, the H.264 clip and the WAV tone
// (the speech, OCR and point-cloud files are make_sample_speech.cc, _ocr.cc and
// _pointcloud.cc).
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "headrace/ops/av/av_encode.h"
#include "make_sample/make_sample_internal.h"

namespace headrace::make_sample_detail {
namespace {

void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

}  // namespace

std::string ManifestLine(const ManifestRecord& r) {
  std::string line = "{\"id\":";
  AppendJsonString(line, r.id);
  const auto key = [&line](std::string_view name, const std::string& value) {
    if (value.empty()) return;
    line += ",\"";
    line += name;
    line += "\":";
    AppendJsonString(line, value);
  };
  key("image", r.image);
  if (r.image_list) {
    line += ",\"images\":[";
    for (size_t i = 0; i < r.images.size(); ++i) {
      if (i > 0) line += ',';
      AppendJsonString(line, r.images[i]);
    }
    line += ']';
  }
  key("video", r.video);
  key("audio", r.audio);
  if (!r.speech.empty()) {
    key("speech", r.speech);
    line += ",\"speech_text\":";
    AppendJsonString(line, r.speech_text);
  }
  if (!r.ocr_image.empty()) {
    key("ocr_image", r.ocr_image);
    std::string text;
    for (const std::string& l : r.ocr_lines) text += (text.empty() ? "" : "\n") + l;
    line += ",\"ocr_text\":";
    AppendJsonString(line, text);
  }
  key("pointcloud", r.pointcloud);
  key("pointcloud_pcd", r.pointcloud_pcd);
  // `placeholder` replaces the first question's leading "<image>".
  const auto turns = [&](std::string_view name, std::string_view placeholder) {
    line += ",\"" + std::string(name) + "\":[";
    for (size_t i = 0; i < r.conversation.size(); ++i) {
      if (i > 0) line += ',';
      line += "{\"from\":\"human\",\"value\":";
      std::string question = r.conversation[i].question;
      if (i == 0 && question.starts_with("<image>")) {
        question.replace(0, std::string_view("<image>").size(), placeholder);
      }
      AppendJsonString(line, question);
      line += "},{\"from\":\"gpt\",\"value\":";
      AppendJsonString(line, r.conversation[i].answer);
      line += '}';
    }
    line += ']';
  };
  turns("conversations", "<image>");
  // The same turns about the clip (Qwen-VL video SFT: examples/qwen2_vl_video.yaml); the
  // VLM mix's records, with a list of images, keep their own turns only.
  if (!r.video.empty() && !r.image_list) turns("video_conversations", "<video>");
  line += "}\n";
  return line;
}

Status WriteFile(const fs::path& path, const void* data, size_t size) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (file == nullptr) return Status::IoError("cannot create " + path.string());
  if (std::fwrite(data, 1, size, file.get()) != size) {
    return Status::IoError("cannot write " + path.string());
  }
  if (std::fclose(file.release()) != 0) return Status::IoError("cannot write " + path.string());
  return Status::Ok();
}

void TjDeleter::operator()(void* handle) const { tjDestroy(handle); }
void TjFree::operator()(unsigned char* buffer) const { tjFree(buffer); }

Status ImageWriter::Init() {
  handle_.reset(tjInitCompress());
  if (handle_ == nullptr) return Status::Internal("tjInitCompress failed");
  return Status::Ok();
}

Result<int64_t> ImageWriter::Write(const Scene& scene, uint64_t key, const fs::path& path) {
  Draw(scene, key, canvas_);
  const unsigned long needed = tjBufSize(scene.width, scene.height, TJSAMP_420);
  if (needed > capacity_) {
    jpeg_.reset(tjAlloc(static_cast<int>(needed)));
    if (jpeg_ == nullptr) return Status::ResourceExhausted("tjAlloc failed");
    capacity_ = needed;
  }
  unsigned char* buffer = jpeg_.get();
  unsigned long size = capacity_;
  if (tjCompress2(handle_.get(), canvas_.pixels.data(), scene.width, 0, scene.height, TJPF_RGB,
                  &buffer, &size, TJSAMP_420, 90, TJFLAG_NOREALLOC) != 0) {
    return Status::Internal(std::string("tjCompress2: ") + tjGetErrorStr2(handle_.get()));
  }
  HR_RETURN_IF_ERROR(WriteFile(path, buffer, size));
  return static_cast<int64_t>(size);
}

Result<int64_t> WriteClip(uint64_t scene_key, uint64_t key, const fs::path& path) {
  constexpr int kWidth = 160, kHeight = 120;
  // The sample's scene, small (its drawn size ignored: the same scene at any size).
  const Scene scene = MakeScene(scene_key, SceneSizes::kVqa, kWidth, kHeight);
  thread_local Canvas canvas;
  Draw(scene, key, canvas);
  av::VideoClip clip;
  clip.width = kWidth;
  clip.height = kHeight;
  clip.frames = 20;
  clip.fps = 10;
  clip.gop = 10;
  clip.paint = [&](int frame, uint8_t* rgb) {
    const int shift = 3 * frame;
    for (int y = 0; y < kHeight; ++y) {
      const uint8_t* src = canvas.pixels.data() + static_cast<size_t>(y) * kWidth * 3;
      uint8_t* dst = rgb + static_cast<size_t>(y) * kWidth * 3;
      for (int x = 0; x < kWidth; ++x) {
        std::memcpy(dst + 3 * x, src + 3 * ((x + shift) % kWidth), 3);
      }
    }
  };
  HR_RETURN_IF_ERROR(av::WriteVideo(path.string(), clip));
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return Status::IoError("cannot stat " + path.string() + ": " + ec.message());
  return static_cast<int64_t>(size);
}

Result<int64_t> WriteTone(int64_t i, const fs::path& path) {
  constexpr int kRate = 16000;
  constexpr double kSeconds = 1.5, kFade = 0.05;
  av::AudioClip clip;
  clip.sample_rate = kRate;
  clip.channels = 1;
  clip.seconds = kSeconds;
  const double hz = AudioToneHz(i);
  clip.sample = [hz](int64_t k, int) {
    const double t = static_cast<double>(k) / kRate;
    const double fade = std::min({1.0, t / kFade, (kSeconds - t) / kFade});
    return static_cast<float>(0.6 * fade * std::sin(2 * M_PI * hz * t));
  };
  HR_RETURN_IF_ERROR(av::WriteAudio(path.string(), clip));
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return Status::IoError("cannot stat " + path.string() + ": " + ec.message());
  return static_cast<int64_t>(size);
}

}  // namespace headrace::make_sample_detail
