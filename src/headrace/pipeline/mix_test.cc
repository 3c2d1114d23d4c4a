// source.mix through the whole pipeline: config, open, order, the `source` strings, the
// per-entry counts and error budgets.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "headrace/pipeline/config.h"
#include "headrace/pipeline/loader.h"
#include "headrace/pipeline/test_pipelines.h"

namespace headrace {
namespace {

namespace fs = std::filesystem;

// A text-only manifest of `n` records with ids "<tag><i>"; `bad` lines are not JSON.
fs::path WriteManifest(const fs::path& dir, const std::string& tag, int n, int bad = 0) {
  fs::create_directories(dir);
  const fs::path path = dir / (tag + ".jsonl");
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) {
    if (i < bad) {
      out << "{not json\n";
      continue;
    }
    out << R"({"id": ")" << tag << i
        << R"(", "conversations": [{"from": "human", "value": "hi"}]})" << "\n";
  }
  return path;
}

PipelineSpec MixSpec(const fs::path& dir, std::vector<std::tuple<std::string, int, double>> parts) {
  PipelineSpec spec = test::IndexPipeline(dir / "unused", 1);
  spec.source = SourceSpec{};
  for (const auto& [name, n, weight] : parts) {
    MixEntrySpec e;
    e.name = name;
    e.weight = weight;
    e.source.manifest = WriteManifest(dir, name, n).string();
    spec.source.mix.push_back(e);
  }
  spec.epochs = 1;
  spec.batch.size = 8;
  spec.seed = 5;
  return spec;
}

struct Delivered {
  std::vector<std::string> ids, sources;
  std::vector<int64_t> indices;
};

Delivered RunAll(const PipelineSpec& spec, LoaderOptions options = {}) {
  Delivered d;
  auto loader = Loader::Make(spec, options);
  EXPECT_TRUE(loader.ok()) << loader.status().message();
  if (!loader.ok()) return d;
  while (true) {
    Result<std::optional<Batch>> b = (*loader)->Next();
    EXPECT_TRUE(b.ok()) << b.status().message();
    if (!b.ok() || !b->has_value()) break;
    const Batch& batch = **b;
    for (const Batch::Strings& column : batch.strings) {
      for (const auto& row : column.rows) {
        if (column.name == "id") d.ids.push_back(row.at(0));
        if (column.name == "source") d.sources.push_back(row.at(0));
      }
    }
    const Tensor* index = batch.Find("index");
    for (int64_t i = 0; i < index->numel(); ++i) d.indices.push_back(index->data<int64_t>()[i]);
  }
  return d;
}

TEST(Mix, EverySampleCarriesItsEntryAndAnEpochReadsEachAtMostOnce) {
  const fs::path dir = fs::path(testing::TempDir()) / "mix_basic";
  const PipelineSpec spec = MixSpec(dir, {{"vqa", 120, 0.6}, {"ocr", 40, 0.3}, {"text", 200, 0.1}});
  const Delivered d = RunAll(spec);
  ASSERT_FALSE(d.ids.empty());
  ASSERT_EQ(d.ids.size(), d.sources.size());
  std::map<std::string, int> per;
  std::set<std::string> seen;
  for (size_t i = 0; i < d.ids.size(); ++i) {
    EXPECT_EQ(d.ids[i].rfind(d.sources[i], 0), 0u) << d.ids[i] << " from " << d.sources[i];
    EXPECT_TRUE(seen.insert(d.ids[i]).second) << d.ids[i];
    ++per[d.sources[i]];
  }
  // first_exhausted: ocr (40 at 0.3) ends the epoch after 40 / 0.3 positions, every one
  // of its samples read.
  EXPECT_NEAR(static_cast<double>(d.ids.size()), 40 / 0.3, 1.0);
  EXPECT_EQ(per["ocr"], 40);
  EXPECT_NEAR(per["vqa"], 0.6 * static_cast<double>(d.ids.size()), 1.0);
  // The same seed, the same run; resume at batch 5 gives the uninterrupted run's tail.
  EXPECT_EQ(RunAll(spec).ids, d.ids);
  LoaderOptions from5;
  from5.start_batch = 5;
  const Delivered tail = RunAll(spec, from5);
  EXPECT_EQ(tail.ids, std::vector<std::string>(d.ids.begin() + 40, d.ids.end()));
}

TEST(Mix, EachEntryIsCountedAndItsOwnErrorRateStopsTheRun) {
  const fs::path dir = fs::path(testing::TempDir()) / "mix_errors";
  PipelineSpec spec = MixSpec(dir, {{"good", 100, 1}, {"flaky", 100, 1}});
  spec.source.mix[1].source.manifest = WriteManifest(dir, "flaky", 100, /*bad=*/10).string();
  spec.errors.max_error_rate = 0.5;
  spec.errors.min_samples = 10;
  {
    auto loader = Loader::Make(spec);
    ASSERT_TRUE(loader.ok()) << loader.status().message();
    while (true) {
      auto b = (*loader)->Next();
      ASSERT_TRUE(b.ok()) << b.status().message();
      if (!b->has_value()) break;
    }
    const EngineMetrics m = (*loader)->engine_metrics();
    ASSERT_EQ(m.entries.size(), 2u);
    EXPECT_EQ(m.entries[0].name, "good");
    EXPECT_EQ(m.entries[0].samples_failed, 0);
    EXPECT_EQ(m.entries[1].samples_failed, 10);
    EXPECT_EQ(m.entries[0].samples_delivered + m.entries[1].samples_delivered +
                  m.entries[1].samples_failed, m.samples_delivered + m.samples_failed);
  }
  spec.source.mix[1].max_error_rate = 0.01;
  auto loader = Loader::Make(spec);
  ASSERT_TRUE(loader.ok());
  Status failure;
  while (true) {
    auto b = (*loader)->Next();
    if (!b.ok()) {
      failure = b.status();
      break;
    }
    if (!b->has_value()) break;
  }
  ASSERT_FALSE(failure.ok()) << "the flaky entry's 10% should pass its 1%";
  EXPECT_NE(failure.message().find("source.mix[1] (flaky)"), std::string::npos) << failure.message();
  EXPECT_NE(failure.message().find("source.mix[1].max_error_rate"), std::string::npos)
      << failure.message();
}

TEST(Mix, ConfigErrorsNameTheEntryAndKey) {
  const fs::path dir = fs::path(testing::TempDir()) / "mix_config";
  const std::string a = WriteManifest(dir, "a", 10).string();
  const std::string b = WriteManifest(dir, "b", 10).string();
  const auto error = [](const std::string& yaml) {
    Result<PipelineSpec> spec = ParsePipelineConfig(yaml);
    if (!spec.ok()) return spec.status().message();
    Result<std::unique_ptr<Loader>> loader = Loader::Make(*spec);
    return loader.ok() ? std::string() : loader.status().message();
  };
  const std::string head = "source:\n  mix:\n";
  EXPECT_NE(error(head + "    - {name: x, manifest: " + a + "}\n    - {name: x, manifest: " + b + "}\n")
                .find("source.mix[1].name"), std::string::npos);
  EXPECT_NE(error(head + "    - {name: x, manifest: " + a + ", weight: 0}\n").find("source.mix[0].weight"),
            std::string::npos);
  EXPECT_NE(error(head + "    - {name: x, weight: 1}\n").find("source.mix[0].manifest"),
            std::string::npos);
  EXPECT_NE(error(head + "    - {name: x, manifest: " + a + "}\n  manifest: " + b + "\n")
                .find("source.mix"), std::string::npos);
  EXPECT_NE(error(head + "    - {name: x, manifest: " + a + "}\n  until: sometimes\n")
                .find("first_exhausted"), std::string::npos);
  EXPECT_NE(error(head + "    - {name: x, manifest: " + a + "}\n  until: samples\n")
                .find("source.samples"), std::string::npos);
  EXPECT_NE(error(head + "    - {name: x, manifest: " + a + ", repeat: 2}\n").find("epochized"),
            std::string::npos);
  EXPECT_NE(error(head + "    - {name: x, manifest: " + dir.string() + "/missing.jsonl}\n")
                .find("source.mix[0] (x)"), std::string::npos);
  // Fields that differ: one batch layout for every entry.
  const std::string layouts = error(head + "    - {name: x, manifest: " + a +
                                    "}\n    - {name: y, manifest: " + b +
                                    ", fields: [{name: caption, kind: text}]}\n");
  EXPECT_NE(layouts.find("share one batch layout"), std::string::npos);
  // Each side's kinds by name, as the config spells them.
  EXPECT_NE(layouts.find("its fields (caption:text) differ"), std::string::npos) << layouts;
  // A valid mix passes the source's checks (this one then lacks ops).
  EXPECT_EQ(error(head + "    - {name: x, manifest: " + a + "}\n    - {name: y, manifest: " + b +
                  ", weight: 3}\n  until: all_exhausted\n").find("source"), std::string::npos);
}

// The config writes back to a spec that reads the same.
TEST(Mix, TheCanonicalYamlReadsBack) {
  PipelineSpec spec;
  MixEntrySpec e;
  e.name = "vqa";
  e.weight = 0.25;
  e.max_error_rate = 0.1;
  e.source.manifest = "m.jsonl";
  spec.source.mix = {e};
  spec.source.until = BlendUntil::kSamples;
  spec.source.samples = 1000;
  const std::string yaml = PipelineSpecToYaml(spec);
  Result<PipelineSpec> back = ParsePipelineConfig(yaml);
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << yaml;
  ASSERT_EQ(back->source.mix.size(), 1u);
  EXPECT_EQ(back->source.mix[0].name, "vqa");
  EXPECT_EQ(back->source.mix[0].weight, 0.25);
  EXPECT_EQ(back->source.mix[0].max_error_rate, 0.1);
  EXPECT_EQ(back->source.mix[0].source.manifest, "m.jsonl");
  EXPECT_EQ(back->source.until, BlendUntil::kSamples);
  EXPECT_EQ(back->source.samples, 1000);
}

}  // namespace
}  // namespace headrace
