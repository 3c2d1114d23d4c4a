#include "headrace/pipeline/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace headrace {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

PipelineSpec ParseOk(std::string_view yaml, const std::vector<std::string>& overrides = {}) {
  Result<PipelineSpec> spec = ParsePipelineConfig(yaml, overrides);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : PipelineSpec{};
}

Status ParseError(std::string_view yaml, const std::vector<std::string>& overrides = {}) {
  Result<PipelineSpec> spec = ParsePipelineConfig(yaml, overrides);
  EXPECT_FALSE(spec.ok()) << yaml;
  if (spec.ok()) return Status::Ok();
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << spec.status().ToString();
  return spec.status();
}

constexpr std::string_view kMinimal = "source: {manifest: m.jsonl}\n";

// Every key set to a value other than its default.
constexpr std::string_view kFull = R"(
source:
  manifest: data/m.jsonl
  root: /media
  id_field: uid
  image_field: img
  conversations_field: messages
  role_field: role
  text_field: content
  records: lines
  allow_absolute_paths: true
seed: 18446744073709551615
epochs: 3
shuffle: false
batch: {size: 7, drop_last: true}
ops:
  - image.decode: {max_pixels: 1000000}
  - image.resize: {width: 300, height: 200, antialias: false}
  - image.random_resized_crop: {width: 160, height: 120, scale: [0.25, 0.75], ratio: [0.5, 2]}
  - image.flip: {p: 0.25}
  - image.center_crop: {width: 100, height: 90}
  - image.normalize: {mean: [0.5, 0.25, 0.125], std: [0.1, 0.2, 0.3], dtype: bf16, layout: hwc}
  - text.tokenize:
      model: tok.model
      max_length: 64
      pad: true
      pad_id: 3
      ignore_index: -1
      add_bos: false
      add_eos: false
      system_prefix: "S:"
      user_prefix: "U: "
      assistant_prefix: "A:\t"
      turn_end: "</s>\n"
execution: {cpu_threads: 5, io_threads: 6, io_inflight: 7, io_budget_bytes: 1MiB}
prefetch: {depth: 9}
memory: {budget_bytes: 2GiB}
errors: {policy: skip, on_bad_shard: fail, max_error_rate: 0.5, min_samples: 11, max_logged: 12}
trainer: {step_ms: 12.5}
)";

// Compares every field, so that a key the emitter or the parser forgot shows up.
void ExpectSpecEq(const PipelineSpec& a, const PipelineSpec& b) {
  EXPECT_EQ(a.source.manifest, b.source.manifest);
  EXPECT_EQ(a.source.root, b.source.root);
  EXPECT_EQ(a.source.id_field, b.source.id_field);
  EXPECT_EQ(a.source.image_field, b.source.image_field);
  EXPECT_EQ(a.source.conversations_field, b.source.conversations_field);
  EXPECT_EQ(a.source.role_field, b.source.role_field);
  EXPECT_EQ(a.source.text_field, b.source.text_field);
  EXPECT_EQ(a.source.allow_absolute_paths, b.source.allow_absolute_paths);
  EXPECT_EQ(a.source.records, b.source.records);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.epochs, b.epochs);
  EXPECT_EQ(a.shuffle, b.shuffle);
  EXPECT_EQ(a.batch.size, b.batch.size);
  EXPECT_EQ(a.batch.drop_last, b.batch.drop_last);
  ASSERT_EQ(a.ops.size(), b.ops.size());
  for (size_t i = 0; i < a.ops.size(); ++i) {
    SCOPED_TRACE("ops[" + std::to_string(i) + "]");
    ASSERT_EQ(a.ops[i].index(), b.ops[i].index());
    if (auto* x = std::get_if<DecodeSpec>(&a.ops[i])) {
      auto& y = std::get<DecodeSpec>(b.ops[i]);
      EXPECT_EQ(x->max_pixels, y.max_pixels);
    } else if (auto* x = std::get_if<ResizeSpec>(&a.ops[i])) {
      auto& y = std::get<ResizeSpec>(b.ops[i]);
      EXPECT_EQ(x->shorter_side, y.shorter_side);
      EXPECT_EQ(x->width, y.width);
      EXPECT_EQ(x->height, y.height);
      EXPECT_EQ(x->antialias, y.antialias);
    } else if (auto* x = std::get_if<CenterCropSpec>(&a.ops[i])) {
      auto& y = std::get<CenterCropSpec>(b.ops[i]);
      EXPECT_EQ(x->width, y.width);
      EXPECT_EQ(x->height, y.height);
    } else if (auto* x = std::get_if<RandomResizedCropSpec>(&a.ops[i])) {
      auto& y = std::get<RandomResizedCropSpec>(b.ops[i]);
      EXPECT_EQ(x->width, y.width);
      EXPECT_EQ(x->height, y.height);
      EXPECT_EQ(x->scale, y.scale);
      EXPECT_EQ(x->ratio, y.ratio);
    } else if (auto* x = std::get_if<FlipSpec>(&a.ops[i])) {
      EXPECT_EQ(x->p, std::get<FlipSpec>(b.ops[i]).p);
    } else if (auto* x = std::get_if<NormalizeSpec>(&a.ops[i])) {
      auto& y = std::get<NormalizeSpec>(b.ops[i]);
      EXPECT_EQ(x->mean, y.mean);
      EXPECT_EQ(x->std, y.std);
      EXPECT_EQ(x->dtype, y.dtype);
      EXPECT_EQ(x->layout, y.layout);
    } else if (auto* x = std::get_if<TokenizeSpec>(&a.ops[i])) {
      auto& y = std::get<TokenizeSpec>(b.ops[i]);
      EXPECT_EQ(x->model, y.model);
      EXPECT_EQ(x->max_length, y.max_length);
      EXPECT_EQ(x->pad, y.pad);
      EXPECT_EQ(x->pad_id, y.pad_id);
      EXPECT_EQ(x->ignore_index, y.ignore_index);
      EXPECT_EQ(x->add_bos, y.add_bos);
      EXPECT_EQ(x->add_eos, y.add_eos);
      EXPECT_EQ(x->system_prefix, y.system_prefix);
      EXPECT_EQ(x->user_prefix, y.user_prefix);
      EXPECT_EQ(x->assistant_prefix, y.assistant_prefix);
      EXPECT_EQ(x->turn_end, y.turn_end);
    } else {
      ADD_FAILURE() << "op type not compared";
    }
  }
  EXPECT_EQ(a.execution.cpu_threads, b.execution.cpu_threads);
  EXPECT_EQ(a.execution.io_threads, b.execution.io_threads);
  EXPECT_EQ(a.execution.io_inflight, b.execution.io_inflight);
  EXPECT_EQ(a.execution.io_budget_bytes, b.execution.io_budget_bytes);
  EXPECT_EQ(a.prefetch.depth, b.prefetch.depth);
  EXPECT_EQ(a.memory.budget_bytes, b.memory.budget_bytes);
  EXPECT_EQ(a.errors.policy, b.errors.policy);
  EXPECT_EQ(a.errors.on_bad_shard, b.errors.on_bad_shard);
  EXPECT_EQ(a.errors.max_error_rate, b.errors.max_error_rate);
  EXPECT_EQ(a.errors.min_samples, b.errors.min_samples);
  EXPECT_EQ(a.errors.max_logged, b.errors.max_logged);
  EXPECT_EQ(a.trainer.step_ms, b.trainer.step_ms);
}

// --- parsing ---------------------------------------------------------------------------

TEST(ParsePipelineConfig, MissingKeysKeepSpecDefaults) {
  PipelineSpec expected;
  expected.source.manifest = "m.jsonl";
  ExpectSpecEq(ParseOk(kMinimal), expected);
}

TEST(ParsePipelineConfig, ParsesEveryKey) {
  const PipelineSpec s = ParseOk(kFull);
  EXPECT_EQ(s.source.manifest, "data/m.jsonl");
  EXPECT_EQ(s.source.root, "/media");
  EXPECT_EQ(s.source.id_field, "uid");
  EXPECT_EQ(s.source.image_field, "img");
  EXPECT_EQ(s.source.conversations_field, "messages");
  EXPECT_EQ(s.source.role_field, "role");
  EXPECT_EQ(s.source.text_field, "content");
  EXPECT_TRUE(s.source.allow_absolute_paths);
  EXPECT_EQ(s.source.records, ManifestRecordsForm::kLines);
  EXPECT_EQ(s.seed, 18446744073709551615u);
  EXPECT_EQ(s.epochs, 3);
  EXPECT_FALSE(s.shuffle);
  EXPECT_EQ(s.batch.size, 7);
  EXPECT_TRUE(s.batch.drop_last);
  ASSERT_EQ(s.ops.size(), 7u);
  EXPECT_EQ(std::get<DecodeSpec>(s.ops[0]).max_pixels, 1000000);
  const auto& resize = std::get<ResizeSpec>(s.ops[1]);
  EXPECT_EQ(resize.shorter_side, 0);
  EXPECT_EQ(resize.width, 300);
  EXPECT_EQ(resize.height, 200);
  EXPECT_FALSE(resize.antialias);
  const auto& rrc = std::get<RandomResizedCropSpec>(s.ops[2]);
  EXPECT_EQ(rrc.width, 160);
  EXPECT_EQ(rrc.height, 120);
  EXPECT_EQ(rrc.scale, (std::array<double, 2>{0.25, 0.75}));
  EXPECT_EQ(rrc.ratio, (std::array<double, 2>{0.5, 2.0}));
  EXPECT_EQ(std::get<FlipSpec>(s.ops[3]).p, 0.25);
  const auto& crop = std::get<CenterCropSpec>(s.ops[4]);
  EXPECT_EQ(crop.width, 100);
  EXPECT_EQ(crop.height, 90);
  const auto& norm = std::get<NormalizeSpec>(s.ops[5]);
  EXPECT_EQ(norm.mean, (std::array<float, 3>{0.5f, 0.25f, 0.125f}));
  EXPECT_EQ(norm.std, (std::array<float, 3>{0.1f, 0.2f, 0.3f}));
  EXPECT_EQ(norm.dtype, DType::kBF16);
  EXPECT_EQ(norm.layout, Layout::kHWC);
  const auto& tok = std::get<TokenizeSpec>(s.ops[6]);
  EXPECT_EQ(tok.model, "tok.model");
  EXPECT_EQ(tok.max_length, 64);
  EXPECT_TRUE(tok.pad);
  EXPECT_EQ(tok.pad_id, 3);
  EXPECT_EQ(tok.ignore_index, -1);
  EXPECT_FALSE(tok.add_bos);
  EXPECT_FALSE(tok.add_eos);
  EXPECT_EQ(tok.system_prefix, "S:");
  EXPECT_EQ(tok.user_prefix, "U: ");
  EXPECT_EQ(tok.assistant_prefix, "A:\t");
  EXPECT_EQ(tok.turn_end, "</s>\n");
  EXPECT_EQ(s.execution.cpu_threads, 5);
  EXPECT_EQ(s.execution.io_threads, 6);
  EXPECT_EQ(s.execution.io_inflight, 7);
  EXPECT_EQ(s.execution.io_budget_bytes, 1 << 20);
  EXPECT_EQ(s.prefetch.depth, 9);
  EXPECT_EQ(s.memory.budget_bytes, int64_t{2} << 30);
  EXPECT_EQ(s.errors.policy, ErrorPolicy::kSkip);
  EXPECT_EQ(s.errors.on_bad_shard, BadShardPolicy::kFail);
  EXPECT_EQ(s.errors.max_error_rate, 0.5);
  EXPECT_EQ(s.errors.min_samples, 11);
  EXPECT_EQ(s.errors.max_logged, 12);
  EXPECT_EQ(s.trainer.step_ms, 12.5);
}

TEST(ParsePipelineConfig, OpsWithoutParams) {
  const PipelineSpec s = ParseOk(std::string(kMinimal) +
                                 "ops:\n"
                                 "  - image.decode\n"
                                 "  - image.flip: {}\n"
                                 "  - image.flip:\n"
                                 "  - image.resize: {shorter_side: 8}\n");
  ASSERT_EQ(s.ops.size(), 4u);
  EXPECT_EQ(std::get<DecodeSpec>(s.ops[0]).max_pixels, DecodeSpec{}.max_pixels);
  EXPECT_EQ(std::get<FlipSpec>(s.ops[1]).p, 0.5);
  EXPECT_EQ(std::get<FlipSpec>(s.ops[2]).p, 0.5);
  EXPECT_EQ(std::get<ResizeSpec>(s.ops[3]).shorter_side, 8);
}

TEST(ParsePipelineConfig, CropSizeMeansWidthAndHeight) {
  const PipelineSpec s = ParseOk(std::string(kMinimal) +
                                 "ops:\n"
                                 "  - image.decode\n"
                                 "  - image.center_crop: {size: 224}\n"
                                 "  - image.random_resized_crop: {size: 96}\n");
  const auto& crop = std::get<CenterCropSpec>(s.ops[1]);
  EXPECT_EQ(crop.width, 224);
  EXPECT_EQ(crop.height, 224);
  const auto& rrc = std::get<RandomResizedCropSpec>(s.ops[2]);
  EXPECT_EQ(rrc.width, 96);
  EXPECT_EQ(rrc.height, 96);
  EXPECT_EQ(rrc.scale, RandomResizedCropSpec{}.scale);

  Status st = ParseError(std::string(kMinimal) +
                         "ops: [image.decode, {image.center_crop: {size: 2, width: 3}}]\n");
  EXPECT_THAT(st.message(), HasSubstr("ops[1].image.center_crop.size"));
}

TEST(ParsePipelineConfig, AcceptsYamlBooleanSpellings) {
  EXPECT_FALSE(ParseOk(std::string(kMinimal) + "shuffle: False\n").shuffle);
  EXPECT_FALSE(ParseOk(std::string(kMinimal) + "shuffle: no\n").shuffle);
  EXPECT_TRUE(ParseOk(std::string(kMinimal) + "shuffle: on\n").shuffle);
}

TEST(ParsePipelineConfig, EmptyStringsAndNull) {
  const PipelineSpec s = ParseOk(std::string(kMinimal) + "batch:\n");
  EXPECT_EQ(s.batch.size, 32);
  EXPECT_EQ(ParseOk("source: {manifest: m, root: }").source.root, "");
}

struct ErrorCase {
  std::string yaml;  // appended to kMinimal
  std::vector<std::string> mentions;
};

TEST(ParsePipelineConfig, EpochsNullIsAnUnboundedRun) {
  EXPECT_EQ(ParseOk(kMinimal).epochs, 1);
  const PipelineSpec unbounded = ParseOk(std::string(kMinimal) + "epochs: null\n");
  EXPECT_FALSE(unbounded.epochs.has_value());
  EXPECT_FALSE(ParseOk(std::string(kMinimal) + "epochs: ~\n").epochs.has_value());
  EXPECT_FALSE(ParseOk(std::string(kMinimal), {"epochs=null"}).epochs.has_value());
  EXPECT_EQ(ParseOk(std::string(kMinimal) + "epochs: null\n", {"epochs=4"}).epochs, 4);
  // The canonical YAML keeps null, so the spec reads back the same.
  const std::string yaml = PipelineSpecToYaml(unbounded);
  EXPECT_NE(yaml.find("epochs: ~"), std::string::npos) << yaml;
  EXPECT_FALSE(ParseOk(yaml).epochs.has_value());
  Status zero = ParseError(std::string(kMinimal) + "epochs: 0\n");
  EXPECT_NE(zero.message().find("epochs: must be in [1, "), std::string::npos) << zero.ToString();
}

TEST(ParsePipelineConfig, SchemaErrorsNameTheKeyAndWhatIsAllowed) {
  const ErrorCase cases[] = {
      {"sorce: {}\n", {"sorce: unknown key", "source, seed, epochs"}},
      {"batch: {sise: 3}\n", {"batch.sise: unknown key", "size, drop_last"}},
      {"batch: {size: abc}\n", {"batch.size: expected an integer", "'abc'"}},
      {"batch: {size: 1.5}\n", {"batch.size: expected an integer"}},
      {"batch: {size: 99999999999999999999}\n", {"batch.size", "out of range"}},
      {"batch: 3\n", {"batch: expected a map", "size, drop_last"}},
      {"shuffle: maybe\n", {"shuffle: expected true or false", "'maybe'"}},
      {"seed: -1\n", {"seed: expected a non-negative integer"}},
      {"epochs: [1]\n", {"epochs: expected an integer, got a list"}},
      {"trainer: {step_ms: fast}\n", {"trainer.step_ms: expected a finite number"}},
      {"trainer: {step_ms: .nan}\n", {"trainer.step_ms: expected a finite number"}},
      {"errors: {policy: retry}\n", {"errors.policy: unknown value 'retry'", "allowed: skip"}},
      {"errors: {on_bad_shard: ignore}\n",
       {"errors.on_bad_shard: unknown value 'ignore'", "skip", "fail"}},
      {"memory: {budget_bytes: 1 GiBs}\n", {"memory.budget_bytes", "KiB, MiB, GiB"}},
      {"ops: {image.decode: {}}\n", {"ops: expected a list"}},
      {"ops: [image.blur]\n",
       {"ops[0]: unknown op 'image.blur'", "image.decode, image.resize", "text.tokenize"}},
      {"ops: [image.decode, {image.resize: {shorter_side: 1}, image.flip: {}}]\n",
       {"ops[1]: expected one op", "2 keys"}},
      {"ops: [image.decode, {image.resize: {shortside: 1}}]\n",
       {"ops[1].image.resize.shortside: unknown key",
        "for image.resize: shorter_side, width, height, antialias"}},
      {"ops: [image.decode, {image.resize: 256}]\n",
       {"ops[1].image.resize: expected a map", "shorter_side"}},
      {"ops: [image.decode, {image.normalize: {dtype: f64}}]\n",
       {"ops[1].image.normalize.dtype: unknown value 'f64'", "f32, f16, bf16"}},
      {"ops: [image.decode, {image.normalize: {layout: nchw}}]\n",
       {"ops[1].image.normalize.layout", "chw, hwc"}},
      {"ops: [image.decode, {image.normalize: {mean: [1, 2]}}]\n",
       {"ops[1].image.normalize.mean: expected a list of 3 numbers"}},
      {"ops: [image.decode, {image.normalize: {std: [1, x, 2]}}]\n",
       {"ops[1].image.normalize.std[1]: expected a finite number"}},
      {"batch: {size: 1, size: 2}\n", {"batch.size: duplicate key"}},
      {"ops: [{video.decode: {seek: fast}}]\n",
       {"ops[0].video.decode.seek: unknown value 'fast'", "exact, keyframe"}},
      {"ops: [{video.decode: {skip_loop_filter: nonref}}]\n",
       {"ops[0].video.decode.skip_loop_filter: expected true or false"}},
      {"ops: [{video.decode: {read: partial}}]\n",
       {"ops[0].video.decode.read: unknown value 'partial'", "whole, ranges"}},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.yaml);
    Status st = ParseError(std::string(kMinimal) + c.yaml);
    for (const std::string& m : c.mentions) EXPECT_THAT(st.message(), HasSubstr(m));
  }
}

TEST(ParsePipelineConfig, RealParametersThatBecomeIntegersAreBoundedNamingTheKey) {
  // Each was accepted and overflowed an int64_t (undefined behaviour) where it became a
  // count: seconds x the rate, i / fps in the stream's time base, a span / a cell size.
  const ErrorCase cases[] = {
      {"ops:\n  - audio.decode: {max_seconds: 1e300}\n",
       {"ops[0].audio.decode.max_seconds: must be in (0, 86400]", "(got 1e+300)"}},
      {"ops:\n  - audio.decode: {max_seconds: 0}\n",
       {"ops[0].audio.decode.max_seconds: must be in (0, 86400]"}},
      {"ops:\n  - video.decode: {fps: 1e-300}\n",
       {"ops[0].video.decode.fps: must be in [0.001, 1000], or 0 (spread over the clip)"}},
      {"ops:\n  - video.decode: {fps: 1e300}\n", {"ops[0].video.decode.fps: must be in"}},
      {"ops:\n  - pointcloud.voxelize: {voxel_size: [1e-300, 1, 1]}\n",
       {"ops[0].pointcloud.voxelize.voxel_size: gives ", "e+301 cells along x"}},
  };
  for (const ErrorCase& c : cases) {
    Status st = ParseError(std::string(kMinimal) + c.yaml);
    for (const std::string& m : c.mentions) EXPECT_THAT(st.message(), HasSubstr(m)) << c.yaml;
  }
  for (const char* ok : {"ops:\n  - audio.decode: {max_seconds: 86400, field: image}\n",
                         "ops:\n  - video.decode: {fps: 0, field: image}\n"}) {
    auto spec = ParsePipelineConfig(std::string(kMinimal) + ok, {});
    EXPECT_TRUE(spec.ok()) << ok << spec.status().ToString();
  }
}

TEST(ParsePipelineConfig, SourceShuffleScopeIsWindowOrGlobalForShardsOnly) {
  EXPECT_EQ(ParseOk("source: {shards: 's-{0..1}.tar'}\n").source.shuffle_scope,
            ShuffleScope::kWindow);
  const PipelineSpec global = ParseOk("source: {shards: 's-{0..1}.tar', shuffle_scope: global}\n");
  EXPECT_EQ(global.source.shuffle_scope, ShuffleScope::kGlobal);
  EXPECT_THAT(PipelineSpecToYaml(global), HasSubstr("shuffle_scope: global"));
  Status unknown = ParseError("source: {shards: 's-{0..1}.tar', shuffle_scope: all}\n");
  EXPECT_THAT(unknown.message(), HasSubstr("source.shuffle_scope: unknown value 'all'"));
  EXPECT_THAT(unknown.message(), HasSubstr("window, global"));
  Status manifest = ParseError("source: {manifest: m.jsonl, shuffle_scope: global}\n");
  EXPECT_THAT(manifest.message(), HasSubstr("source.shuffle_scope: applies to tar shards"));
  Status entry = ParseError(
      "source: {mix: [{name: a, manifest: m.jsonl, shuffle_scope: global}]}\n");
  EXPECT_THAT(entry.message(), HasSubstr("source.mix[0].shuffle_scope: applies to tar shards"));
}

TEST(ParsePipelineConfig, SourceRecordsIsAutoParsedOrLinesForAManifestOnly) {
  EXPECT_EQ(ParseOk(kMinimal).source.records, ManifestRecordsForm::kAuto);
  EXPECT_EQ(ParseOk("source: {manifest: m.jsonl, records: parsed}\n").source.records,
            ManifestRecordsForm::kParsed);
  EXPECT_EQ(ParseOk(kMinimal, {"source.records=lines"}).source.records,
            ManifestRecordsForm::kLines);
  Status unknown = ParseError("source: {manifest: m.jsonl, records: lazy}\n");
  EXPECT_THAT(unknown.message(), HasSubstr("source.records: unknown value 'lazy'"));
  EXPECT_THAT(unknown.message(), HasSubstr("auto, parsed, lines"));
  Status shards = ParseError("source: {shards: 's-{0..1}.tar', records: lines}\n");
  EXPECT_THAT(shards.message(), HasSubstr("source.records: applies to a JSONL manifest"));
}

TEST(ParsePipelineConfig, ErrorsGiveTheLine) {
  Status st = ParseError(std::string(kMinimal) + "batch:\n  size: abc\n");
  EXPECT_THAT(st.message(), AllOf(HasSubstr("batch.size"), HasSubstr("(line 3)")));
  // Validation errors too.
  st = ParseError(std::string(kMinimal) + "epochs: 1\nbatch:\n  drop_last: true\n  size: 0\n");
  EXPECT_THAT(st.message(),
              AllOf(HasSubstr("batch.size: must be in [1, 1048576]"), HasSubstr("(line 5)")));
}

TEST(ParsePipelineConfig, SyntaxErrorGivesLineNumber) {
  Status st = ParseError("source:\n  manifest: m\nbatch: {size: 3\nepochs: 2\n");
  EXPECT_THAT(st.message(), HasSubstr("YAML syntax error at line"));
  st = ParseError("source:\n  manifest: m\n   bad: indent\n");
  EXPECT_THAT(st.message(), HasSubstr("line 3"));
}

TEST(ParsePipelineConfig, AFileOfSeveralDocumentsIsRefusedSayingWhereTheSecondIs) {
  // yaml-cpp's Load reads the first document: the run was not the one in the second.
  Status st = ParseError(std::string(kMinimal) + "---\nbatch: {size: 3}\n");
  EXPECT_THAT(st.message(), AllOf(HasSubstr("holds 2 documents"),
                                  HasSubstr("a second one at line 3")));
  EXPECT_THAT(ParseError(std::string(kMinimal) + "---\n---\n---\n").message(),
              HasSubstr("holds 4 documents"));
  // One document, with its markers, is a config.
  EXPECT_TRUE(ParsePipelineConfig("---\n" + std::string(kMinimal) + "...\n", {}).ok());
  auto op = ParseOpConfig("image.resize", "{shorter_side: 64}\n---\n{shorter_side: 8}\n");
  EXPECT_EQ(op.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(op.status().message(), AllOf(HasSubstr("image.resize: "),
                                           HasSubstr("holds 2 documents")));
}

// yaml-cpp 0.7's LoadAll loops forever, allocating, on these (found by the config fuzz
// target): a syntax error naming where, in bounded time.
TEST(ParsePipelineConfig, TextOnWhichYamlCppLoopsIsASyntaxError) {
  for (const std::string text : {std::string(",ourc? \xe5.ha"), std::string(",\n"),
                                 std::string(kMinimal) + "---\n,\n"}) {
    const Status st = ParseError(text);
    EXPECT_THAT(st.message(), HasSubstr("YAML syntax error at line")) << text;
  }
  EXPECT_THAT(ParseError(std::string(kMinimal) + "---\n,\n").message(), HasSubstr("line 3"));
}

TEST(ParsePipelineConfig, TopLevelMustBeAMap) {
  EXPECT_THAT(ParseError("- a\n- b\n").message(), HasSubstr("expected a map"));
  EXPECT_THAT(ParseError("").message(), HasSubstr("source.manifest"));
}

// --- validation ------------------------------------------------------------------------

PipelineSpec ValidSpec() {
  PipelineSpec s;
  s.source.manifest = "m.jsonl";
  s.ops = {DecodeSpec{},    ResizeSpec{.shorter_side = 256}, CenterCropSpec{224, 224}, FlipSpec{},
           NormalizeSpec{}, TokenizeSpec{.model = "t.model"}};
  return s;
}

struct ValidationCase {
  std::string name;
  void (*mutate)(PipelineSpec&);
  std::vector<std::string> mentions;
};

TEST(ValidatePipelineSpec, AcceptsAValidSpec) {
  EXPECT_TRUE(ValidatePipelineSpec(ValidSpec()).ok());
}

TEST(ValidatePipelineSpec, ErrorsNameTheKeyAndTheRange) {
  const ValidationCase cases[] = {
      {"manifest", [](PipelineSpec& s) { s.source.manifest.clear(); }, {"source.manifest"}},
      {"id_field", [](PipelineSpec& s) { s.source.id_field.clear(); }, {"source.id_field"}},
      {"epochs",
       [](PipelineSpec& s) { s.epochs = 0; },
       {"epochs: must be in [1, 1000000]", "got 0"}},
      {"batch",
       [](PipelineSpec& s) { s.batch.size = -2; },
       {"batch.size: must be in [1, 1048576]"}},
      {"cpu_threads",
       [](PipelineSpec& s) { s.execution.cpu_threads = -1; },
       {"execution.cpu_threads: must be in [0, 1024]"}},
      {"io_inflight",
       [](PipelineSpec& s) { s.execution.io_inflight = -1; },
       {"execution.io_inflight: must be in [0, 16384]"}},
      {"io_budget",
       [](PipelineSpec& s) { s.execution.io_budget_bytes = int64_t{2} << 30; },
       {"execution.io_budget_bytes", "memory.budget_bytes"}},
      {"prefetch",
       [](PipelineSpec& s) { s.prefetch.depth = 0; },
       {"prefetch.depth: must be in [1, 1024]"}},
      {"memory", [](PipelineSpec& s) { s.memory.budget_bytes = 0; }, {"memory.budget_bytes"}},
      {"error_rate",
       [](PipelineSpec& s) { s.errors.max_error_rate = 1.5; },
       {"errors.max_error_rate: must be in [0, 1]", "1.5"}},
      {"error_rate_nan",
       [](PipelineSpec& s) { s.errors.max_error_rate = std::nan(""); },
       {"errors.max_error_rate"}},
      {"policy",
       [](PipelineSpec& s) { s.errors.policy = static_cast<ErrorPolicy>(7); },
       {"errors.policy", "skip"}},
      {"step_ms", [](PipelineSpec& s) { s.trainer.step_ms = -1; }, {"trainer.step_ms"}},
      {"max_object_bytes",
       [](PipelineSpec& s) { s.storage.max_object_bytes = -1; },
       {"storage.max_object_bytes: must be >= 0", "got -1"}},
      {"max_pixels",
       [](PipelineSpec& s) { std::get<DecodeSpec>(s.ops[0]).max_pixels = 0; },
       {"ops[0].image.decode.max_pixels: must be >= 1"}},
      {"resize_negative",
       [](PipelineSpec& s) { std::get<ResizeSpec>(s.ops[1]).shorter_side = -5; },
       {"ops[1].image.resize.shorter_side: must be in [0, 16384]", "got -5"}},
      {"resize_none",
       [](PipelineSpec& s) { std::get<ResizeSpec>(s.ops[1]) = ResizeSpec{}; },
       {"ops[1].image.resize.shorter_side", "width and height"}},
      {"resize_both",
       [](PipelineSpec& s) { std::get<ResizeSpec>(s.ops[1]).width = 3; },
       {"ops[1].image.resize: set shorter_side, or width and height, not both"}},
      {"resize_half",
       [](PipelineSpec& s) { std::get<ResizeSpec>(s.ops[1]) = ResizeSpec{.width = 3}; },
       {"ops[1].image.resize.height: must be > 0"}},
      {"crop",
       [](PipelineSpec& s) { std::get<CenterCropSpec>(s.ops[2]).height = 0; },
       {"ops[2].image.center_crop.height: must be in [1, 16384]"}},
      {"flip",
       [](PipelineSpec& s) { std::get<FlipSpec>(s.ops[3]).p = 2; },
       {"ops[3].image.flip.p: must be in [0, 1]"}},
      {"std",
       [](PipelineSpec& s) { std::get<NormalizeSpec>(s.ops[4]).std[2] = 0; },
       {"ops[4].image.normalize.std[2]: must be finite and non-zero"}},
      {"dtype",
       [](PipelineSpec& s) { std::get<NormalizeSpec>(s.ops[4]).dtype = DType::kU8; },
       {"ops[4].image.normalize.dtype", "'u8'", "f32, f16, bf16"}},
      {"layout",
       [](PipelineSpec& s) { std::get<NormalizeSpec>(s.ops[4]).layout = static_cast<Layout>(9); },
       {"ops[4].image.normalize.layout", "chw, hwc"}},
      {"model",
       [](PipelineSpec& s) { std::get<TokenizeSpec>(s.ops[5]).model.clear(); },
       {"ops[5].text.tokenize.model: must not be empty"}},
      {"max_length",
       [](PipelineSpec& s) { std::get<TokenizeSpec>(s.ops[5]).max_length = 0; },
       {"ops[5].text.tokenize.max_length: must be in [1, 1048576]"}},
      {"pad_id",
       [](PipelineSpec& s) { std::get<TokenizeSpec>(s.ops[5]).pad_id = -2; },
       {"ops[5].text.tokenize.pad_id: must be >= -1"}},
      {"rrc_scale",
       [](PipelineSpec& s) {
         s.ops[2] = RandomResizedCropSpec{.width = 8, .height = 8, .scale = {0.9, 0.1}};
       },
       {"ops[2].image.random_resized_crop.scale", "0 < min <= max <= 1"}},
      {"rrc_ratio",
       [](PipelineSpec& s) {
         s.ops[2] = RandomResizedCropSpec{.width = 8, .height = 8, .ratio = {0, 1}};
       },
       {"ops[2].image.random_resized_crop.ratio"}},
      {"rrc_size",
       [](PipelineSpec& s) { s.ops[2] = RandomResizedCropSpec{}; },
       {"ops[2].image.random_resized_crop.width: must be in [1, 16384]"}},
      // Order of ops: what each op reads must exist, with the kind it reads.
      {"no_decode",
       [](PipelineSpec& s) { s.ops.erase(s.ops.begin()); },
       {"ops[0].image.resize: reads 'image' as an image, but at this point 'image' is "
        "encoded bytes (from the source field 'image'): add image.decode before it"}},
      {"two_decodes",
       [](PipelineSpec& s) { s.ops.insert(s.ops.begin() + 2, DecodeSpec{}); },
       {"ops[2].image.decode: reads 'image' as encoded bytes, but at this point 'image' is an "
        "image (from ops[1].image.resize)"}},
      {"two_normalizes",
       [](PipelineSpec& s) { s.ops.push_back(NormalizeSpec{}); },
       {"ops[6].image.normalize: writes the field 'image', which ops[4].image.normalize writes "
        "too"}},
      {"two_tokenizes",
       [](PipelineSpec& s) { s.ops.push_back(TokenizeSpec{.model = "x"}); },
       {"ops[6].text.tokenize: writes the field 'input_ids', which ops[5].text.tokenize writes "
        "too"}},
      {"no_such_value",
       [](PipelineSpec& s) { std::get<FlipSpec>(s.ops[3]).field = "depth"; },
       {"ops[3].image.flip: reads 'depth' as an image, but no value 'depth' exists at this "
        "point (values: 'image' (an image), 'conversation' (a conversation))"}},
      {"size_not_fixed",
       [](PipelineSpec& s) { s.ops.erase(s.ops.begin() + 2); },
       {"ops[3].image.normalize: the image size is not fixed here (ops[1].image.resize"
        ".shorter_side 256 (keeps each image's aspect ratio))"}},
  };
  for (const ValidationCase& c : cases) {
    SCOPED_TRACE(c.name);
    PipelineSpec spec = ValidSpec();
    c.mutate(spec);
    Status st = ValidatePipelineSpec(spec);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    for (const std::string& m : c.mentions) EXPECT_THAT(st.message(), HasSubstr(m));
  }
}

// Values past these bounds used to pass and then crash (a thread pool of 40000 threads
// aborts on std::system_error; 16 x 2e9 reads in flight overflows) or fail every sample.
TEST(ValidatePipelineSpec, ValuesAboveTheirBoundsNameTheKeyAndTheRange) {
  const ValidationCase cases[] = {
      {"cpu_threads",
       [](PipelineSpec& s) { s.execution.cpu_threads = 40000; },
       {"execution.cpu_threads: must be in [0, 1024]", "got 40000"}},
      {"cpu_threads_2e9",
       [](PipelineSpec& s) { s.execution.cpu_threads = 2'000'000'000; },
       {"execution.cpu_threads: must be in [0, 1024]"}},
      {"io_threads",
       [](PipelineSpec& s) { s.execution.io_threads = 5000; },
       {"execution.io_threads: must be in [0, 1024]"}},
      {"io_inflight",
       [](PipelineSpec& s) { s.execution.io_inflight = 1 << 30; },
       {"execution.io_inflight: must be in [0, 16384]"}},
      {"prefetch",
       [](PipelineSpec& s) { s.prefetch.depth = 1 << 30; },
       {"prefetch.depth: must be in [1, 1024]"}},
      {"epochs",
       [](PipelineSpec& s) { s.epochs = int64_t{1} << 62; },
       {"epochs: must be in [1, 1000000]"}},
      {"batch",
       [](PipelineSpec& s) { s.batch.size = int64_t{1} << 40; },
       {"batch.size: must be in [1, 1048576]"}},
      {"shorter_side",
       [](PipelineSpec& s) { std::get<ResizeSpec>(s.ops[1]).shorter_side = 1'000'000; },
       {"ops[1].image.resize.shorter_side: must be in [0, 16384]", "got 1000000"}},
      {"resize_width",
       [](PipelineSpec& s) {
         std::get<ResizeSpec>(s.ops[1]) = ResizeSpec{.width = 1 << 30, .height = 8};
       },
       {"ops[1].image.resize.width: must be in [0, 16384]"}},
      {"crop",
       [](PipelineSpec& s) { std::get<CenterCropSpec>(s.ops[2]) = {1 << 30, 1 << 30}; },
       {"ops[2].image.center_crop.width: must be in [1, 16384]", "got 1073741824"}},
      {"rrc",
       [](PipelineSpec& s) { s.ops[2] = RandomResizedCropSpec{.width = 8, .height = 20000}; },
       {"ops[2].image.random_resized_crop.height: must be in [1, 16384]"}},
      {"max_length",
       [](PipelineSpec& s) { std::get<TokenizeSpec>(s.ops[5]).max_length = 1 << 30; },
       {"ops[5].text.tokenize.max_length: must be in [1, 1048576]"}},
      {"step_ms",
       [](PipelineSpec& s) { s.trainer.step_ms = 1e300; },
       {"trainer.step_ms: must be in [0, 3600000]"}},
  };
  for (const ValidationCase& c : cases) {
    SCOPED_TRACE(c.name);
    PipelineSpec spec = ValidSpec();
    c.mutate(spec);
    Status st = ValidatePipelineSpec(spec);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    for (const std::string& m : c.mentions) EXPECT_THAT(st.message(), HasSubstr(m));
  }
  // The bounds themselves are allowed.
  PipelineSpec spec = ValidSpec();
  spec.execution.cpu_threads = 1024;
  spec.execution.io_inflight = 16384;
  std::get<ResizeSpec>(spec.ops[1]).shorter_side = 16384;
  std::get<CenterCropSpec>(spec.ops[2]) = {16384, 16384};
  EXPECT_TRUE(ValidatePipelineSpec(spec).ok()) << ValidatePipelineSpec(spec).ToString();
}

TEST(ValidatePipelineSpec, TextOnlyAndEmptyOpListsAreValid) {
  PipelineSpec s = ValidSpec();
  s.ops = {TokenizeSpec{.model = "t"}};
  EXPECT_TRUE(ValidatePipelineSpec(s).ok());
  s.ops.clear();
  EXPECT_TRUE(ValidatePipelineSpec(s).ok());
}

// --- overrides -------------------------------------------------------------------------

constexpr std::string_view kWithOps = R"(source: {manifest: m.jsonl}
ops:
  - image.decode
  - image.resize: {shorter_side: 256}
  - image.center_crop: {size: 224}
  - image.flip
  - image.normalize: {dtype: f32}
)";

TEST(Overrides, SetScalarsAnywhere) {
  const PipelineSpec s =
      ParseOk(kWithOps, {"batch.size=64", "execution.cpu_threads=1", "trainer.step_ms=12.5",
                         "seed=3", "epochs=2", "source.manifest=/x/m.jsonl",
                         "memory.budget_bytes=256MiB", "shuffle=false"});
  EXPECT_EQ(s.batch.size, 64);
  EXPECT_EQ(s.execution.cpu_threads, 1);
  EXPECT_EQ(s.trainer.step_ms, 12.5);
  EXPECT_EQ(s.seed, 3u);
  EXPECT_EQ(s.epochs, 2);
  EXPECT_EQ(s.source.manifest, "/x/m.jsonl");
  EXPECT_EQ(s.memory.budget_bytes, 256 << 20);
  EXPECT_FALSE(s.shuffle);
}

TEST(Overrides, LaterOverridesWin) {
  EXPECT_EQ(ParseOk(kWithOps, {"batch.size=2", "batch.size=5"}).batch.size, 5);
}

TEST(Overrides, UriValue) {
  EXPECT_EQ(ParseOk(kWithOps, {"source.manifest=s3://bucket/a/m.jsonl"}).source.manifest,
            "s3://bucket/a/m.jsonl");
}

TEST(Overrides, IndexIntoOps) {
  PipelineSpec s = ParseOk(kWithOps, {"ops.1.image.resize.shorter_side=320"});
  EXPECT_EQ(std::get<ResizeSpec>(s.ops[1]).shorter_side, 320);
  s = ParseOk(kWithOps, {"ops[1].image.resize.shorter_side=128"});
  EXPECT_EQ(std::get<ResizeSpec>(s.ops[1]).shorter_side, 128);
  s = ParseOk(kWithOps, {"ops.4.image.normalize.mean=[0.5,0.5,0.5]"});
  EXPECT_EQ(std::get<NormalizeSpec>(s.ops[4]).mean, (std::array<float, 3>{0.5f, 0.5f, 0.5f}));
  // An op written without params gets them.
  s = ParseOk(kWithOps, {"ops.3.image.flip.p=0.125", "ops.0.image.decode.max_pixels=100"});
  EXPECT_EQ(std::get<FlipSpec>(s.ops[3]).p, 0.125);
  EXPECT_EQ(std::get<DecodeSpec>(s.ops[0]).max_pixels, 100);
  // Params as a whole.
  s = ParseOk(kWithOps, {"ops.2.image.center_crop={width: 10, height: 20}"});
  EXPECT_EQ(std::get<CenterCropSpec>(s.ops[2]).width, 10);
  EXPECT_EQ(std::get<CenterCropSpec>(s.ops[2]).height, 20);
}

TEST(Overrides, ReplaceAndAppendOps) {
  PipelineSpec s = ParseOk(kWithOps, {"ops.3={image.random_resized_crop: {size: 64}}",
                                      "ops.5=text.tokenize", "ops.5.text.tokenize.model=t.model"});
  ASSERT_EQ(s.ops.size(), 6u);
  EXPECT_EQ(std::get<RandomResizedCropSpec>(s.ops[3]).width, 64);
  EXPECT_EQ(std::get<TokenizeSpec>(s.ops[5]).model, "t.model");
  // Into a config without ops.
  s = ParseOk(kMinimal, {"ops.0=image.decode", "ops.1={text.tokenize: {model: x}}"});
  ASSERT_EQ(s.ops.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<DecodeSpec>(s.ops[0]));
}

TEST(Overrides, CreateMissingSections) {
  const PipelineSpec s = ParseOk("", {"source.manifest=m", "trainer.step_ms=3"});
  EXPECT_EQ(s.source.manifest, "m");
  EXPECT_EQ(s.trainer.step_ms, 3);
}

TEST(Overrides, UnknownKeyFailsLikeInTheFile) {
  Status st = ParseError(kWithOps, {"batch.sise=3"});
  EXPECT_THAT(st.message(),
              AllOf(HasSubstr("batch.sise: unknown key"), HasSubstr("size, drop_last"),
                    HasSubstr("set by override 'batch.sise=3'")));
  st = ParseError(kWithOps, {"ops.1.image.resize.shortest=3"});
  EXPECT_THAT(st.message(), HasSubstr("ops[1].image.resize.shortest: unknown key"));
  st = ParseError(kWithOps, {"bogus=1"});
  EXPECT_THAT(st.message(), HasSubstr("bogus: unknown key"));
}

TEST(Overrides, BadValuesNameTheOverride) {
  Status st = ParseError(kWithOps, {"batch.size=abc"});
  EXPECT_THAT(st.message(), AllOf(HasSubstr("batch.size: expected an integer"),
                                  HasSubstr("override 'batch.size=abc'")));
  st = ParseError(kWithOps, {"batch.size=0"});
  EXPECT_THAT(st.message(),
              AllOf(HasSubstr("batch.size: must be in [1, 1048576]"),
                    HasSubstr("override 'batch.size=0'")));
}

TEST(Overrides, OutOfRangeValuesNameTheKeyTheRangeAndTheOverride) {
  Status st = ParseError(kWithOps, {"execution.cpu_threads=40000"});
  EXPECT_THAT(st.message(), AllOf(HasSubstr("execution.cpu_threads: must be in [0, 1024]"),
                                  HasSubstr("override 'execution.cpu_threads=40000'")));
  st = ParseError(kWithOps, {"ops.2.image.center_crop.size=1073741824"});
  EXPECT_THAT(st.message(), AllOf(HasSubstr("ops[2].image.center_crop.width: must be in [1, "
                                            "16384] (got 1073741824)"),
                                  HasSubstr("override 'ops.2.image.center_crop.size=")));
}

TEST(Overrides, MalformedOverridesFail) {
  const std::pair<std::string, std::string> cases[] = {
      {"batch.size", "expected key.path=value"},
      {"=3", "empty key"},
      {"batch..size=3", "empty key segment"},
      {"ops[x].image.flip.p=1", "bad index"},
      {"ops.9.image.flip.p=1", "has 5 items"},
      {"ops.5.image.flip.p=1", "set it whole to append"},
      {"ops.1.image.crop.size=3", "ops[1] is 'image.resize'"},
      {"batch.size.x=1", "'batch.size' is a single value"},
      {"batch.0=1", "is a map, not a list"},
      {"ops.image=1", "expected an index"},
      {"batch.size=[1", "not valid YAML"},
  };
  for (const auto& [o, why] : cases) {
    SCOPED_TRACE(o);
    Status st = ParseError(std::string(kWithOps) + "batch: {size: 4}\n", {o});
    EXPECT_THAT(st.message(), AllOf(HasSubstr("override '" + o + "'"), HasSubstr(why)));
  }
}

TEST(Overrides, AKeyWithTooManyPartsFailsWithoutRecursing) {
  std::string key = "batch";
  for (int i = 0; i < 20000; ++i) key += ".x";
  Status st = ParseError(kWithOps, {key + "=1"});
  EXPECT_THAT(st.message(), AllOf(HasSubstr("override 'batch.x.x"),
                                  HasSubstr("the key has 20001 parts, at most 32 are allowed")));
  EXPECT_LT(st.message().size(), 300u);  // the key is not repeated whole
}

// --- byte sizes ------------------------------------------------------------------------

TEST(ParseByteSize, UnitsAndErrors) {
  const std::pair<std::string, int64_t> good[] = {
      {"0", 0},
      {"1073741824", int64_t{1} << 30},
      {"100B", 100},
      {"2KB", 2000},
      {"3 MB", 3'000'000},
      {"1GB", 1'000'000'000},
      {"1TB", 1'000'000'000'000},
      {"1KiB", 1024},
      {"512MiB", int64_t{512} << 20},
      {"1GiB", int64_t{1} << 30},
      {"2TiB", int64_t{2} << 40},
      {"1.5GiB", int64_t{3} << 29},
      {"0.5KB", 500},
      {"4gib", int64_t{4} << 30},
  };
  for (const auto& [text, bytes] : good) {
    Result<int64_t> r = ParseByteSize(text);
    ASSERT_TRUE(r.ok()) << text << ": " << r.status().ToString();
    EXPECT_EQ(*r, bytes) << text;
  }
  for (std::string text :
       {"", "GiB", "1 GiBs", "1.GiB", "-1GiB", "1e9", "x", "9999999TiB", "99999999999999999999"}) {
    EXPECT_FALSE(ParseByteSize(text).ok()) << text;
  }
  // Through the config, integers and strings.
  EXPECT_EQ(ParseOk(std::string(kMinimal) + "memory: {budget_bytes: 1048576}").memory.budget_bytes,
            1 << 20);
  EXPECT_EQ(ParseOk(std::string(kMinimal) + "memory: {budget_bytes: 64 MiB}").memory.budget_bytes,
            64 << 20);
  const PipelineSpec io = ParseOk(std::string(kMinimal) + "execution: {io_budget_bytes: 1KB}");
  EXPECT_EQ(io.execution.io_budget_bytes, 1000);
}

// --- round trip ------------------------------------------------------------------------

TEST(PipelineSpecToYaml, RoundTripsEveryKey) {
  const PipelineSpec full = ParseOk(kFull);
  const std::string yaml = PipelineSpecToYaml(full);
  const PipelineSpec back = ParseOk(yaml);
  ExpectSpecEq(full, back);
  EXPECT_EQ(PipelineSpecToYaml(back), yaml);
}

TEST(PipelineSpecToYaml, RoundTripsDefaultsAndAwkwardValues) {
  PipelineSpec s = ValidSpec();
  s.source.manifest = "path with spaces/and: colon #hash 'q' \"dq\" ünï.jsonl";
  s.source.root = "";
  s.trainer.step_ms = 0.1 + 0.2;  // not representable briefly
  s.errors.max_error_rate = 1.0 / 3.0;
  auto& norm = std::get<NormalizeSpec>(s.ops[4]);
  norm.mean = {0.1f, 1.0f / 3.0f, 1e-7f};
  auto& tok = std::get<TokenizeSpec>(s.ops[5]);
  tok.system_prefix = "";
  tok.turn_end = "\n\n";
  tok.user_prefix = "true";  // a string that looks like a bool
  tok.assistant_prefix = "123";
  s.seed = ~uint64_t{0};
  const std::string yaml = PipelineSpecToYaml(s);
  const PipelineSpec back = ParseOk(yaml);
  ExpectSpecEq(s, back);
  EXPECT_EQ(PipelineSpecToYaml(back), yaml);
  // Every key is written.
  for (std::string_view key :
       {"source:", "manifest:", "allow_absolute_paths:", "seed:", "epochs:", "shuffle:",
        "drop_last:", "image.decode:", "max_pixels:", "antialias:", "layout:", "turn_end:",
        "io_budget_bytes:", "depth:", "budget_bytes:", "policy:", "max_logged:", "step_ms:"}) {
    EXPECT_THAT(yaml, HasSubstr(key));
  }
}

TEST(ParsePipelineConfig, StorageSizeLimitAndSymlinkKeys) {
  const PipelineSpec defaults = ParseOk(kMinimal);
  EXPECT_EQ(defaults.storage.max_object_bytes, 0);  // memory.budget_bytes (pipeline/prepared.cc)
  EXPECT_TRUE(defaults.storage.follow_symlinks);
  const PipelineSpec s = ParseOk(std::string(kMinimal) +
                                 "storage: {max_object_bytes: 2MiB, follow_symlinks: false}");
  EXPECT_EQ(s.storage.max_object_bytes, 2 << 20);
  EXPECT_FALSE(s.storage.follow_symlinks);
  const PipelineSpec back = ParseOk(PipelineSpecToYaml(s));
  EXPECT_EQ(back.storage.max_object_bytes, 2 << 20);
  EXPECT_FALSE(back.storage.follow_symlinks);
}

TEST(PipelineSpecToYaml, IsStableForEqualSpecs) {
  EXPECT_EQ(PipelineSpecToYaml(ValidSpec()), PipelineSpecToYaml(ValidSpec()));
  EXPECT_EQ(PipelineSpecToYaml(ParseOk(kWithOps)),
            PipelineSpecToYaml(ParseOk(std::string(kWithOps) + "batch: {size: 32}\n")));
}

// --- files -----------------------------------------------------------------------------

std::string TempDir() {
  const char* env = std::getenv("HEADRACE_TEST_TMP");
  std::filesystem::path dir = env ? env : std::filesystem::temp_directory_path();
  dir /= "config_test";
  std::filesystem::create_directories(dir);
  return dir.string();
}

TEST(LoadPipelineConfig, ReadsTheFileAndAppliesOverrides) {
  const std::string path = TempDir() + "/good.yaml";
  std::ofstream(path) << kWithOps;
  Result<PipelineSpec> s = LoadPipelineConfig(path, {"batch.size=3"});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->batch.size, 3);
  EXPECT_EQ(s->source.manifest, "m.jsonl");  // kept as written
}

TEST(LoadPipelineConfig, ErrorsNameTheFile) {
  const std::string path = TempDir() + "/bad.yaml";
  std::ofstream(path) << kMinimal << "batch: {size: -1}\n";
  Result<PipelineSpec> s = LoadPipelineConfig(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), AllOf(HasSubstr(path), HasSubstr("batch.size")));
}

TEST(LoadPipelineConfig, MissingFileIsNotFound) {
  Result<PipelineSpec> s = LoadPipelineConfig(TempDir() + "/missing.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(), HasSubstr("missing.yaml"));
}

TEST(LoadPipelineConfig, ADirectoryFifoOrDeviceIsAConfigErrorNamingThePath) {
  const std::string fifo = TempDir() + "/fifo.yaml";
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opening a FIFO used to wait for a writer forever; /dev/zero used to be read forever.
  const std::pair<std::string, std::string> cases[] = {
      {TempDir(), "is a directory"}, {fifo, "is a FIFO"}, {"/dev/zero", "is a character device"}};
  for (const auto& [path, what] : cases) {
    SCOPED_TRACE(path);
    Result<PipelineSpec> s = LoadPipelineConfig(path);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), AllOf(HasSubstr(path), HasSubstr(what)));
  }
  std::filesystem::remove(fifo);
}

TEST(LoadPipelineConfig, AFileLargerThanTheLimitIsAConfigError) {
  const std::string path = TempDir() + "/huge.yaml";
  {
    std::ofstream out(path);
    out << kMinimal;
    out << std::string(kMaxConfigBytes, '#');  // a comment, valid YAML but too long
  }
  Result<PipelineSpec> s = LoadPipelineConfig(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), AllOf(HasSubstr(path), HasSubstr("larger than 16 MiB")));
  std::filesystem::remove(path);
}

// --- source.fields -----------------------------------------------------------------------

TEST(SourceFields, ParseValidateAndRoundTrip) {
  const PipelineSpec s = ParseOk(
      "source:\n"
      "  manifest: m.jsonl\n"
      "  fields:\n"
      "    - {name: image, kind: image, required: true}\n"
      "    - {name: views, kind: image, key: more, max_items: 4}\n"
      "    - {name: label, kind: int}\n"
      "    - {name: conversation, kind: conversation, key: conversations}\n");
  ASSERT_EQ(s.source.fields.size(), 4u);
  EXPECT_EQ(s.source.fields[1].name, "views");
  EXPECT_EQ(s.source.fields[1].kind, FieldKind::kImage);
  EXPECT_EQ(s.source.fields[1].key, "more");
  EXPECT_EQ(s.source.fields[1].max_items, 4);
  EXPECT_TRUE(s.source.fields[0].required);
  EXPECT_EQ(s.source.fields[2].kind, FieldKind::kInt);
  EXPECT_TRUE(ValidatePipelineSpec(s).ok());
  const PipelineSpec again = ParseOk(PipelineSpecToYaml(s));
  ASSERT_EQ(again.source.fields.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(again.source.fields[i].name, s.source.fields[i].name);
    EXPECT_EQ(again.source.fields[i].kind, s.source.fields[i].kind);
    EXPECT_EQ(again.source.fields[i].key, s.source.fields[i].key);
    EXPECT_EQ(again.source.fields[i].max_items, s.source.fields[i].max_items);
    EXPECT_EQ(again.source.fields[i].required, s.source.fields[i].required);
  }
  const Status kind = ParseError("source: {manifest: m, fields: [{name: x, kind: jpeg}]}\n");
  EXPECT_THAT(kind.message(), HasSubstr("source.fields[0].kind: unknown value 'jpeg'"));
  EXPECT_THAT(kind.message(), HasSubstr("image, video, audio, pointcloud, bytes, text"));
  const Status key = ParseError("source: {manifest: m, fields: [{name: x, knd: int}]}\n");
  EXPECT_THAT(key.message(), HasSubstr("source.fields[0].knd: unknown key"));
  EXPECT_THAT(ParseError("source: {manifest: m, fields: {name: x}}\n").message(),
              HasSubstr("source.fields: expected a list"));
}

TEST(SourceFields, ValidationNamesTheField) {
  const auto check = [](std::vector<SourceFieldSpec> fields, std::string_view expected) {
    PipelineSpec spec;
    spec.source.manifest = "m.jsonl";
    spec.source.fields = std::move(fields);
    const Status st = ValidatePipelineSpec(spec);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << expected;
    EXPECT_THAT(st.message(), HasSubstr(std::string(expected)));
  };
  check({{"a", FieldKind::kInt}, {"a", FieldKind::kText}},
        "source.fields[1].name: 'a' is also source.fields[0].name");
  check({{"index", FieldKind::kInt}}, "source.fields[0].name: 'index' is the engine's own");
  check({{"id", FieldKind::kString}}, "source.fields[0].name: 'id' is the engine's own");
  check({{"", FieldKind::kInt}}, "source.fields[0].name");
  check({{"c", FieldKind::kConversation}, {"d", FieldKind::kConversation}},
        "source.fields[1].kind: only one field may be a conversation");
  check({{"v", FieldKind::kImage, "", 5000}}, "source.fields[0].max_items: must be in [0, 4096]");
  check({{"v", FieldKind::kImage, "images,,image", 4}},
        "source.fields[0].key: 'images,,image' has an empty key: a JSON key, or several "
        "separated by commas");
  check({{"v", FieldKind::kImage, "images,"}}, "source.fields[0].key: 'images,' has an empty key");
  check({{"v", FieldKind::kImage, "image,images,image"}},
        "source.fields[0].key: 'image,images,image' names 'image' twice");
}

TEST(SourceFields, AManifestFieldMayReadOneOfSeveralKeys) {
  PipelineSpec spec;
  spec.source.manifest = "m.jsonl";
  spec.source.fields = {{"images", FieldKind::kImage, "images,image", 4},
                        {"conversation", FieldKind::kConversation, "conversations"}};
  EXPECT_TRUE(ValidatePipelineSpec(spec).ok()) << ValidatePipelineSpec(spec).ToString();
}

}  // namespace
}  // namespace headrace

namespace headrace {
namespace {

constexpr std::string_view kParquetOps = R"(
ops:
  - text.tokenize: {model: m.model, max_length: 8}
)";

TEST(ConfigParquet, ParquetIsASourceOfItsOwnExclusiveWithTheOthers) {
  const PipelineSpec s =
      ParseOk("source: {parquet: \"d/part-{0..3}.parquet\", shuffle_window: 4}" +
              std::string(kParquetOps));
  EXPECT_EQ(s.source.parquet, "d/part-{0..3}.parquet");
  EXPECT_EQ(s.source.shuffle_window, 4);
  const Status both =
      ParseError("source: {parquet: a.parquet, manifest: m.jsonl}" + std::string(kParquetOps));
  EXPECT_THAT(both.message(), AllOf(HasSubstr("source.parquet"), HasSubstr("exclusive")));
  EXPECT_THAT(ParseError("source: {parquet: a.parquet, shuffle_window: 0}" +
                         std::string(kParquetOps))
                  .message(),
              HasSubstr("source.shuffle_window"));
}

TEST(ConfigMaterialized, MaterializedIsASourceWithoutOpsOrFields) {
  const PipelineSpec s = ParseOk("source: {materialized: out/vqa-mat}\nbatch: {size: 4}");
  EXPECT_EQ(s.source.materialized, "out/vqa-mat");
  EXPECT_EQ(ParseOk(PipelineSpecToYaml(s)).source.materialized, "out/vqa-mat");
  EXPECT_THAT(ParseError("source: {materialized: a, manifest: m.jsonl}").message(),
              AllOf(::testing::StartsWith("source.materialized: "), HasSubstr("exclusive")));
  EXPECT_THAT(ParseError("source: {materialized: a}\nops: [image.decode]").message(),
              AllOf(::testing::StartsWith("ops: "), HasSubstr("ops[0].image.decode"),
                    HasSubstr("must be empty")));
  EXPECT_THAT(ParseError("source: {materialized: a, fields: [{name: x, kind: int}]}").message(),
              ::testing::StartsWith("source.fields: "));
}

}  // namespace
}  // namespace headrace

namespace headrace {
namespace {

TEST(ConfigBalance, ACostNameAndTheModelsDimensionsParseAndReachTheRun) {
  Result<PipelineSpec> spec = ParsePipelineConfig(
      "source: {manifest: m.jsonl}\n"
      "batch: {size: 4, balance: {cost: qwen3_vl, llm_layers: 48}}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->batch.balance.enabled());
  Result<StepCostOptions> cost = StepCostOptionsOf(spec->batch.balance);
  ASSERT_TRUE(cost.ok()) << cost.status().ToString();
  EXPECT_EQ(cost->kind, CostKind::kFlops);
  EXPECT_EQ(cost->model.llm_layers, 48);
  EXPECT_EQ(cost->model.llm_hidden, 4096) << "the preset's, where none is given";
  EXPECT_FALSE(ParsePipelineConfig("source: {manifest: m.jsonl}\n")->batch.balance.enabled());
}

TEST(ConfigBalance, AnUnknownCostOrAFlopsCostWithoutDimensionsIsRefusedNamingTheKey) {
  Result<PipelineSpec> unknown = ParsePipelineConfig(
      "source: {manifest: m.jsonl}\nbatch: {balance: {cost: qwen4}}\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("batch.balance.cost"), std::string::npos)
      << unknown.status().message();
  EXPECT_NE(unknown.status().message().find("tokens, flops, qwen2_vl"), std::string::npos);
  Result<PipelineSpec> flops = ParsePipelineConfig(
      "source: {manifest: m.jsonl}\nbatch: {balance: {cost: flops, llm_params: 1.0e9}}\n");
  ASSERT_FALSE(flops.ok());
  EXPECT_NE(flops.status().message().find("llm_layers"), std::string::npos)
      << flops.status().message();
  Result<PipelineSpec> key = ParsePipelineConfig(
      "source: {manifest: m.jsonl}\nbatch: {balance: {cots: tokens}}\n");
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find("batch.balance.cots"), std::string::npos)
      << key.status().message();
}

TEST(ConfigBalance, APackIndexNeedsPackingAndIsTheBalancesFileWhereBothAreGiven) {
  Result<PipelineSpec> spec = ParsePipelineConfig(
      "source: {manifest: m.jsonl}\n"
      "batch: {pack: {seq_len: 512, index: s.idx}, balance: {cost: tokens, index: s.idx}}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->batch.pack.index, "s.idx");
  Result<PipelineSpec> unpacked = ParsePipelineConfig(
      "source: {manifest: m.jsonl}\nbatch: {pack: {index: s.idx}}\n");
  ASSERT_FALSE(unpacked.ok());
  EXPECT_NE(unpacked.status().message().find("batch.pack.index: applies with batch.pack.seq_len"),
            std::string::npos)
      << unpacked.status().message();
  Result<PipelineSpec> two = ParsePipelineConfig(
      "source: {manifest: m.jsonl}\n"
      "batch: {max_tokens: 512, pack: {index: a.idx}, balance: {cost: tokens, index: b.idx}}\n");
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("batch.pack.index: names another file"), std::string::npos)
      << two.status().message();
}

TEST(ConfigBalance, EveryRankNamesKindsOfMediaAndNeedsACost) {
  Result<PipelineSpec> spec = ParsePipelineConfig(
      "source: {manifest: m.jsonl}\nbatch: {balance: {cost: tokens, every_rank: 'image, video'}}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  Result<uint32_t> bits = EveryRankOf(spec->batch.balance);
  ASSERT_TRUE(bits.ok());
  EXPECT_EQ(*bits, ModalityBit(FieldKind::kImage) | ModalityBit(FieldKind::kVideo));
  Result<PipelineSpec> text = ParsePipelineConfig(
      "source: {manifest: m.jsonl}\nbatch: {balance: {cost: tokens, every_rank: text}}\n");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("batch.balance.every_rank: 'text' is not a kind of media"),
            std::string::npos)
      << text.status().message();
  Result<PipelineSpec> no_cost = ParsePipelineConfig(
      "source: {manifest: m.jsonl}\nbatch: {balance: {every_rank: image}}\n");
  ASSERT_FALSE(no_cost.ok());
  EXPECT_NE(no_cost.status().message().find("batch.balance.cost"), std::string::npos)
      << no_cost.status().message();
}

}  // namespace
}  // namespace headrace
