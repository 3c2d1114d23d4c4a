#include "headrace/pipeline/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace headrace {
namespace {

using ::testing::HasSubstr;

// Serves objects from memory and records what was asked of it.
class MapStorage final : public Storage {
 public:
  void ReadAsync(std::string uri, ReadCallback done) override {
    {
      std::lock_guard lock(mu_);
      asked_.push_back(uri);
    }
    auto it = objects_.find(uri);
    if (it == objects_.end()) return done(Status::NotFound("no such object: " + uri));
    if (it->second == "<io error>") return done(Status::IoError("GET " + uri + ": HTTP 503"));
    done(*Buffer::CopyOf(it->second.data(), it->second.size()));
  }
  std::string_view name() const override { return "map"; }

  std::map<std::string, std::string> objects_;
  std::mutex mu_;
  std::vector<std::string> asked_;  // guarded by mu_
};

PipelineSpec TokenizeOnly(const std::string& model) {
  PipelineSpec spec;
  spec.source.manifest = "s3://b/m.jsonl";
  TokenizeSpec tokenize;
  tokenize.model = model;
  spec.ops = {tokenize};
  return spec;
}

TEST(PlanPipeline, ReadsTheTokenizerModelThroughTheStorage) {
  MapStorage storage;
  storage.objects_["s3://b/tok.model"] = "not a model proto";
  Result<PipelinePlan> plan = PlanPipeline(TokenizeOnly("s3://b/tok.model"), storage);
  EXPECT_EQ(storage.asked_, std::vector<std::string>{"s3://b/tok.model"});
  // The bytes arrived and were parsed: SentencePiece rejects them, naming key and URI.
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("ops[0]"));
  EXPECT_THAT(plan.status().message(), HasSubstr("text.tokenize.model"));
  EXPECT_THAT(plan.status().message(), HasSubstr("s3://b/tok.model"));
}

TEST(PlanPipeline, AMissingModelIsAConfigErrorNamingTheKeyAndUri) {
  MapStorage storage;
  Result<PipelinePlan> plan = PlanPipeline(TokenizeOnly("s3://b/none.model"), storage);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("ops[0]: text.tokenize.model: cannot read 's3://b/none.model'"));
}

TEST(PlanPipeline, AModelThatCannotBeFetchedKeepsItsIoError) {
  MapStorage storage;
  storage.objects_["https://h/tok.model"] = "<io error>";
  Result<PipelinePlan> plan = PlanPipeline(TokenizeOnly("https://h/tok.model"), storage);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kIoError);
  EXPECT_THAT(plan.status().message(), HasSubstr("text.tokenize.model"));
  EXPECT_THAT(plan.status().message(), HasSubstr("HTTP 503"));
}

}  // namespace
}  // namespace headrace
