// Small pipelines shared by the pipeline folder's tests.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>

#include "headrace/ops/op.h"
#include "headrace/pipeline/spec.h"

namespace headrace::test {

// Writes each sample's dataset index into the field "copy".
class IndexOp final : public Op {
 public:
  std::string_view name() const override { return "test.index"; }
  Status Run(SampleContext& ctx) const override {
    *reinterpret_cast<int64_t*>(ctx.rows[0]) = ctx.sample->index;
    return Status::Ok();
  }
};

// A text-only pipeline over `samples` records whose only op is IndexOp.
inline PipelineSpec IndexPipeline(const std::filesystem::path& dir, int samples) {
  std::filesystem::create_directories(dir);
  std::ofstream manifest(dir / "m.jsonl");
  for (int i = 0; i < samples; ++i) {
    manifest << R"({"id": ")" << i << R"(", "conversations": [{"from": "human", "value": "hi"}]})"
             << "\n";
  }
  PipelineSpec spec;
  spec.source.manifest = (dir / "m.jsonl").string();
  spec.batch.size = 4;
  spec.epochs = std::nullopt;
  spec.execution.cpu_threads = 2;
  UserOpSpec op;
  op.name = "test.index";
  op.fields = {FieldSpec{"copy", DType::kI64, {1}}};
  op.make = [](const UserOpBinding&) -> Result<std::unique_ptr<Op>> {
    return std::unique_ptr<Op>(std::make_unique<IndexOp>());
  };
  spec.ops = {op};
  return spec;
}

}  // namespace headrace::test
