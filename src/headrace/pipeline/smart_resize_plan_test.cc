// image.smart_resize in the planner: it declares no Hint, so image.decode before it gets
// no size target (no DCT scaling, libjpeg's smooth chroma upsampling): the reference
// resizes from full-resolution pixels. tests/python/test_vlm_reference.py checks the
// pixels of a large JPEG through the same plan against PIL.
#include <gtest/gtest.h>

#include "headrace/pipeline/plan.h"

namespace headrace {
namespace smart_resize_plan_test {
namespace {

PipelineSpec Chain(std::vector<OpSpec> ops) {
  PipelineSpec spec;
  spec.source.manifest = "m.jsonl";
  spec.ops = std::move(ops);
  return spec;
}

const DecodeOp& Decode(const PipelinePlan& plan) {
  const auto* decode = dynamic_cast<const DecodeOp*>(plan.chains.at(0).ops.at(0).get());
  EXPECT_NE(decode, nullptr);
  return *decode;
}

TEST(SmartResizePlan, DecodeGetsNoSizeHintThroughSmartResize) {
  auto storage = MakeLocalStorage();
  // The resize after smart_resize would ask decode for 56x56 if the hint went through.
  Result<PipelinePlan> plan = PlanPipeline(
      Chain({DecodeSpec{}, SmartResizeSpec{.preset = VisionModel::kQwen2Vl},
             ResizeSpec{.width = 56, .height = 56}, NormalizeSpec{}}),
      *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_FALSE(Decode(*plan).target().any());
  // Without smart_resize the same resize does hint decode (the fast path elsewhere).
  Result<PipelinePlan> plain = PlanPipeline(
      Chain({DecodeSpec{}, ResizeSpec{.width = 56, .height = 56}, NormalizeSpec{}}), *storage);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_TRUE(Decode(*plain).target().any());
}

TEST(SmartResizePlan, TheImageSizeVariesAndNamesTheKey) {
  auto storage = MakeLocalStorage();
  // normalize needs a fixed size: the message names smart_resize as what makes it vary.
  Result<PipelinePlan> plan = PlanPipeline(
      Chain({DecodeSpec{}, SmartResizeSpec{.preset = VisionModel::kQwen3Vl}, NormalizeSpec{}}),
      *storage);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("ops[1].image.smart_resize.max_pixels 16777216"),
            std::string::npos)
      << plan.status().message();
}

}  // namespace
}  // namespace smart_resize_plan_test
}  // namespace headrace
