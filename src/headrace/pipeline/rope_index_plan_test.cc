// vision.rope_index in the planner: it reads text.tokenize's input_ids and
// vision.patchify's grids back, and a missing field, a field of another shape or a merge
// size that disagrees with the grids' writer is a configuration error naming the keys.
// The positions themselves: ops/vision/rope_index_test.cc, and against transformers'
// get_rope_index on real pipelines, tests/python/test_mrope.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "headrace/pipeline/config.h"
#include "headrace/pipeline/plan.h"

namespace headrace {
namespace rope_index_plan_test {
namespace {

using ::testing::HasSubstr;

PipelineSpec Chain(std::vector<OpSpec> tail, bool pad = false) {
  PipelineSpec spec;
  spec.source.manifest = "m.jsonl";
  spec.source.fields = {
      SourceFieldSpec{.name = "images", .kind = FieldKind::kImage, .max_items = 4},
      SourceFieldSpec{.name = "conversation", .kind = FieldKind::kConversation,
                      .key = "conversations"}};
  spec.ops = {DecodeSpec{.field = "images"},
              SmartResizeSpec{.preset = VisionModel::kQwen2Vl, .field = "images"},
              PatchifySpec{.preset = VisionModel::kQwen2Vl, .field = "images"},
              TokenizeSpec{.model = "", .tokenizer = "tok/tokenizer.json",
                           .preset = VisionModel::kQwen2Vl, .grid_field = "image_grid_thw",
                           .max_length = 4096, .pad = pad}};
  for (OpSpec& op : tail) spec.ops.push_back(std::move(op));
  return spec;
}

std::string Error(const PipelineSpec& spec) { return ValidatePipelineSpec(spec).message(); }

TEST(RopeIndexPlan, ReadsTheTokensAndGridsOfEarlierOps) {
  for (bool pad : {false, true}) {
    EXPECT_TRUE(ValidatePipelineSpec(Chain({RopeIndexSpec{.preset = VisionModel::kQwen2Vl}}, pad)).ok())
        << Error(Chain({RopeIndexSpec{.preset = VisionModel::kQwen2Vl}}, pad));
  }
  // Before the tokenizer: no input_ids yet.
  PipelineSpec early = Chain({});
  early.ops.insert(early.ops.begin() + 3, RopeIndexSpec{});
  EXPECT_THAT(Error(early), HasSubstr("ops[3].vision.rope_index: reads the batch field "
                                      "'input_ids', which no op before it writes"));
  EXPECT_THAT(Error(Chain({RopeIndexSpec{.grid_field = "grids"}})),
              HasSubstr("ops[4].vision.rope_index: reads the batch field 'grids', which no op "
                        "before it writes"));
  // The video grids are read only when named, and must exist then.
  EXPECT_THAT(Error(Chain({RopeIndexSpec{.video_grid_field = "video_grid_thw"}})),
              HasSubstr("reads the batch field 'video_grid_thw', which no op before it writes"));
}

TEST(RopeIndexPlan, FieldsOfAnotherShapeAreRefused) {
  EXPECT_THAT(Error(Chain({RopeIndexSpec{.grid_field = "pixel_values"}})),
              HasSubstr("grid_field 'pixel_values' (from ops[2].vision.patchify) is not an i64 "
                        "(t, h, w) per image"));
  EXPECT_THAT(Error(Chain({RopeIndexSpec{.input_ids = "image_grid_thw"}})),
              HasSubstr("input_ids 'image_grid_thw' (from ops[2].vision.patchify) is not i64 "
                        "tokens per sample"));
  EXPECT_THAT(Error(Chain({RopeIndexSpec{.attention_mask = ""}}, true)),
              HasSubstr("attention_mask: needed with a padded input_ids ('input_ids' is [4096] "
                        "per sample)"));
}

TEST(RopeIndexPlan, AMergeSizeThatDisagreesWithTheGridsWriterNamesBothKeys) {
  EXPECT_THAT(Error(Chain({RopeIndexSpec{.merge_size = 4}})),
              HasSubstr("ops[4].vision.rope_index.merge_size 4 disagrees with "
                        "ops[2].vision.patchify.merge_size 2 (preset qwen2_vl)"));
  PipelineSpec spec = Chain({RopeIndexSpec{.preset = VisionModel::kQwen2_5Vl}});
  std::get<PatchifySpec>(spec.ops[2]).merge_size = 1;
  std::get<SmartResizeSpec>(spec.ops[1]).merge_size = 1;
  std::get<TokenizeSpec>(spec.ops[3]).merge_size = 1;
  EXPECT_THAT(Error(spec), HasSubstr("ops[4].vision.rope_index.merge_size 2 (preset qwen2_5_vl) "
                                     "disagrees with ops[2].vision.patchify.merge_size 1"));
}

}  // namespace
}  // namespace rope_index_plan_test
}  // namespace headrace
