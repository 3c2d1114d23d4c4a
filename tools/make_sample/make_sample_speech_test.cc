#include "make_sample/make_sample_speech.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "headrace/ops/audio/decode.h"
#include "make_sample/make_sample.h"
#include "make_sample/make_sample_ocr.h"
#include "test_files.h"

namespace headrace {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::vector<std::string> Words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

fs::path TempDir(const std::string& name) {
  const char* env = std::getenv("HEADRACE_TEST_TMP");
  const fs::path root =
      fs::path(env != nullptr ? env : "/tmp") / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(root);
  return root;
}

TEST(MakeSampleSpeech, TheTextIsTheFiveWordsOfTheSamplesOcrPage) {
  for (int64_t i : {0, 1, 17, 123}) {
    const std::vector<std::string> words = Words(SpeechText(i));
    ASSERT_EQ(words.size(), 5u) << SpeechText(i);
    EXPECT_EQ(std::set<std::string>(words.begin(), words.end()).size(), 5u);
    const std::vector<std::string> lines = OcrLines(i);
    EXPECT_EQ(SpeechText(i) + " " + std::to_string(i), lines[0] + " " + lines[1]);
    EXPECT_EQ(SpeechText(i), SpeechText(i));
  }
  EXPECT_NE(SpeechText(0), SpeechText(1));
}

TEST(MakeSampleSpeech, FindOnPathFindsExecutablesOnly) {
  const std::string sh = FindOnPath("sh");
  ASSERT_FALSE(sh.empty()) << "no sh on PATH";
  EXPECT_EQ(::access(sh.c_str(), X_OK), 0);
  EXPECT_EQ(fs::path(sh).filename(), "sh");
  EXPECT_EQ(FindOnPath("headrace-no-such-program"), "");
  EXPECT_EQ(FindOnPath("bin/sh"), "") << "a name, not a path";
  EXPECT_EQ(FindOnPath(""), "");
}

TEST(MakeSampleSpeech, AProgramThatFailsOrIsMissingIsAnIoErrorNamingIt) {
  const fs::path out = TempDir("make_sample_speech_fail") / "x.wav";
  fs::create_directories(out.parent_path());
  const std::string no = FindOnPath("false");
  ASSERT_FALSE(no.empty());
  auto failed = WriteSpeech(no, "river", out);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kIoError);
  EXPECT_THAT(failed.status().message(), HasSubstr("exited with status 1"));
  EXPECT_THAT(failed.status().message(), HasSubstr(no));

  auto missing = WriteSpeech("/nonexistent/espeak-ng", "river", out);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/espeak-ng"));

  // A program that succeeds but writes nothing: no clip is not a clip.
  auto silent = WriteSpeech(FindOnPath("true"), "river", out);
  ASSERT_FALSE(silent.ok());
  EXPECT_THAT(silent.status().message(), HasSubstr("wrote no audio"));
  fs::remove_all(out.parent_path());
}

TEST(MakeSampleSpeech, WithoutEspeakTheAudioIsTonesOnly) {
  const fs::path root = TempDir("make_sample_speech_none");
  MakeSampleOptions options;
  options.out_dir = root.string();
  options.samples = 2;
  options.threads = 1;
  options.vocab_size = 300;
  options.audio = true;  // espeak empty
  auto stats = MakeSample(options);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->speech_clips, 0);
  EXPECT_GT(stats->audio_bytes, 0);
  EXPECT_FALSE(fs::exists(root / "speech"));
  const std::string manifest = test::ReadFile(root / "manifest.jsonl");
  EXPECT_THAT(manifest, HasSubstr("\"audio\":\"audio/000000.wav\""));
  EXPECT_THAT(manifest, ::testing::Not(HasSubstr("\"speech")));
  fs::remove_all(root);
}

// Decodes `path` to 16 kHz mono with audio.decode, as the examples do.
std::vector<float> Decode16k(const fs::path& path, int* rate) {
  const std::string bytes = test::ReadFile(path);
  AudioDecodeOp op(AudioDecodeSpec{.sample_rate = 16000, .channels = 1}, 0);
  std::vector<Value> values = {
      EncodedBytes{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}};
  ScratchArena scratch;
  SampleContext ctx;
  ctx.scratch = &scratch;
  ctx.values = values;
  const Status st = op.Run(ctx);
  EXPECT_TRUE(st.ok()) << path << ": " << st.ToString();
  const auto* audio = std::get_if<AudioView>(&values[0]);
  if (!st.ok() || audio == nullptr) return {};
  *rate = audio->sample_rate;
  return std::vector<float>(audio->data, audio->data + audio->frames);
}

TEST(MakeSampleSpeech, WithEspeakEachSampleHasAClipOfItsWords) {
  const std::string espeak = FindOnPath("espeak-ng");
  if (espeak.empty()) GTEST_SKIP() << "espeak-ng is not installed (scripts/setup.sh installs it)";
  const fs::path root = TempDir("make_sample_speech");
  MakeSampleOptions options;
  options.out_dir = root.string();
  options.samples = 3;
  options.seed = 1;
  options.threads = 2;
  options.vocab_size = 300;
  options.audio = true;
  options.espeak = espeak;
  auto stats = MakeSample(options);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->speech_clips, 3);
  const std::vector<std::string> lines = test::Lines(test::ReadFile(root / "manifest.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  int64_t total = 0;
  for (int64_t i = 0; i < 3; ++i) {
    const std::string name = "speech/00000" + std::to_string(i) + ".wav";
    EXPECT_THAT(lines[i],
                HasSubstr("\"speech\":\"" + name + "\",\"speech_text\":\"" + SpeechText(i) + "\""));
    EXPECT_THAT(lines[i], HasSubstr("\"audio\":\"audio/00000" + std::to_string(i) + ".wav\""))
        << "the tone stays";
    total += static_cast<int64_t>(fs::file_size(root / name));

    int rate = 0;
    const std::vector<float> x = Decode16k(root / name, &rate);
    ASSERT_EQ(rate, 16000);
    const double seconds = static_cast<double>(x.size()) / rate;
    // Five words: espeak-ng's default 175 words a minute is ~0.35 s a word, plus the
    // pauses around the sentence; a clip outside 0.2-0.8 s a word is not that speech.
    EXPECT_GT(seconds, 5 * 0.2) << name;
    EXPECT_LT(seconds, 5 * 0.8) << name;
    double energy = 0;
    float peak = 0;
    for (float v : x) {
      energy += static_cast<double>(v) * v;
      peak = std::max(peak, std::abs(v));
    }
    const double rms = std::sqrt(energy / static_cast<double>(x.size()));
    EXPECT_GT(rms, 0.02) << name;
    EXPECT_GT(peak, 0.1) << name;
    EXPECT_LE(peak, 1.0f) << name;
    // Speech has pauses: some 20 ms stretch is far quieter than the clip's RMS, which
    // a tone or noise would not have.
    double quietest = 1e9;
    for (size_t s = 0; s + 320 <= x.size(); s += 320) {
      double e = 0;
      for (size_t k = s; k < s + 320; ++k) e += static_cast<double>(x[k]) * x[k];
      quietest = std::min(quietest, std::sqrt(e / 320));
    }
    EXPECT_LT(quietest, rms / 10) << name;
  }
  EXPECT_EQ(stats->speech_bytes, total);
  // Deterministic for one espeak-ng: a second run writes the same bytes.
  const fs::path again = TempDir("make_sample_speech_again");
  options.out_dir = again.string();
  options.threads = 1;
  ASSERT_TRUE(MakeSample(options).ok());
  for (int64_t i = 0; i < 3; ++i) {
    const std::string name = "speech/00000" + std::to_string(i) + ".wav";
    EXPECT_EQ(test::ReadFile(root / name), test::ReadFile(again / name)) << name;
  }
  fs::remove_all(root);
  fs::remove_all(again);
}

}  // namespace
}  // namespace headrace
