// make-sample's parts, internal to make_sample/ (the API is make_sample.h): what a
// picture holds (make_sample_scene.cc), drawing it (make_sample_draw.cc), the questions
// about it (make_sample_questions.cc), the files written (make_sample_writers.cc), the
// VLM mix's samples (make_sample_vlm.cc) and the tokenizer trained on the conversations
// (make_sample_tokenizer.cc); MakeSample (make_sample.cc) runs them per sample on its
// threads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/core/rng.h"
#include "headrace/core/status.h"
#include "make_sample/make_sample.h"

namespace headrace::make_sample_detail {

namespace fs = std::filesystem;

// --- what a picture holds (make_sample_scene.cc) ----------------------------------------

struct Rgb {
  float r = 0, g = 0, b = 0;
};

inline Rgb Lerp(Rgb a, Rgb b, float t) {
  return {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t};
}

struct NamedColour {
  std::string_view name;
  Rgb rgb;
};

inline constexpr std::array<NamedColour, 11> kColours = {{
    {"red", {200, 38, 34}},
    {"blue", {34, 78, 196}},
    {"green", {42, 150, 62}},
    {"yellow", {238, 206, 42}},
    {"orange", {240, 128, 30}},
    {"purple", {124, 58, 160}},
    {"pink", {236, 122, 172}},
    {"white", {238, 238, 232}},
    {"black", {28, 28, 32}},
    {"brown", {120, 74, 40}},
    {"grey", {128, 128, 132}},
}};

// What an object looks like; each shape has its own nouns.
enum class Shape {
  kCircle,    // a disc with spherical shading
  kBox,       // an axis-aligned rounded rectangle
  kTriangle,  // an isosceles triangle pointing up
  kBus,       // a long rounded body with a row of windows and two wheels
};

// Where the picture was "taken".
enum class Backdrop {
  kField,   // sky over grass
  kBeach,   // sky over sand
  kStreet,  // sky over asphalt
  kRoom,    // a painted wall over a wooden floor
  kStudio,  // one smooth grey gradient
};

// The sky above an outdoor backdrop.
enum class Sky {
  kClear,   // blue, lighter towards the horizon
  kCloudy,  // grey with white clouds
  kSunset,  // dark blue over orange
};

struct Object {
  Shape shape = Shape::kCircle;
  int colour = 0;  // index into kColours
  std::string_view noun;
  Rgb rgb;               // the colour as drawn (jittered around the named one)
  float cx = 0, cy = 0;  // centre, pixels
  float hw = 0, hh = 0;  // half extents of the body, pixels
  int windows = 0;       // kBus only
  float area() const { return shape == Shape::kTriangle ? 2 * hw * hh : 4 * hw * hh; }
};

struct Scene {
  int width = 0;
  int height = 0;
  Backdrop backdrop = Backdrop::kField;
  Sky sky = Sky::kClear;
  int wall = 0;       // kRoom: index into kWalls
  float horizon = 0;  // y where the upper part (sky, wall) meets the lower part
  Rgb upper_top, upper_bottom, lower_top, lower_bottom;
  float upper_texture = 0, lower_texture = 0;  // grain amplitude of each part
  std::vector<Object> objects;                 // objects[0] is the one drawn first
};

struct Wall {
  std::string_view name;
  Rgb rgb;
};
inline constexpr std::array<Wall, 4> kWalls = {{{"beige", {214, 198, 168}},
                                         {"light grey", {200, 200, 198}},
                                         {"pale green", {190, 210, 178}},
                                         {"pale blue", {188, 204, 222}}}};

// How a scene's size is drawn (the first draws of its key).
enum class SceneSizes {
  kVqa,  // long side 320..1600, aspect 1:1, 4:3, 3:2 or 16:9, landscape or portrait
  kVlm,  // each side 200..2000 (kVlmMinSide..kVlmMaxSide): aspect 1:1, 4:3, 3:2, 16:9, 2:1
         // or 3:1, then the long side uniform over what keeps the short one >= 200
};

// The scene of sample key `key`: its size drawn by `sizes`, then backdrop, sky, exposure
// and 1 to 5 objects placed without overlap. `fixed_width` x `fixed_height` (both > 0)
// replaces the drawn size; the draws still happen, so the scenes stay the same.
Scene MakeScene(uint64_t key, SceneSizes sizes, int fixed_width = 0, int fixed_height = 0);

// --- drawing (make_sample_draw.cc) ------------------------------------------------------

// Per-thread memory reused from one image to the next.
struct Canvas {
  std::vector<uint8_t> pixels;  // RGB, width * 3 per row
  std::vector<float> lattice;   // (gw x gh x 3) colour offsets at lattice nodes
  std::vector<float> row;       // width * 3 float colour of the row being drawn
  std::vector<float> grain;     // width: grain amplitude per pixel
  std::vector<float> lattice_row;
  std::vector<float> tile_a, tile_b;
};

// Draws the scene into c.pixels (RGB, tightly packed).
void Draw(const Scene& s, uint64_t key, Canvas& c);

// --- conversations (make_sample_questions.cc) -------------------------------------------

struct QA {
  std::string question;
  std::string answer;
};

// 1 to 3 questions about the scene with their answers; the first starts with "<image>\n".
std::vector<QA> MakeConversation(const Scene& s, uint64_t key);

// One question about `s` of a kind drawn from `rng` among those that apply, and its
// answer (never empty: the colour and count questions apply to every scene).
QA AskAny(const Scene& s, Rng& rng);

// A one-sentence caption of `s` ("A large red ball in the centre, on a grassy field under
// a clear blue sky, next to a small blue box."), as the "describe" question answers.
std::string Caption(const Scene& s);

// --- files (make_sample_writers.cc) -----------------------------------------------------

// What a sample's manifest line holds: the paths written for it and its conversation.
struct ManifestRecord {
  std::string id;
  std::string image;  // "image": the VQA mix's one picture
  // "images": the VLM mix's pictures, in the order of the conversation's "<image>"s;
  // written (possibly []) when `image_list`.
  std::vector<std::string> images;
  bool image_list = false;
  std::string video;
  std::string audio;
  std::string speech, speech_text;
  std::string ocr_image;
  std::vector<std::string> ocr_lines;  // "ocr_text": joined by '\n'
  std::string pointcloud, pointcloud_pcd;
  std::vector<QA> conversation;  // "conversations": human/gpt turns, a pair per QA
};

// The record's manifest line (with its '\n'): keys in the order of ManifestRecord,
// empty paths left out.
std::string ManifestLine(const ManifestRecord& record);

Status WriteFile(const fs::path& path, const void* data, size_t size);

struct TjDeleter {
  void operator()(void* handle) const;
};
struct TjFree {
  void operator()(unsigned char* buffer) const;
};

// One worker's reusable state: the canvas and the JPEG encoder with its output buffer.
class ImageWriter {
 public:
  Status Init();

  // Draws `scene` and writes it as a q90 4:2:0 JPEG; returns the file size.
  Result<int64_t> Write(const Scene& scene, uint64_t key, const fs::path& path);

 private:
  std::unique_ptr<void, TjDeleter> handle_;
  std::unique_ptr<unsigned char, TjFree> jpeg_;
  unsigned long capacity_ = 0;
  Canvas canvas_;
};

// The sample's clip: its scene drawn small once, then panned 3 px a frame (wrapping), so
// that consecutive frames differ and a decoder's frame choice shows.
Result<int64_t> WriteClip(uint64_t scene_key, uint64_t key, const fs::path& path);

// Sample i's audio: 1.5 s of a tone at AudioToneHz(i), 16 kHz mono, faded in and out
// over 50 ms.
Result<int64_t> WriteTone(int64_t i, const fs::path& path);

// --- the VLM mix (make_sample_vlm.cc) ----------------------------------------------------

// Bytes and files written, by kind, summed over MakeSample's threads.
struct Written {
  std::atomic<int64_t> image{0};
  std::atomic<int64_t> images{0};  // JPEG files
  std::atomic<int64_t> video{0};
  std::atomic<int64_t> videos{0};  // MP4 files
  std::atomic<int64_t> audio{0};
  std::atomic<int64_t> speech{0};
  std::atomic<int64_t> ocr{0};
  std::atomic<int64_t> pointcloud{0};
  std::atomic<int64_t> pointcloud_pcd{0};
};

// Writes the files of the VLM mix's sample `key` named `id` under `root` (VlmShape(key)'s
// images and video), counts them in `written` and fills `record` (its conversation
// included). Stops at the first file that fails.
Status WriteVlmSample(const fs::path& root, uint64_t key, const std::string& id,
                      ImageWriter& writer, Written& written, ManifestRecord& record);

// --- the tokenizer (make_sample_tokenizer.cc) -------------------------------------------

// Trains the tokenizer on the conversations' text (TrainChatTokenizer) and writes
// tokenizer.model and tokenizer.vocab into options.out_dir.
Status TrainTokenizer(const std::vector<std::vector<QA>>& conversations,
                      const MakeSampleOptions& options);

}  // namespace headrace::make_sample_detail
