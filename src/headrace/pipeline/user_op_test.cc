// UserOpSpec: an operator given as code (the Python bindings' `headrace.ops.map`).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "headrace/pipeline/config.h"
#include "headrace/pipeline/plan.h"

namespace headrace {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class WriteIndexOp : public Op {
 public:
  explicit WriteIndexOp(int field) : field_(field) {}
  std::string_view name() const override { return "test.write_index"; }
  Status Run(SampleContext& ctx) const override {
    *reinterpret_cast<int64_t*>(ctx.rows[field_]) = ctx.sample->index;
    return Status::Ok();
  }

 private:
  int field_;
};

UserOpSpec WriteIndexSpec(int* made_with_field) {
  UserOpSpec op;
  op.name = "test.write_index";
  op.fields = {FieldSpec{"copy", DType::kI64, {1}}};
  op.make = [made_with_field](const UserOpBinding& at) -> Result<std::unique_ptr<Op>> {
    *made_with_field = at.first_row;
    return std::unique_ptr<Op>(std::make_unique<WriteIndexOp>(at.first_row));
  };
  return op;
}

TEST(UserOpSpec, PlansItsFieldsWhereItStands) {
  int made_with = -1;
  PipelineSpec spec;
  spec.source.manifest = "m.jsonl";
  spec.ops = {WriteIndexSpec(&made_with)};
  ASSERT_TRUE(ValidatePipelineSpec(spec).ok());
  auto storage = MakeLocalStorage();
  Result<PipelinePlan> plan = PlanPipeline(spec, *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(made_with, 0);
  ASSERT_EQ(plan->fields.size(), 1u);
  EXPECT_EQ(plan->fields[0].name, "copy");
  EXPECT_FALSE(plan->reads_media);
  EXPECT_EQ(OpSpecName(spec.ops[0]), "test.write_index");
}

TEST(UserOpSpec, FieldNamesAreUniqueAndIndexIsTheEngines) {
  int made_with = -1;
  PipelineSpec spec;
  spec.source.manifest = "m.jsonl";
  UserOpSpec shadow = WriteIndexSpec(&made_with);
  shadow.fields[0].name = "index";
  spec.ops = {shadow};
  auto storage = MakeLocalStorage();
  Result<PipelinePlan> plan = PlanPipeline(spec, *storage);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("ops[0].fields[0] (test.write_index, index)"));
  EXPECT_THAT(plan.status().message(), HasSubstr("'index' is the engine's own"));

  spec.ops = {WriteIndexSpec(&made_with), WriteIndexSpec(&made_with)};
  plan = PlanPipeline(spec, *storage);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(),
              HasSubstr("ops[1].fields[0] (test.write_index, copy) shape 1: writes the field "
                        "'copy', which ops[0].fields[0]"));
}

TEST(UserOpSpec, IsWrittenAsAPlaceholderThatTheParserRefuses) {
  int made_with = -1;
  PipelineSpec spec;
  spec.source.manifest = "m.jsonl";
  spec.ops = {WriteIndexSpec(&made_with)};
  const std::string yaml = PipelineSpecToYaml(spec);
  EXPECT_THAT(yaml, HasSubstr("user: {name: \"test.write_index\"}"));
  Result<PipelineSpec> parsed = ParsePipelineConfig(yaml);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("is code"));
  // The list of allowed op names in errors does not offer it.
  Result<PipelineSpec> unknown = ParsePipelineConfig("source: {manifest: m}\nops: [nope]\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), Not(HasSubstr("user")));
}

TEST(BatchOpSpec, IsWrittenByNameAsAPlaceholderThatTheParserRefuses) {
  PipelineSpec spec;
  spec.source.manifest = "m.jsonl";
  spec.ops = {TokenizeSpec{}};
  const std::string without = PipelineSpecToYaml(spec);
  EXPECT_THAT(without, Not(HasSubstr("batch_ops")));
  spec.batch_ops = {BatchOpSpec{"python.map_batch(f)", nullptr}};
  const std::string yaml = PipelineSpecToYaml(spec);
  EXPECT_THAT(yaml, HasSubstr("batch_ops:\n  - user: {name: \"python.map_batch(f)\"}"));
  EXPECT_NE(yaml, without);  // so fingerprints made from the text differ
  Result<PipelineSpec> parsed = ParsePipelineConfig(yaml);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("batch_ops: batch ops are code"));
}

TEST(UserOpSpec, WithoutAFactoryIsInvalid) {
  PipelineSpec spec;
  spec.source.manifest = "m.jsonl";
  UserOpSpec op;
  op.name = "python.map(f)";
  spec.ops = {op};
  const Status status = ValidatePipelineSpec(spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("ops[0].user.make"));
}

}  // namespace
}  // namespace headrace
