// Tools from Python: the sample dataset generator of `headrace make-sample`, the
// memory closed Loaders keep for the next (release_memory, kept_memory), and a sample's
// step cost as batch.balance counts it (_step_cost, exec/step_cost.h).
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string_view>
#include <type_traits>

#include "common.h"
#include "headrace/core/region_allocator.h"
#include "headrace/exec/step_cost.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/config_schema.h"
#include "make_sample/make_sample.h"
#include "make_sample/make_sample_speech.h"

namespace headrace::python {

void RegisterTools(nb::module_& m) {
  m.def(
      "make_sample",
      [](const std::string& out, int64_t samples, uint64_t seed, int threads, bool video,
         bool audio, bool ocr, bool pointcloud, bool speech, const std::string& mix) {
        if (mix != "vqa" && mix != "vlm") {
          throw StatusError(Status::InvalidArgument("make_sample: mix '" + mix +
                                                    "': expected 'vqa' or 'vlm'"));
        }
        MakeSampleOptions options;
        options.mix = mix == "vlm" ? SampleMix::kVlm : SampleMix::kVqa;
        options.out_dir = out;
        options.samples = samples;
        options.seed = seed;
        options.threads = threads;
        options.video = video;
        options.audio = audio;
        options.ocr = ocr;
        options.pointcloud = pointcloud;
        if (audio && speech) {
          options.espeak = FindOnPath("espeak-ng");
          if (options.espeak.empty()) {
            throw StatusError(Status::InvalidArgument(
                "make_sample: speech=True needs espeak-ng on PATH (apt-get install espeak-ng)"));
          }
        }
        std::optional<Result<MakeSampleStats>> stats;
        {
          nb::gil_scoped_release nogil;
          stats.emplace(MakeSample(options));
        }
        MakeSampleStats s = ValueOrThrow(std::move(*stats));
        nb::dict d;
        d["samples"] = s.samples;
        d["images"] = s.images;
        d["image_bytes"] = s.image_bytes;
        d["videos"] = s.videos;
        d["video_bytes"] = s.video_bytes;
        d["audio_bytes"] = s.audio_bytes;
        d["ocr_bytes"] = s.ocr_bytes;
        d["pointcloud_bytes"] = s.pointcloud_bytes;
        d["pointcloud_pcd_bytes"] = s.pointcloud_pcd_bytes;
        d["speech_clips"] = s.speech_clips;
        d["speech_bytes"] = s.speech_bytes;
        d["seconds"] = s.seconds;
        return d;
      },
      nb::arg("out"), nb::arg("samples") = 1000, nb::arg("seed") = 0, nb::arg("threads") = 0,
      nb::arg("video") = false, nb::arg("audio") = false,
      nb::arg("ocr") = false, nb::arg("pointcloud") = false, nb::arg("speech") = false,
      nb::arg("mix") = "vqa",
      "Writes the chat-VQA sample dataset (JPEGs, manifest.jsonl, tokenizer.model) to `out`;\n"
      "mix='vlm' VLM SFT records instead (1-20 question/answer pairs, 0-4 images of\n"
      "200-2000 px a side as 'images', some videos; tools/make_sample/make_sample.h), with\n"
      "none of the flags below;\n"
      "video=True adds an H.264 clip of each scene (videos/<id>.mp4, manifest key 'video');\n"
      "audio=True a 1.5 s tone (audio/<id>.wav, key 'audio', 200 + 50 * (i % 12) Hz);\n"
      "with speech=True too, five words spoken by espeak-ng (speech/<id>.wav, keys 'speech'\n"
      "and 'speech_text'; ConfigError when espeak-ng is not on PATH);\n"
      "ocr=True a page of rendered words (ocr/<id>.png, keys 'ocr_image' and 'ocr_text');\n"
      "pointcloud=True a LiDAR-like scene (pointclouds/<id>.bin, KITTI float32 x, y, z,\n"
      "intensity; key 'pointcloud') and the same points as PCD (pointclouds/<id>.pcd, ascii,\n"
      "binary and binary_compressed in turn; key 'pointcloud_pcd').");

  m.def(
      "release_memory", [] { return static_cast<int64_t>(ReleaseKeptRegions()); },
      "Unmaps the memory closed Loaders kept mapped for the next Loader of the process and\n"
      "returns its bytes. A ragged pipeline's batch and sample memory (at most one\n"
      "memory.budget_bytes) outlives its Loader, so that the next one (a Loader per epoch, a\n"
      "validation loader) starts on pages the kernel need not fault in and zero again.");
  m.def(
      "_step_cost",
      [](const std::string& cost, int64_t tokens, const std::vector<int64_t>& patches,
         const std::map<std::string, double>& dims) {
        // The dimensions by batch.balance's own keys (the config schema), read as a
        // config's are (pipeline/config.h, StepCostOptionsOf).
        BalanceSpec balance;
        balance.cost = cost;
        for (const auto& [key, value] : dims) {
          bool known = false;
          config_internal::Fields(balance, [&](std::string_view name, auto& field) {
            using T = std::decay_t<decltype(field)>;
            if constexpr (std::is_arithmetic_v<T>) {
              if (name == key) field = static_cast<T>(value), known = true;
            }
          });
          if (!known) {
            throw StatusError(Status::InvalidArgument("_step_cost: unknown dimension '" + key + "'"));
          }
        }
        const StepCostOptions options = ValueOrThrow(StepCostOptionsOf(balance));
        return ValueOrThrow(StepCost::Make(options)).Of(SampleSize{tokens, patches});
      },
      nb::arg("cost"), nb::arg("tokens"), nb::arg("patches") = std::vector<int64_t>{},
      nb::arg("dims") = std::map<std::string, double>{},
      "A sample's step cost as batch.balance counts it (exec/step_cost.h): `cost` a\n"
      "batch.balance.cost name, `patches` each image's, `dims` the model dimensions\n"
      "(batch.balance's keys) given or overriding the preset's.");
  m.def(
      "kept_memory", [] { return static_cast<int64_t>(KeptRegionBytes()); },
      "The bytes closed Loaders keep mapped for the next (release_memory() unmaps them).");
}

}  // namespace headrace::python
