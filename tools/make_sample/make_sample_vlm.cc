// The VLM mix (make_sample.h): a sample's shape (VlmShape), its conversation over its
// pictures and video, and its files. Scenes, drawing, questions and writers are the VQA
// mix's; only the sizes (SceneSizes::kVlm) and the conversation's layout are its own.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "headrace/core/rng.h"
#include "make_sample/make_sample_internal.h"

namespace headrace {
namespace make_sample_detail {
namespace {

// The keys a sample's parts derive from: HashKeys(key, part). 0, 1 and 2 are the VQA
// mix's scene, drawing and conversation; the VLM mix uses 0 for the scene a text-only
// sample describes and 2 for its conversation too.
constexpr uint64_t kTextScene = 0;
constexpr uint64_t kConversation = 2;
constexpr uint64_t kShape = 3;
constexpr uint64_t kVideoScene = 4;
constexpr uint64_t kVideoDrawing = 5;
constexpr uint64_t kImages = 16;  // image k: scene 16 + 2k, drawing 17 + 2k

uint64_t ImageScene(uint64_t key, int k) { return HashKeys(key, kImages + 2 * k); }
uint64_t ImageDrawing(uint64_t key, int k) { return HashKeys(key, kImages + 2 * k + 1); }

// What a conversation's questions are about: a picture, the video, or a scene described
// in words.
struct Subject {
  Scene scene;
  std::string intro;  // what opens the question where it first appears
  std::string name;   // what a question about it starts with when there are several
};

// `pairs` question/answer pairs about `subjects`, introduced in order: the first opens
// the first question, each later one a question 0 to 2 pairs after the one before it
// (the last pair at most), several at once when pairs run out. A pair asks about the
// last subject its question introduces, else about any subject introduced so far.
std::vector<QA> Converse(const std::vector<Subject>& subjects, int pairs, Rng& rng) {
  std::vector<int> intro_at(subjects.size(), 0);
  for (size_t m = 1; m < subjects.size(); ++m) {
    intro_at[m] = std::min(pairs - 1, intro_at[m - 1] + static_cast<int>(rng.Below(3)));
  }
  const bool named = subjects.size() > 1;
  std::vector<QA> out;
  size_t introduced = 0;
  for (int j = 0; j < pairs; ++j) {
    std::string opening;
    size_t about = subjects.size();
    while (introduced < subjects.size() && intro_at[introduced] == j) {
      opening += subjects[introduced].intro;
      about = introduced++;
    }
    if (about == subjects.size()) about = rng.Below(introduced);
    QA qa = AskAny(subjects[about].scene, rng);
    qa.question = opening + (named ? subjects[about].name : "") + qa.question;
    out.push_back(std::move(qa));
  }
  return out;
}

}  // namespace

Status WriteVlmSample(const fs::path& root, uint64_t key, const std::string& id,
                      ImageWriter& writer, Written& written, ManifestRecord& record) {
  const VlmSampleShape shape = VlmShape(key);
  record.id = id;
  record.image_list = true;
  std::vector<Subject> subjects;
  if (shape.video) {
    record.video = "videos/" + id + ".mp4";
    HR_ASSIGN_OR_RETURN(const int64_t bytes, WriteClip(HashKeys(key, kVideoScene),
                                                       HashKeys(key, kVideoDrawing),
                                                       root / record.video));
    written.video.fetch_add(bytes, std::memory_order_relaxed);
    written.videos.fetch_add(1, std::memory_order_relaxed);
    // The clip's scene at the clip's size, so that positions are the clip's.
    subjects.push_back({MakeScene(HashKeys(key, kVideoScene), SceneSizes::kVqa, 160, 120),
                        "<video>\n", "In the video: "});
  }
  for (int k = 0; k < static_cast<int>(shape.images.size()); ++k) {
    record.images.push_back("images/" + id + "_" + std::to_string(k) + ".jpg");
    Scene scene = MakeScene(ImageScene(key, k), SceneSizes::kVlm);
    HR_ASSIGN_OR_RETURN(const int64_t bytes,
                        writer.Write(scene, ImageDrawing(key, k), root / record.images.back()));
    written.image.fetch_add(bytes, std::memory_order_relaxed);
    written.images.fetch_add(1, std::memory_order_relaxed);
    subjects.push_back(
        {std::move(scene), "<image>\n", "Picture " + std::to_string(k + 1) + ": "});
  }
  if (subjects.empty()) {  // text only: a scene told in words
    Scene scene = MakeScene(HashKeys(key, kTextScene), SceneSizes::kVqa);
    std::string intro = "Picture this: " + Caption(scene) + "\n";
    subjects.push_back({std::move(scene), std::move(intro), ""});
  }
  Rng rng(HashKeys(key, kConversation));
  record.conversation = Converse(subjects, shape.pairs, rng);
  return Status::Ok();
}

}  // namespace make_sample_detail

VlmSampleShape VlmShape(uint64_t key) {
  using make_sample_detail::ImageScene;
  Rng rng(HashKeys(key, make_sample_detail::kShape));
  VlmSampleShape shape;
  const double u = rng.Uniform();
  shape.pairs = std::min(kVlmMaxPairs, 1 + static_cast<int>(20 * u * u * u));
  const double v = rng.Uniform();
  const int images = v < 0.10 ? 0 : v < 0.55 ? 1 : v < 0.75 ? 2 : v < 0.875 ? 3 : 4;
  shape.video = rng.Bernoulli(0.15);
  for (int k = 0; k < images; ++k) {
    // The size is the scene's first draws (MakeScene), nothing drawn.
    const make_sample_detail::Scene scene =
        make_sample_detail::MakeScene(ImageScene(key, k), make_sample_detail::SceneSizes::kVlm);
    shape.images.emplace_back(scene.width, scene.height);
  }
  return shape;
}

}  // namespace headrace
