#include "headrace/exec/step_cost.h"

#include <gtest/gtest.h>

namespace headrace {
namespace {

StepCost Preset(std::string_view name) {
  Result<StepCostOptions> options = StepCostOptionsFor(name, {});
  EXPECT_TRUE(options.ok()) << options.status().ToString();
  Result<StepCost> cost = StepCost::Make(*options);
  EXPECT_TRUE(cost.ok()) << cost.status().ToString();
  return *cost;
}

TEST(StepCost, TokensCostTheirCount) {
  const StepCost cost = Preset("tokens");
  EXPECT_DOUBLE_EQ(cost.Of({.tokens = 300, .patches = {1024}}), 300);
}

TEST(StepCost, PresetsCountTheModelsLayersAndOutputHead) {
  // Qwen2-7B's and Qwen3-8B's published non-embedding counts, 6.5B and 6.95B, plus their
  // output heads (151,936 x 3,584 and x 4,096): 7.07B and 7.57B.
  EXPECT_NEAR(ModelPreset("qwen2_vl")->llm_params, 7.07e9, 0.05e9);
  EXPECT_NEAR(ModelPreset("qwen3_vl")->llm_params, 7.57e9, 0.05e9);
  EXPECT_NEAR(ModelPreset("qwen2_vl")->vision_params, 0.63e9, 0.05e9);
  EXPECT_FALSE(ModelPreset("llama").has_value());
}

TEST(StepCost, FlopsGrowWithTokensAttentionAndImages) {
  const StepCost cost = Preset("qwen2_vl");
  const double t = cost.Of({.tokens = 1000});
  EXPECT_DOUBLE_EQ(t, 3 * (2 * ModelPreset("qwen2_vl")->llm_params * 1000 +
                           28.0 * 2 * 1000 * 1000 * 3584));
  EXPECT_GT(cost.Of({.tokens = 8000}), 8 * t) << "attention is quadratic in the segment";
  EXPECT_GT(cost.Of({.tokens = 1000, .patches = {1024}}), t);
  // Two images of 512 patches cost less than one of 1024 (attention within each image).
  EXPECT_LT(cost.Of({.tokens = 1000, .patches = {512, 512}}),
            cost.Of({.tokens = 1000, .patches = {1024}}));
}

TEST(StepCost, WindowedVisionLayersGrowLinearlyInPatches) {
  const StepCost full = Preset("qwen2_vl");
  const StepCost windowed = Preset("qwen2_5_vl");
  const auto vision = [](const StepCost& c, int64_t p) {
    return c.Of({.tokens = 1, .patches = {p}}) - c.Of({.tokens = 1});
  };
  const double full_growth = vision(full, 16384) / vision(full, 4096);
  const double windowed_growth = vision(windowed, 16384) / vision(windowed, 4096);
  EXPECT_GT(full_growth, 6);  // attention dominates at 16k patches: towards 16x
  EXPECT_LT(windowed_growth, full_growth);
}

TEST(StepCost, NamesAndDimensionsAreChecked) {
  Result<StepCostOptions> unknown = StepCostOptionsFor("qwen9", {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("tokens, flops, qwen2_vl, qwen2_5_vl, qwen3_vl"),
            std::string::npos)
      << unknown.status().message();
  Result<StepCostOptions> flops = StepCostOptionsFor("flops", {.llm_params = 1e9});
  ASSERT_TRUE(flops.ok());
  Result<StepCost> made = StepCost::Make(*flops);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("llm_layers"), std::string::npos);
  Result<StepCostOptions> sized = StepCostOptionsFor("qwen3_vl", {.llm_layers = 64});
  ASSERT_TRUE(sized.ok());
  EXPECT_EQ(sized->model.llm_layers, 64) << "a given dimension replaces the preset's";
  EXPECT_EQ(sized->model.llm_hidden, 4096);
}

}  // namespace
}  // namespace headrace
