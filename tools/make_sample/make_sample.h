// `headrace make-sample`: writes a small synthetic VLM dataset to try the engine on.
//
// Layout of `out_dir` after a successful run:
//   images/000000.jpg ...  photo-like JPEGs (q90, 4:2:0), long side 320..1600 px, aspect
//                          1:1, 4:3, 3:2 or 16:9, landscape or portrait
//   manifest.jsonl         one LLaVA / chat-VQA record per line, in index order:
//                            {"id":"000123","image":"images/000123.jpg","conversations":
//                             [{"from":"human","value":"<image>\nWhat colour is the bus?"},
//                              {"from":"gpt","value":"Blue."}, ...]}
//                          1 to 3 question/answer pairs about what was drawn (colour,
//                          shape, count, position, background, a caption)
//   videos/000000.mp4 ...  with `video`: H.264 clips of the same scenes (see below); the
//                          records then also hold "video_conversations", the same turns
//                          with the first question's <image> replaced by <video>
//   audio/000000.wav ...   with `audio`: tones (see below)
//   speech/000000.wav ...  with `audio` and `espeak`: spoken words (make_sample_speech.h)
//   ocr/000000.png ...     with `ocr`: pages of rendered words (make_sample_ocr.h)
//   pointclouds/000000.bin with `pointcloud`: LiDAR-like scenes, KITTI layout (see below),
//   pointclouds/000000.pcd   and the same scenes as PCD (ascii, binary, binary_compressed)
//   tokenizer.model/.vocab a SentencePiece BPE model trained on the conversations' text:
//                            ids 0 <unk>, 1 <s> (BOS), 2 </s> (EOS), 3 <pad>,
//                            4..7 the user-defined symbols <image> <|system|> <|user|>
//                            <|assistant|>, then the learned pieces (vocab_size is an
//                            upper bound: a small dataset yields fewer).
//                          It keeps whitespace (add_dummy_prefix=false,
//                          remove_extra_whitespaces=false), so that text.tokenize can
//                          tokenize template pieces one by one and a "\n" turn end stays a
//                          token.
//
// With `mix` SampleMix::kVlm (`--mix vlm`), records shaped like VLM SFT data instead, so
// that sequence lengths vary as in training (VlmShape below gives each sample's shape):
//   images/000000_0.jpg ...  0 to 4 photo-like JPEGs per sample (as above), each side
//                            200..2000 px, aspect 1:1, 4:3, 3:2, 16:9, 2:1 or 3:1,
//                            landscape or portrait
//   videos/000000.mp4 ...    for about one sample in seven: the H.264 clip of `video`
//                            (below) of a scene of its own
//   manifest.jsonl           {"id":"000123","images":["images/000123_0.jpg",
//                             "images/000123_1.jpg"],"video":"videos/000123.mp4",
//                             "conversations":[{"from":"human","value":"<video>\n<image>\n
//                             Picture 1: How many objects are there?"},{"from":"gpt",
//                             "value":"Two."},{"from":"human","value":"In the video: Where
//                             is the bus?"}, ..., {"from":"human","value":"<image>\n
//                             Picture 2: What colour is the ball?"}, ...]}
//                          1 to 20 question/answer pairs (about a third have one). The
//                          k-th "<image>" of the conversation, in order, is images[k]:
//                          each placeholder opens the question where its picture first
//                          appears (several at once when there are more pictures than
//                          pairs left), so there are exactly as many as images; "<video>"
//                          opens the first question of a sample with a video. With more
//                          than one picture or video, a question names the one it asks
//                          about ("Picture 2: ", "In the video: "). A sample with neither
//                          (images []) asks about a scene its first question describes in
//                          words ("Picture this: <caption>\n"). No "image" key.
//   tokenizer.model/.vocab   as below, trained on these conversations
// The VLM mix takes no `video`, `audio`, `ocr`, `pointcloud` or fixed size.
//
// The output is a pure function of (samples, seed, vocab_size, mix) and, for speech/, the
// espeak-ng version: byte-identical for any thread count. Image i and its conversation
// derive from HashKeys(seed, i).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "headrace/core/status.h"

namespace headrace {

// The kind of records make-sample writes.
enum class SampleMix {
  kVqa,  // chat VQA: one image and 1 to 3 question/answer pairs per record (the default)
  kVlm,  // VLM SFT: 0 to 4 images, 1 to 20 pairs, some videos (`--mix vlm`, above)
};

struct MakeSampleOptions {
  std::string out_dir;  // created if missing; existing files of the same names are replaced
  int64_t samples = 1000;
  uint64_t seed = 0;
  int threads = 0;  // worker threads drawing and encoding images; 0: one per core
  int vocab_size = 2000;
  SampleMix mix = SampleMix::kVqa;
  // Both > 0: every image is width x height (for benchmarks at a fixed size, e.g. the
  // 640x480 of LIMITS.md); the content is the same scenes, drawn at that size.
  int width = 0;
  int height = 0;
  // `--modalities video`: each sample also gets videos/<id>.mp4, an H.264 clip (2 s,
  // 10 fps, 160x120, a keyframe each second) panning across a small drawing of the same
  // scene, and its manifest line a "video" key, so that the conversation fits the clip too.
  bool video = false;
  // `--modalities audio`: audio/<id>.wav, 16 kHz mono, 1.5 s of a tone at
  // AudioToneHz(i) (a fade at both ends), and a manifest key "audio".
  bool audio = false;
  // With `audio`: the path of an espeak-ng program (the command passes FindOnPath's
  // "espeak-ng"); set, each sample also gets speech/<id>.wav, SpeechText(i) spoken, and
  // manifest keys "speech" and "speech_text" (make_sample_speech.h). Empty: tones only.
  std::string espeak;
  // `--modalities ocr`: ocr/<id>.png, a page of two lines of known words
  // (make_sample_ocr.h), and manifest keys "ocr_image" and "ocr_text".
  bool ocr = false;
  // `--modalities pointcloud`: pointclouds/<id>.bin, a KITTI velodyne-layout scan
  // (float32 x, y, z, intensity; x forward, y left, z up, metres) of PointCloudScene,
  // and a manifest key "pointcloud"; also pointclouds/<id>.pcd, the same points as a PCD
  // file in the form PointCloudPcdForm(i), and a manifest key "pointcloud_pcd".
  bool pointcloud = false;
};

// Sample i's point cloud (key = HashKeys(seed, i)): kPointCloudGroundPoints ground
// returns (intensity 0.2) on the plane z = kPointCloudGroundZ in front of the sensor
// (x > 0, 2 to 50 m), then kPointCloudBoxPoints returns (intensity 0.8) on the top and
// the sensor-facing side of each of PointCloudBoxes(key): 2 to 4 car-sized boxes
// standing on the ground, 8 to 44 m ahead.
inline constexpr float kPointCloudGroundZ = -1.7f;  // KITTI's sensor height
inline constexpr int kPointCloudGroundPoints = 12000;
inline constexpr int kPointCloudBoxPoints = 600;
struct PointCloudBox {
  float center[3];
  float size[3];  // along x, y, z
};
std::vector<PointCloudBox> PointCloudBoxes(uint64_t key);
std::vector<float> PointCloudScene(uint64_t key);
// Writes PointCloudScene(key) to `path`; its size in bytes.
Result<int64_t> WritePointCloud(uint64_t key, const std::string& path);

// The three DATA forms of PCD v0.7 that pointcloud.read reads.
enum class PcdForm {
  kAscii,             // one text line per point, each float in its shortest exact form
  kBinary,            // float32 records, as the .bin's
  kBinaryCompressed,  // the four columns one after another, LZF-compressed (PCL's default)
};
// Sample i's form: ascii, binary, binary_compressed in turn (i % 3), so that any three
// consecutive samples hold all three.
inline PcdForm PointCloudPcdForm(int64_t i) { return static_cast<PcdForm>(i % 3); }
// The PCD file of `points` (x, y, z, intensity each; fields x y z intensity, float32,
// WIDTH = POINTS, HEIGHT 1) in `form`. Every form reads back to exactly `points`.
Result<std::string> PcdBytes(const std::vector<float>& points, PcdForm form);
// Writes PointCloudScene(key) as PCD in `form` to `path`; its size in bytes.
Result<int64_t> WritePointCloudPcd(uint64_t key, PcdForm form, const std::string& path);

// The VLM mix's sample with key HashKeys(seed, i): what MakeSample writes for it.
inline constexpr int kVlmMaxPairs = 20;
inline constexpr int kVlmMaxImages = 4;
inline constexpr int kVlmMinSide = 200;   // px, each side of each image
inline constexpr int kVlmMaxSide = 2000;
struct VlmSampleShape {
  // Question/answer pairs, 1..kVlmMaxPairs: 1 + floor(20 u^3) for u uniform in [0, 1),
  // so a third have one, the median is 3 and a few reach 20.
  int pairs = 1;
  // Width and height of each image, in the conversation's order; 0..kVlmMaxImages of
  // them (0: 10%, 1: 45%, 2: 20%, 3 and 4: 12.5% each).
  std::vector<std::pair<int, int>> images;
  bool video = false;  // 15%: videos/<id>.mp4 and "<video>" opening the first question
};
VlmSampleShape VlmShape(uint64_t key);

// The tone of sample i's audio clip: 200 + 50 * (i % 12) Hz, for tests to check.
inline double AudioToneHz(int64_t i) { return 200.0 + 50.0 * static_cast<double>(i % 12); }

struct MakeSampleStats {
  int64_t samples = 0;
  int64_t images = 0;       // JPEG files written (one per sample in the VQA mix)
  int64_t image_bytes = 0;  // total size of the JPEG files
  int64_t videos = 0;       // MP4 files written
  int64_t video_bytes = 0;  // total size of the MP4 files (with `video`, or the VLM mix)
  int64_t audio_bytes = 0;  // total size of the tones' WAV files (with `audio`)
  int64_t speech_clips = 0;  // speech/ files written (with `audio` and `espeak`)
  int64_t speech_bytes = 0;  // their total size
  int64_t ocr_bytes = 0;    // total size of the OCR pages' PNG files (with `ocr`)
  int64_t pointcloud_bytes = 0;  // total size of the .bin files (with `pointcloud`)
  int64_t pointcloud_pcd_bytes = 0;  // total size of the .pcd files (with `pointcloud`)
  double seconds = 0;       // wall time, tokenizer training included
};

// Writes the dataset. kInvalidArgument on bad options (empty out_dir, samples < 1,
// threads < 0, the VLM mix with other media or a fixed size) or a vocab_size
// SentencePiece refuses; kIoError when a file cannot be
// written or espeak-ng fails. On error, out_dir may hold a partial dataset.
Result<MakeSampleStats> MakeSample(const MakeSampleOptions& options);

// A SentencePiece BPE model (serialized) trained on `sentences` the way make-sample
// trains its tokenizer: the chat template's markers as user-defined symbols, a pad id,
// whitespace kept. Deterministic for the same sentences.
Result<std::string> TrainChatTokenizer(const std::vector<std::string>& sentences,
                                       int vocab_size);

}  // namespace headrace
