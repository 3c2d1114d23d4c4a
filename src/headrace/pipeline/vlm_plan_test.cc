// The Qwen-VL chain in the planner: image.smart_resize -> vision.patchify over a single
// image or a list's items, text.tokenize reading the grids back (grid_field). The fields'
// layouts, and the configuration errors that name both keys. The run itself, against
// transformers' processor: tests/python/test_vlm_processor.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "headrace/pipeline/config.h"
#include "headrace/pipeline/plan.h"

namespace headrace {
namespace vlm_plan_test {
namespace {

using ::testing::HasSubstr;

TokenizeSpec Tokenize(std::string grid_field = "image_grid_thw") {
  return TokenizeSpec{.model = "", .tokenizer = "tok/tokenizer.json",
                      .preset = VisionModel::kQwen2Vl, .grid_field = std::move(grid_field),
                      .max_length = 4096, .pad = false};
}

PipelineSpec Chain(std::vector<OpSpec> ops, int max_items) {
  PipelineSpec spec;
  spec.source.manifest = "m.jsonl";
  spec.source.fields = {
      SourceFieldSpec{.name = "images", .kind = FieldKind::kImage, .max_items = max_items},
      SourceFieldSpec{.name = "conversation", .kind = FieldKind::kConversation,
                      .key = "conversations"}};
  if (max_items == 0) spec.source.fields[0].name = "image";
  spec.ops = std::move(ops);
  return spec;
}

std::vector<OpSpec> ListOps(std::vector<OpSpec> tail = {}) {
  std::vector<OpSpec> ops = {
      DecodeSpec{.field = "images"},
      SmartResizeSpec{.preset = VisionModel::kQwen2Vl, .field = "images"},
      PatchifySpec{.preset = VisionModel::kQwen2Vl, .field = "images"}};
  for (OpSpec& op : tail) ops.push_back(std::move(op));
  return ops;
}

std::map<std::string, FieldSpec> FieldsOf(const PipelinePlan& plan) {
  std::map<std::string, FieldSpec> out;
  for (const FieldSpec& f : plan.fields) out[f.name] = f;
  return out;
}

TEST(VlmPlan, OverAListTheGridsAreTheItemsAndThePatchesAnEntryPerImage) {
  auto storage = MakeLocalStorage();
  Result<PipelinePlan> plan = PlanPipeline(Chain(ListOps(), 4), *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto fields = FieldsOf(*plan);
  EXPECT_EQ(fields["pixel_values"].layout, FieldLayout::kRagged);
  EXPECT_EQ(fields["pixel_values"].sample_shape, (std::vector<int64_t>{1176}));
  EXPECT_EQ(fields["pixel_values"].count_field, "images_count");
  EXPECT_EQ(fields["pixel_values_lengths"].layout, FieldLayout::kLengths);
  EXPECT_EQ(fields["image_grid_thw"].layout, FieldLayout::kItems);
  EXPECT_EQ(fields["image_grid_thw"].sample_shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(fields["image_grid_thw"].count_field, "images_count");
  ASSERT_TRUE(fields.count("images_count"));
  EXPECT_EQ(plan->chains.at(0).ops.at(0)->name(),
            "images[*]: image.decode, image.smart_resize, vision.patchify");

  // pad_items: the grids [max_items, 3] per sample; the patches stay concatenated.
  PipelineSpec padded = Chain(ListOps(), 4);
  padded.source.fields[0].pad_items = true;
  plan = PlanPipeline(padded, *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  fields = FieldsOf(*plan);
  EXPECT_EQ(fields["image_grid_thw"].layout, FieldLayout::kFixed);
  EXPECT_EQ(fields["image_grid_thw"].sample_shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(fields["pixel_values"].layout, FieldLayout::kRagged);

  // A single image: one grid per sample, [samples, 3].
  plan = PlanPipeline(Chain({DecodeSpec{}, SmartResizeSpec{.preset = VisionModel::kQwen2Vl},
                             PatchifySpec{.preset = VisionModel::kQwen2Vl}},
                            0),
                      *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  fields = FieldsOf(*plan);
  EXPECT_EQ(fields["image_grid_thw"].layout, FieldLayout::kFixed);
  EXPECT_EQ(fields["image_grid_thw"].sample_shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(fields["pixel_values"].count_field, "");
}

TEST(VlmPlan, TokenizeReadsTheGridsOfAnEarlierPatchify) {
  EXPECT_TRUE(ValidatePipelineSpec(Chain(ListOps({Tokenize()}), 4)).ok())
      << ValidatePipelineSpec(Chain(ListOps({Tokenize()}), 4)).ToString();
  // Nobody before it writes the field.
  std::vector<OpSpec> first = ListOps();
  first.insert(first.begin(), Tokenize());
  EXPECT_THAT(ValidatePipelineSpec(Chain(first, 4)).message(),
              HasSubstr("ops[0].text.tokenize: reads the batch field 'image_grid_thw', which "
                        "no op before it writes (fields so far: none)"));
  EXPECT_THAT(ValidatePipelineSpec(Chain(ListOps({Tokenize("grids")}), 4)).message(),
              HasSubstr("'grids', which no op before it writes (fields so far: "
                        "'pixel_values', 'image_grid_thw')"));
  // Not a grid.
  EXPECT_THAT(ValidatePipelineSpec(Chain(ListOps({Tokenize("pixel_values")}), 4)).message(),
              HasSubstr("grid_field 'pixel_values' (from ops[2].vision.patchify) is not an i64 "
                        "(t, h, w) per image"));
}

TEST(VlmPlan, PatchOrMergeSizesThatDisagreeNameBothKeys) {
  TokenizeSpec tokenize = Tokenize();
  tokenize.merge_size = 4;
  EXPECT_THAT(ValidatePipelineSpec(Chain(ListOps({tokenize}), 4)).message(),
              HasSubstr("ops[3].text.tokenize.merge_size 4 disagrees with "
                        "ops[2].vision.patchify.merge_size 2 (preset qwen2_vl)"));
  tokenize = Tokenize();
  tokenize.preset = VisionModel::kQwen3Vl;
  EXPECT_THAT(ValidatePipelineSpec(Chain(ListOps({tokenize}), 4)).message(),
              HasSubstr("ops[3].text.tokenize.patch_size 16 (preset qwen3_vl) disagrees with "
                        "ops[2].vision.patchify.patch_size 14 (preset qwen2_vl)"));
  std::vector<OpSpec> ops = ListOps();
  std::get<PatchifySpec>(ops[2]).patch_size = 16;
  EXPECT_THAT(ValidatePipelineSpec(Chain(ops, 4)).message(),
              HasSubstr("ops[2].vision.patchify.patch_size 16 disagrees with "
                        "ops[1].image.smart_resize.patch_size 14 (preset qwen2_vl)"));
}

TEST(VlmPlan, AListOpAfterTheTokenizeThatReadsItsGridsIsRefused) {
  // The list's ops run together at the last of them: a second patchify of the list after
  // tokenize would move the first after it too.
  const std::vector<OpSpec> ops =
      ListOps({Tokenize(), PatchifySpec{.patch_size = 14, .field = "images",
                                        .output = "pv2", .grid_output = "grid2"}});
  EXPECT_THAT(ValidatePipelineSpec(Chain(ops, 4)).message(),
              HasSubstr("ops[3].text.tokenize: reads the batch field 'image_grid_thw', which "
                        "ops[2].vision.patchify writes per item of a list whose ops run "
                        "together at the last of them, ops[4].vision.patchify, after this op"));
}

TEST(VlmPlan, GridFieldAndPresetNeedATokenizerJson) {
  TokenizeSpec tokenize = Tokenize();
  tokenize.tokenizer.clear();
  tokenize.model = "m.model";
  EXPECT_THAT(ValidatePipelineSpec(Chain(ListOps({tokenize}), 4)).message(),
              HasSubstr("text.tokenize.preset: applies to tokenizer:"));
  tokenize = Tokenize();
  tokenize.image_tokens = 4;
  EXPECT_THAT(ValidatePipelineSpec(Chain(ListOps({tokenize}), 4)).message(),
              HasSubstr("text.tokenize.image_tokens: give image_tokens"));
}

// video.patchify over a list: every per-video field has one entry per item, counted by
// the list's videos_count (the ragged ones too: an entry per video, never per sample).
TEST(VlmPlan, OverAVideoListEveryPerVideoFieldIsAnEntryPerItem) {
  PipelineSpec spec;
  spec.source.manifest = "m.jsonl";
  spec.source.fields = {
      SourceFieldSpec{.name = "videos", .kind = FieldKind::kVideo, .max_items = 3},
      SourceFieldSpec{.name = "conversation", .kind = FieldKind::kConversation,
                      .key = "conversations"}};
  TokenizeSpec tokenize{.model = "", .tokenizer = "tok/tokenizer.json",
                        .preset = VisionModel::kQwen3Vl, .max_length = 4096, .pad = false};
  tokenize.video_grid_field = "video_grid_thw";
  tokenize.video_timestamps_field = "video_timestamps";
  spec.ops = {VideoPatchifySpec{.preset = VisionModel::kQwen3Vl, .field = "videos"}, tokenize};
  ASSERT_TRUE(ValidatePipelineSpec(spec).ok()) << ValidatePipelineSpec(spec).ToString();
  auto storage = MakeLocalStorage();
  spec.ops.pop_back();  // planning reads the tokenizer file; the fields are the patchify's
  Result<PipelinePlan> plan = PlanPipeline(spec, *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto fields = FieldsOf(*plan);
  EXPECT_EQ(fields["pixel_values_videos"].layout, FieldLayout::kRagged);
  EXPECT_EQ(fields["pixel_values_videos"].sample_shape, (std::vector<int64_t>{1536}));
  EXPECT_EQ(fields["pixel_values_videos"].count_field, "videos_count");
  EXPECT_EQ(fields["video_timestamps"].layout, FieldLayout::kRagged);
  EXPECT_EQ(fields["video_timestamps"].count_field, "videos_count");
  EXPECT_EQ(fields["video_grid_thw"].layout, FieldLayout::kItems);
  EXPECT_EQ(fields["video_grid_thw"].count_field, "videos_count");
  EXPECT_EQ(plan->chains.at(0).ops.at(0)->name(), "videos[*]: video.patchify");
  // A tokenize with qwen3_vl's videos and no timestamps is a config error naming the key.
  tokenize.video_timestamps_field.clear();
  spec.ops.push_back(tokenize);
  EXPECT_THAT(ValidatePipelineSpec(spec).message(),
              HasSubstr("text.tokenize.video_timestamps_field"));
}

}  // namespace
}  // namespace vlm_plan_test
}  // namespace headrace
