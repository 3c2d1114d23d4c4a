// A blend whose entries have ops of their own (source.mix[i].ops, PipelineSpec::mix_ops):
// the config, the joined batch layout and its errors, and a run in which each sample goes
// through its entry's chain and has "none" of the fields only other entries write. A
// run on real images and videos against each entry's pipeline alone:
// tests/python/test_mix.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "headrace/pipeline/config.h"
#include "headrace/pipeline/loader.h"
#include "headrace/pipeline/plan.h"
#include "headrace/pipeline/test_pipelines.h"

namespace headrace {
namespace mix_ops_test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// --- the config --------------------------------------------------------------------

// An image entry with its own Qwen2-VL ops, a video entry with its own, and text.tokenize
// shared; every entry declares both media as lists, so that a sample without one has no
// items of it.
std::string VlmBlendYaml(const std::string& video_field = "{name: video, kind: video, max_items: 1}") {
  const std::string fields = "[{name: images, kind: image, max_items: 4}, " + video_field +
                             ", {name: conversation, kind: conversation, key: conversations}]";
  return "source:\n"
         "  mix:\n"
         "    - name: pictures\n"
         "      manifest: pictures.jsonl\n"
         "      weight: 0.7\n"
         "      fields: " + fields + "\n"
         "      ops:\n"
         "        - image.decode: {field: images}\n"
         "        - image.smart_resize: {preset: qwen2_vl, field: images}\n"
         "        - vision.patchify: {preset: qwen2_vl, field: images}\n"
         "    - name: clips\n"
         "      manifest: clips.jsonl\n"
         "      weight: 0.3\n"
         "      fields: " + fields + "\n"
         "      ops:\n"
         "        - video.patchify: {preset: qwen2_vl, field: video}\n"
         "ops:\n"
         "  - text.tokenize: {tokenizer: tok.json, preset: qwen2_vl, grid_field: image_grid_thw,\n"
         "                    video_grid_field: video_grid_thw, pad: false, max_length: 4096}\n";
}

// `text` with its first `from` replaced by `to`.
std::string Replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(MixOps, EachEntrysOpsAreReadWrittenBackAndOverridden) {
  Result<PipelineSpec> spec = ParsePipelineConfig(VlmBlendYaml());
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_EQ(spec->mix_ops.size(), 2u);
  ASSERT_EQ(spec->mix_ops[0].size(), 3u);
  ASSERT_EQ(spec->mix_ops[1].size(), 1u);
  EXPECT_EQ(OpSpecName(spec->mix_ops[0][2]), "vision.patchify");
  EXPECT_EQ(OpSpecName(spec->mix_ops[1][0]), "video.patchify");
  ASSERT_EQ(spec->ops.size(), 1u);

  // The canonical YAML writes each entry's ops inside the entry, and reads back the same.
  const std::string yaml = PipelineSpecToYaml(*spec);
  Result<PipelineSpec> back = ParsePipelineConfig(yaml);
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << yaml;
  EXPECT_EQ(PipelineSpecToYaml(*back), yaml);
  ASSERT_EQ(back->mix_ops.size(), 2u);
  EXPECT_EQ(std::get<SmartResizeSpec>(back->mix_ops[0][1]).preset, VisionModel::kQwen2Vl);

  // --set addresses an entry's op by its place and name, like a shared one.
  spec = ParsePipelineConfig(VlmBlendYaml(),
                             {"source.mix[0].ops[1].image.smart_resize.max_pixels=200704"});
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(std::get<SmartResizeSpec>(spec->mix_ops[0][1]).max_pixels, 200704);
  EXPECT_EQ(std::get<SmartResizeSpec>(spec->mix_ops[0][1]).field, "images");
}

TEST(MixOps, ConfigErrorsNameTheEntrysOpKey) {
  std::string yaml = Replaced(VlmBlendYaml(), "image.smart_resize", "image.smart_resise");
  EXPECT_THAT(ParsePipelineConfig(yaml).status().message(),
              HasSubstr("source.mix[0].ops[1]: unknown op 'image.smart_resise'"));
  // An op's own rule, named by the entry's key.
  EXPECT_THAT(ParsePipelineConfig(VlmBlendYaml(), {"source.mix[0].ops[1].image.smart_resize"
                                                   ".max_aspect_ratio=0.5"})
                  .status()
                  .message(),
              HasSubstr("source.mix[0].ops[1].image.smart_resize.max_aspect_ratio"));
  // An entry's chain is checked as any chain: patchify before its decode.
  yaml = Replaced(VlmBlendYaml(), "        - image.decode: {field: images}\n", "");
  EXPECT_THAT(ParsePipelineConfig(yaml).status().message(),
              HasSubstr("source.mix[0].ops[0].image.smart_resize: reads 'images' as an image"));
  // Entry ops where there is no blend.
  PipelineSpec plain = test::IndexPipeline(fs::path(testing::TempDir()) / "mix_ops_plain", 4);
  plain.mix_ops = {{DecodeSpec{}}};
  EXPECT_THAT(ValidatePipelineSpec(plain).message(),
              HasSubstr("source.mix[0].ops: ops of a blend entry, but the source is not a blend"));
}

// --- the joined layout -------------------------------------------------------------

std::map<std::string, FieldSpec> FieldsOf(const PipelinePlan& plan) {
  std::map<std::string, FieldSpec> out;
  for (const FieldSpec& f : plan.fields) out[f.name] = f;
  return out;
}

TEST(MixOps, EntriesFillOneLayoutAndEachChainStandsInForTheOthersFields) {
  Result<PipelineSpec> spec = ParsePipelineConfig(VlmBlendYaml());
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  spec->ops.clear();  // the tokenizer file is not here: the media chains alone
  auto storage = MakeLocalStorage();
  Result<PipelinePlan> plan = PlanPipeline(*spec, *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->chains.size(), 2u);
  EXPECT_EQ(plan->chains[0].entry, "pictures");
  EXPECT_EQ(plan->chains[1].entry, "clips");
  std::map<std::string, FieldSpec> fields = FieldsOf(*plan);
  for (const char* name : {"pixel_values", "pixel_values_lengths", "image_grid_thw",
                           "images_count", "pixel_values_videos", "pixel_values_videos_lengths",
                           "video_grid_thw", "video_count"}) {
    EXPECT_TRUE(fields.count(name)) << name;
  }
  EXPECT_EQ(fields["video_grid_thw"].layout, FieldLayout::kItems);
  EXPECT_EQ(fields["video_grid_thw"].count_field, "video_count");
  // Each chain first stands in for what only the other writes (its lengths are the
  // assemble stage's), then runs its own ops.
  ASSERT_GE(plan->chains[0].ops.size(), 2u);
  EXPECT_EQ(plan->chains[0].ops[0]->name(),
            "absent: pixel_values_videos, video_grid_thw, video_timestamps, video_count");
  EXPECT_EQ(plan->chains[0].ops[1]->name(),
            "images[*]: image.decode, image.smart_resize, vision.patchify");
  EXPECT_EQ(plan->chains[1].ops[0]->name(), "absent: pixel_values, image_grid_thw, images_count");
  EXPECT_EQ(plan->chains[1].ops[1]->name(), "video[*]: video.patchify");

  // A blend whose entries have no ops of their own keeps one chain.
  spec->mix_ops.clear();
  spec->ops = {DecodeSpec{.field = "images"}, SmartResizeSpec{.preset = VisionModel::kQwen2Vl,
                                                               .field = "images"},
               PatchifySpec{.preset = VisionModel::kQwen2Vl, .field = "images"}};
  plan = PlanPipeline(*spec, *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->chains.size(), 1u);
  EXPECT_EQ(plan->chains[0].entry, "");
}

TEST(MixOps, TheSharedTokenizerReadsTheGridsOfEitherEntry) {
  EXPECT_TRUE(ValidatePipelineSpec(*ParsePipelineConfig(VlmBlendYaml())).ok());
  // A single video per record: its grid is one fixed row per sample, which the pictures'
  // samples could only fill with zeros that read as a 0x0x0 video. Refused, with the way
  // out.
  EXPECT_THAT(ParsePipelineConfig(VlmBlendYaml("{name: video, kind: video}")).status().message(),
              HasSubstr("ops[0].text.tokenize: reads the batch field 'video_grid_thw', which only "
                        "source.mix[1].ops[0].video.patchify writes: this chain's samples would "
                        "read a row of zeros"));
}

TEST(MixOps, AFieldTwoEntriesWriteDifferentlyNamesBoth) {
  // The clips entry also writes pixel_values, in another dtype.
  const std::string yaml = Replaced(
      VlmBlendYaml(), "{preset: qwen2_vl, field: video}",
      "{preset: qwen2_vl, field: video, output: pixel_values, grid_output: image_grid_thw, "
      "dtype: bf16}");
  EXPECT_THAT(ParsePipelineConfig(yaml).status().message(),
              HasSubstr("source.mix[1].ops[0].video.patchify writes the batch field "
                        "'pixel_values' as bf16 [?, 1176] (ragged) counted by 'video_count', but "
                        "source.mix[0].ops[2].vision.patchify (source.mix entry 'pictures') "
                        "writes it as f32 [?, 1176] (ragged) counted by 'images_count'"));
}

// --- a run -------------------------------------------------------------------------

// Writes the sample's index plus `Plus` into its fixed i64 field: "a" (entry A's own op,
// index + 1) and "copy" (the shared op, the index).
template <int Plus>
class IndexPlusOp final : public Op {
 public:
  explicit IndexPlusOp(int row) : row_(row) {}
  std::string_view name() const override { return Plus == 0 ? "test.copy" : "test.a"; }
  Status Run(SampleContext& ctx) const override {
    *reinterpret_cast<int64_t*>(ctx.rows[row_]) = ctx.sample->index + Plus;
    return Status::Ok();
  }

 private:
  int row_;
};
using FixedOp = IndexPlusOp<1>;
using CopyOp = IndexPlusOp<0>;

// Appends index % 3 rows of the index to the ragged field "b" (entry B's own op).
class RaggedOp final : public Op {
 public:
  explicit RaggedOp(int row) : row_(row) {}
  std::string_view name() const override { return "test.b"; }
  Status Run(SampleContext& ctx) const override {
    const int64_t n = ctx.sample->index % 3;
    HR_ASSIGN_OR_RETURN(uint8_t * out, ctx.AppendRows(row_, n));
    for (int64_t r = 0; r < n; ++r) reinterpret_cast<int64_t*>(out)[r] = ctx.sample->index;
    return Status::Ok();
  }

 private:
  int row_;
};

template <typename T>
UserOpSpec UserOp(std::string name, FieldSpec field) {
  UserOpSpec op;
  op.name = std::move(name);
  op.fields = {std::move(field)};
  op.make = [](const UserOpBinding& b) -> Result<std::unique_ptr<Op>> {
    return std::unique_ptr<Op>(std::make_unique<T>(b.first_row));
  };
  return op;
}

std::string WriteManifest(const fs::path& dir, const std::string& tag, int n) {
  fs::create_directories(dir);
  const fs::path path = dir / (tag + ".jsonl");
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) {
    out << R"({"id": ")" << tag << i << R"(", "conversations": [{"from": "human", "value": "hi"}]})"
        << "\n";
  }
  return path.string();
}

TEST(MixOps, EachSampleRunsItsEntrysChainAndHasNoneOfTheOthersFields) {
  const fs::path dir = fs::path(testing::TempDir()) / "mix_ops_run";
  PipelineSpec spec = test::IndexPipeline(dir, 1);
  spec.source = SourceSpec{};
  spec.ops = {UserOp<CopyOp>("test.copy", FieldSpec{"copy", DType::kI64, {1}})};
  // The shared op is declared alike in both chains: made once (a tokenizer loaded once).
  auto made = std::make_shared<int>(0);
  std::get<UserOpSpec>(spec.ops[0]).make = [made](const UserOpBinding& b) {
    ++*made;
    return Result<std::unique_ptr<Op>>(std::unique_ptr<Op>(std::make_unique<CopyOp>(b.first_row)));
  };
  for (const char* name : {"A", "B"}) {
    MixEntrySpec e;
    e.name = name;
    e.source.manifest = WriteManifest(dir, name, 20);
    spec.source.mix.push_back(e);
  }
  spec.source.until = BlendUntil::kAllExhausted;
  spec.mix_ops = {{UserOp<FixedOp>("test.a", FieldSpec{"a", DType::kI64, {1}})},
                  {UserOp<RaggedOp>("test.b", FieldSpec{"b", DType::kI64, {1}, FieldLayout::kRagged})}};
  spec.epochs = 1;
  spec.batch.size = 8;
  auto loader = Loader::Make(spec);
  ASSERT_TRUE(loader.ok()) << loader.status().message();
  std::map<std::string, int> seen;
  while (true) {
    Result<std::optional<Batch>> next = (*loader)->Next();
    ASSERT_TRUE(next.ok()) << next.status().message();
    if (!next->has_value()) break;
    const Batch& batch = **next;
    const Tensor* index = batch.Find("index");
    const Tensor* a = batch.Find("a");
    const Tensor* b = batch.Find("b");
    const Tensor* lengths = batch.Find("b_lengths");
    const Tensor* copy = batch.Find("copy");
    ASSERT_TRUE(index && a && b && lengths && copy);
    const auto source = std::find_if(batch.strings.begin(), batch.strings.end(),
                                     [](const Batch::Strings& s) { return s.name == "source"; });
    ASSERT_NE(source, batch.strings.end());
    const int64_t rows = index->shape().front();
    ASSERT_EQ(lengths->shape().front(), rows);  // one entry per sample, present or not
    int64_t at = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = index->data<int64_t>()[r];
      const std::string& entry = source->rows[static_cast<size_t>(r)].at(0);
      ++seen[entry];
      EXPECT_EQ(copy->data<int64_t>()[r], i);  // the shared op ran on both
      const int32_t n = lengths->data<int32_t>()[r];
      if (entry == "A") {
        EXPECT_LT(i, 20);
        EXPECT_EQ(a->data<int64_t>()[r], i + 1);
        EXPECT_EQ(n, 0) << "an A sample has no rows of B's field";
      } else {
        EXPECT_GE(i, 20);
        EXPECT_EQ(a->data<int64_t>()[r], 0) << "a B sample's row of A's field is zeros";
        ASSERT_EQ(n, i % 3);
        for (int32_t k = 0; k < n; ++k) EXPECT_EQ(b->data<int64_t>()[at + k], i);
      }
      at += n;
    }
    EXPECT_EQ(at, b->shape().front());
  }
  EXPECT_EQ(seen["A"], 20);
  EXPECT_EQ(seen["B"], 20);
  EXPECT_EQ(*made, 1);
  // Each entry's ops are reported under its name; the shared op once per entry.
  std::set<std::pair<std::string, std::string>> ops;
  for (const OpMetrics& op : (*loader)->engine_metrics().ops) {
    ops.emplace(op.entry, op.name);
    EXPECT_EQ(op.items, 40) << op.name;
  }
  EXPECT_EQ(ops, (std::set<std::pair<std::string, std::string>>{
                     {"A", "absent: b"}, {"A", "test.a"}, {"A", "test.copy"},
                     {"B", "absent: a"}, {"B", "test.b"}, {"B", "test.copy"}}));
}

}  // namespace
}  // namespace mix_ops_test
}  // namespace headrace
