// Every source kind run end to end over the same data, through one PreparedPipeline: the
// same batches as the manifest's (unshuffled), every good sample exactly once per epoch
// over the ranks (shuffled), a resumed run equal to the uninterrupted one's tail, the bad
// sample named by epoch, index and where it is, and a second run of the prepared
// pipeline byte-identical to the first. A new source kind is added to Kinds() below.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "headrace/formats/parquet_test_util.h"
#include "headrace/formats/tar_shard.h"
#include "headrace/pipeline/loader.h"
#include "headrace/pipeline/test_pipelines.h"

namespace headrace {
namespace source_run_conformance_test {
namespace fs = std::filesystem;

constexpr int kSamples = 12;  // 6 batches of 2 an epoch: 3 for each of two ranks
constexpr int kBad = 6;  // lacks its required `score` in every form that can lack it

fs::path Dir(const std::string& kind) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("source_run_" + std::to_string(getpid())) / kind;
  fs::create_directories(dir);
  return dir;
}

double Score(int i) { return 0.5 * i; }  // parquet_test::MakeRows' score

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

SourceSpec Manifest() {
  const fs::path dir = Dir("manifest");
  std::ofstream out(dir / "m.jsonl");
  for (int i = 0; i < kSamples; ++i) {
    out << R"({"id": "id-)" << i << '"';
    if (i != kBad) out << R"(, "score": )" << Score(i);
    out << "}\n";
  }
  SourceSpec spec;
  spec.manifest = (dir / "m.jsonl").string();
  return spec;
}

SourceSpec Shards() {
  const fs::path dir = Dir("shards");
  for (int shard = 0; shard < 3; ++shard) {
    const fs::path path = dir / ("s-" + std::to_string(shard) + ".tar");
    auto writer = TarWriter::Open(path.string());
    EXPECT_TRUE(writer.ok());
    for (int i = shard * 4; i < std::min(kSamples, shard * 4 + 4); ++i) {
      const std::string key = "id-" + std::to_string(i);
      EXPECT_TRUE((*writer)->Add(key + ".txt", Bytes("sample " + std::to_string(i))).ok());
      if (i != kBad) {
        std::ostringstream score;
        score << Score(i);
        EXPECT_TRUE((*writer)->Add(key + ".score", Bytes(score.str())).ok());
      }
    }
    EXPECT_TRUE((*writer)->Close().ok());
  }
  SourceSpec spec;
  spec.shards = (dir / "s-{0..2}.tar").string();
  return spec;
}

SourceSpec Parquet() {
  const fs::path dir = Dir("parquet");
  const Buffer bytes = parquet_test::WriteParquet(parquet_test::MakeRows(kSamples), 3);
  std::ofstream(dir / "p.parquet", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  SourceSpec spec;
  spec.parquet = (dir / "p.parquet").string();
  return spec;
}

// The same shards, shuffled as one permutation of every sample (source.shuffle_scope).
SourceSpec GlobalShards() {
  SourceSpec spec = Shards();
  spec.shuffle_scope = ShuffleScope::kGlobal;
  return spec;
}

// A blend entry named `name` over `source`, weight 1.
MixEntrySpec Entry(std::string name, SourceSpec source = {}) {
  MixEntrySpec e;
  e.name = std::move(name);
  e.source = std::move(source);
  return e;
}

// A blend of one entry, the shards above: unshuffled, its one part reads its samples in
// order (exec/blend_order.h), so its batches are the manifest's; shuffled, the part's
// own seeded order. Its batches carry each sample's entry name too (`source`).
SourceSpec MixOfShards() {
  SourceSpec spec;
  spec.mix = {Entry("shards", Shards())};
  return spec;
}

struct Kind {
  std::string name;
  std::function<SourceSpec()> source;
  bool has_bad = true;  // a Parquet float column cannot lack a cell here
};

std::vector<Kind> Kinds() {
  return {{"manifest", Manifest},
          {"shards", Shards},
          {"shards_global", GlobalShards},
          {"parquet", Parquet, false},
          {"mix", MixOfShards}};
}

PipelineSpec Spec(const Kind& kind, bool shuffle) {
  PipelineSpec spec = test::IndexPipeline(Dir("unused-manifest"), 1);
  spec.source = kind.source();
  // A blend's entries carry their own keys.
  SourceSpec& one = spec.source.mix.empty() ? spec.source : spec.source.mix.front().source;
  one.fields = {SourceFieldSpec{"score", FieldKind::kFloat, "score", 0, true}};
  spec.shuffle = shuffle;
  one.shuffle_window = 2;
  spec.batch.size = 2;
  spec.epochs = 2;
  spec.errors.max_error_rate = 0.5;
  return spec;
}

// (dataset index, score) of each row, and the errors, of every batch a run delivers.
struct Delivered {
  std::vector<std::vector<std::pair<int64_t, float>>> batches;
  std::vector<SampleError> errors;
};

Delivered RunOf(const PreparedPipeline& prepared, LoaderOptions options = {}) {
  Delivered run;
  auto loader = prepared.Run(options);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  if (!loader.ok()) return run;
  while (true) {
    auto batch = (*loader)->Next();
    EXPECT_TRUE(batch.ok()) << batch.status().ToString();
    if (!batch.ok() || !batch->has_value()) break;
    const Tensor* index = (*batch)->Find("index");
    const Tensor* score = (*batch)->Find("score");
    auto& rows = run.batches.emplace_back();
    for (int64_t r = 0; r < (*batch)->size(); ++r) {
      rows.emplace_back(index->data<int64_t>()[r], score->data<float>()[r]);
    }
    for (const SampleError& e : (*batch)->errors) run.errors.push_back(e);
  }
  return run;
}

std::shared_ptr<const PreparedPipeline> Prepare(const PipelineSpec& spec) {
  auto prepared = PreparedPipeline::Make(spec);
  EXPECT_TRUE(prepared.ok()) << prepared.status().ToString();
  return prepared.ok() ? *prepared : nullptr;
}

class SourceRunConformance : public ::testing::TestWithParam<Kind> {};

TEST_P(SourceRunConformance, UnshuffledItRunsTheManifestsBatchesAndNamesTheBadSample) {
  const auto manifest = Prepare(Spec(Kinds()[0], false));
  const auto source = Prepare(Spec(GetParam(), false));
  ASSERT_TRUE(manifest && source);
  const Delivered want = RunOf(*manifest);
  const Delivered got = RunOf(*source);
  if (GetParam().has_bad) {
    EXPECT_EQ(got.batches, want.batches) << GetParam().name;
    ASSERT_EQ(got.errors.size(), 2u);  // once per epoch
    EXPECT_EQ(got.errors[0].epoch, 0);
    EXPECT_EQ(got.errors[1].epoch, 1);
    EXPECT_EQ(got.errors[0].index, kBad);
    // Named by where it is: the manifest's line, the shard member's key.
    EXPECT_NE(got.errors[0].ToString().find(GetParam().name == "manifest" ? "line 7" : "id-6"),
              std::string::npos)
        << got.errors[0].ToString();
  } else {
    EXPECT_TRUE(got.errors.empty());
  }
  for (const auto& batch : got.batches) {
    for (const auto& [index, score] : batch) EXPECT_EQ(score, Score(static_cast<int>(index)));
  }
}

TEST_P(SourceRunConformance, ShuffledRanksShareEachEpochsSamplesExactlyOnce) {
  const auto prepared = Prepare(Spec(GetParam(), true));
  ASSERT_NE(prepared, nullptr);
  std::map<int64_t, std::multiset<int64_t>> seen;  // epoch -> indices over both ranks
  for (int rank = 0; rank < 2; ++rank) {
    LoaderOptions options;
    options.rank = rank;
    options.world_size = 2;
    const Delivered run = RunOf(*prepared, options);
    const int64_t per_epoch = static_cast<int64_t>(run.batches.size()) / 2;
    for (size_t b = 0; b < run.batches.size(); ++b) {
      for (const auto& [index, score] : run.batches[b]) {
        seen[static_cast<int64_t>(b) / std::max<int64_t>(per_epoch, 1)].insert(index);
      }
    }
  }
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& [epoch, indices] : seen) {
    std::multiset<int64_t> want;
    for (int i = 0; i < kSamples; ++i) {
      if (!(GetParam().has_bad && i == kBad)) want.insert(i);
    }
    EXPECT_EQ(indices, want) << GetParam().name << " epoch " << epoch;
  }
}

TEST_P(SourceRunConformance, AResumedRunIsTheUninterruptedRunsTailAndRunsRepeatExactly) {
  const auto prepared = Prepare(Spec(GetParam(), true));
  ASSERT_NE(prepared, nullptr);
  const Delivered full = RunOf(*prepared);
  EXPECT_EQ(RunOf(*prepared).batches, full.batches);  // a second run of the same preparation
  LoaderOptions from;
  from.start_epoch = 1;
  from.start_batch = 1;
  const Delivered tail = RunOf(*prepared, from);
  const size_t per_epoch = full.batches.size() / 2;
  ASSERT_GT(full.batches.size(), per_epoch + 1);
  EXPECT_EQ(tail.batches, std::vector(full.batches.begin() + static_cast<long>(per_epoch) + 1,
                                      full.batches.end()));
}

// A global order over shards is the manifest's shuffle: any sample may sit next to any
// other (a window of 2 of the 3 shards would keep the first two batches' samples within
// two shards), and each sample's members cost one request.
TEST(GlobalShardOrder, IsTheManifestsShuffleAtOneRequestPerSample) {
  const auto manifest = Prepare(Spec(Kinds()[0], true));
  PipelineSpec spec = Spec(Kinds()[2], true);
  spec.epochs = 1;
  // Each sample's .txt member read too: two members, one request.
  spec.source.fields.push_back(SourceFieldSpec{"caption", FieldKind::kString, "txt", 0, false});
  const auto global = Prepare(spec);
  ASSERT_TRUE(manifest && global);
  const Delivered want = RunOf(*manifest);
  const Delivered got = RunOf(*global);
  ASSERT_FALSE(got.batches.empty());
  EXPECT_EQ(got.batches, std::vector(want.batches.begin(),
                                     want.batches.begin() + static_cast<long>(got.batches.size())));
  // The shards' reads, in that one run: one per good sample (the bad one, lacking its
  // required score, reads nothing), its other member served from that read.
  const BlockCacheStats cache = global->source().block_cache()->CacheStats();
  EXPECT_EQ(cache.block_reads, kSamples - 1);
  EXPECT_EQ(cache.evictions, 0);  // 12 small samples: the automatic cache holds them all
  EXPECT_EQ(cache.block_hits + cache.block_waits, kSamples - 1);  // their second members
}

INSTANTIATE_TEST_SUITE_P(Kinds, SourceRunConformance, ::testing::ValuesIn(Kinds()),
                         [](const auto& info) { return info.param.name; });

}  // namespace source_run_conformance_test
}  // namespace headrace
