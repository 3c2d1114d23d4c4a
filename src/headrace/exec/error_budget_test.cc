#include "headrace/exec/error_budget.h"

#include <gtest/gtest.h>

namespace headrace {
namespace error_budget_test {

std::vector<SampleError> Errors(int n) {
  std::vector<SampleError> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(SampleError{0, i, "img" + std::to_string(i), Status::CorruptData("bad")});
  }
  return out;
}

TEST(ErrorBudget, WaitsForMinSamplesThenFailsPastTheRate) {
  ErrorBudget budget(0.1, 20);
  budget.Count(8, Errors(2));  // 2 of 10: over the rate, under min_samples
  EXPECT_TRUE(budget.Check(false).ok());
  budget.Count(10, {});        // 2 of 20: at the rate
  EXPECT_TRUE(budget.Check(false).ok());
  budget.Count(0, Errors(1));  // 3 of 21
  const Status s = budget.Check(false);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("3 of 21 samples failed"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("corrupt_data=3"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("first: epoch 0, index 0, img0"), std::string::npos);
}

TEST(ErrorBudget, AnEpochsEndIsAVerdictWhateverMinSamples) {
  ErrorBudget budget(0.1, 1000);
  budget.Count(3, Errors(1));
  EXPECT_TRUE(budget.Check(false).ok());
  EXPECT_FALSE(budget.Check(true).ok());
}

TEST(ErrorBudget, TheRunsCountsMergeOtherRanksAndNameThisRanksShare) {
  ErrorBudget budget(0.2, 1);
  budget.CountText(4, std::vector<std::string>{"e1", "e2", "e3", "e4"});  // 4 of 8 alone
  // With 24 clean samples on other ranks the run is at 4 of 32: within budget.
  EXPECT_TRUE(budget.Check(false, ErrorCounts{24, 0}, 1).ok());
  const Status s = budget.Check(false, ErrorCounts{8, 0}, 1);  // 4 of 16
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("4 of 16 samples of the run failed"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("(rank 1: 4 of 8)"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("first: e1"), std::string::npos) << s.ToString();
  // A clean rank stops too once the run is over budget.
  ErrorBudget clean(0.2, 1);
  clean.Count(8, {});
  const Status c = clean.Check(false, ErrorCounts{4, 4}, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("4 of 16 samples of the run failed"), std::string::npos);
  EXPECT_NE(c.message().find("rank 0: 0 of 8"), std::string::npos) << c.ToString();
}

TEST(ErrorBudget, ARateJustAboveTheLimitPrintsEnoughDigitsToDiffer) {
  ErrorBudget budget(0.05, 1);
  budget.Count(18999, Errors(1000));  // 5.0003%
  const Status s = budget.Check(false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("(5.0003%), above errors.max_error_rate 5%"), std::string::npos)
      << s.ToString();
}

TEST(ErrorBudget, SamplesLostToPackingAreFailuresOfTheirOwnKindNamingTheKey) {
  // 50 samples delivered to a packer that skipped 10 and cut 5 (one never ran: a planned
  // pack left it out): 15 of 51 failed, and the message says what and which keys.
  ErrorBudget budget(0.05, 20);
  budget.Count(50, {});
  std::vector<LostSample> lost;
  for (int i = 0; i < 10; ++i) {
    lost.push_back({SampleError{0, i, "s", Status::PackSkipped("too long")}, i > 0});
  }
  for (int i = 10; i < 15; ++i) {
    lost.push_back({SampleError{0, i, "s", Status::PackTruncated("cut")}, true});
  }
  budget.CountLost(lost);
  EXPECT_EQ(budget.counts().delivered, 36);
  EXPECT_EQ(budget.counts().failed, 15);
  EXPECT_EQ(budget.by_kind().at("pack_skipped"), 10);
  EXPECT_EQ(budget.by_kind().at("pack_truncated"), 5);
  const Status s = budget.Check(false);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  for (const char* part : {"15 of 51 samples failed", "errors.max_error_rate 5%",
                           "pack_skipped=10 pack_truncated=5", "batch.pack.seq_len",
                           "first: epoch 0, index 0, s: pack_skipped: too long"}) {
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in " << s.ToString();
  }
}

}  // namespace error_budget_test
}  // namespace headrace
