#include "headrace/observe/doctor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <thread>

#include "headrace/pipeline/test_pipelines.h"

namespace headrace {
namespace doctor_test {

using ::testing::HasSubstr;

constexpr int64_t kMiB = 1 << 20;

StageReport Stage(std::string name, int concurrency, int64_t items, double busy_s,
                  double elapsed_s) {
  StageReport s;
  s.metrics.name = std::move(name);
  s.metrics.concurrency = concurrency;
  s.metrics.items = items;
  s.metrics.busy_s = busy_s;
  s.utilization = busy_s / elapsed_s;
  return s;
}

// A 10 s run of 1000 samples (100 samples/s) in batches of 10 against a trainer that
// wants 10 per 10 ms (1000 samples/s): it waits most of its loop. Reads of 100 KB,
// 8 in flight allowed, 4 CPU threads, prefetch 4, 512 MiB of budget.
RunReport WaitingRun() {
  RunReport r;
  r.samples = 1000;
  r.batches = 100;
  r.elapsed_s = 10;
  r.samples_per_s = 100;
  r.mb_per_s = 10;  // 100 KB x 100 samples/s
  r.wait_time_ratio = 0.9;
  r.batch_size = 10;
  r.trainer_step_ms = 10;
  r.cpu_threads = 4;
  r.memory_budget_bytes = 512 * kMiB;
  r.io_budget_bytes = 64 * kMiB;
  r.batch_budget_bytes = 448 * kMiB;
  r.full_batch_bytes = 2 * kMiB;
  r.budget_peak_bytes = 20 * kMiB;
  r.stages.push_back(Stage("read", 8, 1000, 2, 10));
  r.stages.back().metrics.mean_latency_ms = 5;
  r.stages.push_back(Stage("cpu", 4, 1000, 2, 10));
  r.stages.push_back(Stage("batch", 4, 100, 0.1, 10));
  r.ops.push_back(OpReport{"image.decode", 6, 6.0});
  r.ops.push_back(OpReport{"image.resize", 2, 2.0});
  return r;
}

// WaitingRun whose `threads` CPU threads are busy 95% of the run: 9.5 s x threads of CPU
// time for 1000 samples.
RunReport CpuBusy(int threads) {
  RunReport r = WaitingRun();
  r.stages[1] = Stage("cpu", threads, 1000, 9.5, 10);
  return r;
}

// WaitingRun whose 1000 reads of 40 ms each over 10 s keep 4 in flight on average, of
// 4 allowed.
RunReport ReadsAtTheirCap() {
  RunReport r = WaitingRun();
  r.stages[0] = Stage("read", 4, 1000, 9.5, 10);
  r.stages[0].metrics.mean_latency_ms = 40;
  return r;
}

const Advice* AdviceFor(const Diagnosis& d, std::string_view setting) {
  for (const Advice& a : d.advice) {
    if (a.setting == setting) return &a;
  }
  return nullptr;
}

const Evidence* EvidenceNamed(const Diagnosis& d, std::string_view name) {
  for (const Evidence& e : d.evidence) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

TEST(Doctor, TrainerThatBarelyWaitsIsTheBottleneckWithNothingToChange) {
  RunReport r = WaitingRun();
  r.wait_time_ratio = 0.01;
  const Diagnosis d = DiagnoseRun(r);
  EXPECT_EQ(d.limit, LimitKind::kConsumer);
  EXPECT_EQ(d.stage, "consumer");
  EXPECT_TRUE(d.advice.empty());
  EXPECT_THAT(d.summary, HasSubstr("nothing to change"));
  ASSERT_NE(EvidenceNamed(d, "wait_time_ratio"), nullptr);
  EXPECT_DOUBLE_EQ(EvidenceNamed(d, "wait_time_ratio")->value, 0.01);
}

TEST(Doctor, WaitsWithBatchesReadyAndNoStageSaturatedAreTheTrainersOwn) {
  RunReport r = WaitingRun();
  r.wait_time_ratio = 0.08;
  r.stages[2].metrics.queue_fill = 0.9;
  const Diagnosis d = DiagnoseRun(r);
  EXPECT_EQ(d.limit, LimitKind::kConsumer);
  EXPECT_TRUE(d.advice.empty());
  EXPECT_THAT(d.summary, HasSubstr("not missing batches"));
  // Batches missing when asked for: the prefetch.
  r.stages[2].metrics.queue_fill = 0.2;
  EXPECT_EQ(DiagnoseRun(r).limit, LimitKind::kPrefetch);
  // Batches ready, but the CPU saturated: the CPU.
  r.stages[2].metrics.queue_fill = 0.9;
  r.stages[1] = Stage("cpu", 4, 1000, 9.5, 10);
  EXPECT_EQ(DiagnoseRun(r).limit, LimitKind::kCpu);
}

TEST(Doctor, ReadsAtTheirCapAreLatencyBoundAndSizedByLittlesLaw) {
  const RunReport r = ReadsAtTheirCap();
  const Diagnosis d = DiagnoseRun(r);
  EXPECT_EQ(d.limit, LimitKind::kStorageLatency);
  EXPECT_EQ(d.stage, "read");
  // 1000 samples/s x 1 read each x 40 ms = 40 in flight; +25%: 50.
  const Advice* a = AdviceFor(d, "execution.io_inflight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->current, 4);
  EXPECT_EQ(a->suggested, 50);
  EXPECT_THAT(a->text, HasSubstr("from 4 to ~50"));
  EXPECT_NEAR(EvidenceNamed(d, "reads_in_flight_mean")->value, 4, 1e-9);
  EXPECT_NEAR(EvidenceNamed(d, "reads_in_flight_needed")->value, 40, 1e-9);
  // 50 reads of 100 KB fit the 64 MiB I/O budget: no budget advice.
  EXPECT_EQ(AdviceFor(d, "execution.io_budget_bytes"), nullptr);
}

TEST(Doctor, LatencyAdviceRaisesTheIoBudgetWhenTheReadsWouldNotFit) {
  RunReport r = ReadsAtTheirCap();
  r.mb_per_s = 500;  // 5 MB per read: 50 of them need 250 MB
  const Diagnosis d = DiagnoseRun(r);
  ASSERT_EQ(d.limit, LimitKind::kStorageLatency);
  const Advice* a = AdviceFor(d, "execution.io_budget_bytes");
  ASSERT_NE(a, nullptr);
  EXPECT_GE(a->suggested, 250e6);
}

TEST(Doctor, ReadsAtTheGivenBandwidthAreBandwidthBound) {
  RunReport r = ReadsAtTheirCap();
  DoctorOptions options;
  options.storage_mb_s = 11;  // 10 MB/s measured: 91% of it
  const Diagnosis d = DiagnoseRun(r, options);
  EXPECT_EQ(d.limit, LimitKind::kStorageBandwidth);
  EXPECT_EQ(AdviceFor(d, "execution.io_inflight"), nullptr);
  ASSERT_FALSE(d.advice.empty());
  EXPECT_THAT(d.advice[0].text, HasSubstr("more reads in flight will not help"));
  // The trainer's 1000 samples/s at 0.1 MB each: 100 MB/s, 90 more than now.
  EXPECT_NEAR(EvidenceNamed(d, "read_mb_per_s_needed")->value, 100, 1e-9);
}

TEST(Doctor, SlowReadsBelowTheirCapAreTheStoragesThroughput) {
  RunReport r = WaitingRun();
  // Busy 95% of the run but 1 read in flight on average of 32 allowed.
  r.stages[0] = Stage("read", 32, 1000, 9.5, 10);
  r.stages[0].metrics.mean_latency_ms = 10;
  const Diagnosis d = DiagnoseRun(r);
  EXPECT_EQ(d.limit, LimitKind::kStorageBandwidth);
}

TEST(Doctor, BusyCpuThreadsAskForCoresAtTheTrainersPace) {
  const RunReport r = CpuBusy(4);  // 38 CPU-ms per sample
  DoctorOptions options;
  options.available_cores = 16;
  const Diagnosis d = DiagnoseRun(r, options);
  EXPECT_EQ(d.limit, LimitKind::kCpu);
  EXPECT_EQ(d.stage, "cpu");
  // 0.038 s x 1000 samples/s = 38 cores; +25%: 48, of which this machine has 16.
  EXPECT_NEAR(EvidenceNamed(d, "cores_needed")->value, 38, 1e-9);
  const Advice* threads = AdviceFor(d, "execution.cpu_threads");
  ASSERT_NE(threads, nullptr);
  EXPECT_EQ(threads->current, 4);
  EXPECT_EQ(threads->suggested, 16);
  bool more_cores = false, cheaper = false;
  for (const Advice& a : d.advice) {
    more_cores |= a.text.starts_with("32 more cores");
    cheaper |= a.text.find("the op image.decode costs 6.00 ms/sample") != std::string::npos;
  }
  EXPECT_TRUE(more_cores) << DiagnosisToText(d);
  EXPECT_TRUE(cheaper) << DiagnosisToText(d);
}

TEST(Doctor, CpuAdviceStaysOnTheMachineWhenItsCoresSuffice) {
  RunReport r = CpuBusy(4);
  r.trainer_step_ms = 100;  // 100 samples/s: 3.8 cores, +25%: 5
  DoctorOptions options;
  options.available_cores = 16;
  const Diagnosis d = DiagnoseRun(r, options);
  ASSERT_EQ(d.limit, LimitKind::kCpu);
  EXPECT_EQ(AdviceFor(d, "execution.cpu_threads")->suggested, 5);
  for (const Advice& a : d.advice) EXPECT_THAT(a.text, ::testing::Not(HasSubstr("more cores")));
}

TEST(Doctor, PythonOpHoldingTheGilIsNamedWithWorkerProcesses) {
  RunReport r = CpuBusy(4);
  // 38 ms/sample of which 28.5 waiting for the GIL: 9.5 ms held, x 100 samples/s = 0.95.
  r.ops = {OpReport{"image.decode", 0.5, 0.5}, OpReport{"python.map(heavy)", 38, 38, {}, 28.5}};
  const Diagnosis d = DiagnoseRun(r);
  EXPECT_EQ(d.limit, LimitKind::kPythonGil);
  EXPECT_THAT(d.summary, HasSubstr("python.map(heavy)"));
  EXPECT_NEAR(EvidenceNamed(d, "gil_held python.map(heavy)")->value, 9.5, 1e-9);
  ASSERT_FALSE(d.advice.empty());
  // 9.5 ms x 1000 samples/s = 9.5 processes; +25%: 12.
  EXPECT_THAT(d.advice[0].text, HasSubstr("processes=12"));
}

TEST(Doctor, PythonOpOnOneThreadHoldingTheGilMostOfTheRunIsTheGil) {
  RunReport r = CpuBusy(1);  // 9.5 ms per sample on one thread
  r.ops = {OpReport{"image.decode", 1, 1.0}, OpReport{"python.map(slow)", 8, 8.0, {}, 0.0}};
  const Diagnosis d = DiagnoseRun(r);
  EXPECT_EQ(d.limit, LimitKind::kPythonGil);
  // 8 ms held x 1000 samples/s = 8 processes; +25%: 10.
  EXPECT_THAT(d.advice[0].text, HasSubstr("processes=10"));
}

TEST(Doctor, PythonOpThatReleasesTheGilOnManyThreadsIsCpuWithTheOpNamed) {
  RunReport r = CpuBusy(4);
  // numpy work: the threads run in parallel, hardly waiting for the GIL.
  r.ops = {OpReport{"image.decode", 1, 1.0}, OpReport{"python.map(numpy)", 36, 36.0, {}, 0.5}};
  const Diagnosis d = DiagnoseRun(r);
  EXPECT_EQ(d.limit, LimitKind::kCpu);
  EXPECT_NE(EvidenceNamed(d, "costliest_op python.map(numpy)"), nullptr);
}

TEST(Doctor, CheapPythonOpLeavesTheVerdictToTheCpu) {
  RunReport r = CpuBusy(4);
  r.ops.push_back(OpReport{"python.map(light)", 0.1, 0.1, {}, 0.0});
  EXPECT_EQ(DiagnoseRun(r).limit, LimitKind::kCpu);
}

TEST(Doctor, BudgetHoldingFewerBatchesThanThePrefetchAsksForMore) {
  RunReport r = WaitingRun();
  r.memory_budget_bytes = 24 * kMiB;
  r.io_budget_bytes = 3 * kMiB;
  r.batch_budget_bytes = 21 * kMiB;
  r.full_batch_bytes = 10 * kMiB;  // 2 fit; prefetch.depth is 4
  r.budget_peak_bytes = 22 * kMiB;
  const Diagnosis d = DiagnoseRun(r);
  EXPECT_EQ(d.limit, LimitKind::kMemoryBudget);
  const Advice* a = AdviceFor(d, "memory.budget_bytes");
  ASSERT_NE(a, nullptr);
  // 4 x 10 MiB for batches, and the 3 MiB beside them, or 40 MiB in 7/8 of the total.
  EXPECT_EQ(a->suggested, 46 * kMiB);
  EXPECT_NEAR(EvidenceNamed(d, "batches_ahead_budget_holds")->value, 2, 1e-9);
}

TEST(Doctor, UnsaturatedStagesWithRoomAskForADeeperPrefetch) {
  const Diagnosis d = DiagnoseRun(WaitingRun());
  EXPECT_EQ(d.limit, LimitKind::kPrefetch);
  const Advice* a = AdviceFor(d, "prefetch.depth");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->current, 4);
  EXPECT_EQ(a->suggested, 8);
  EXPECT_EQ(AdviceFor(d, "memory.budget_bytes"), nullptr);  // 8 x 2 MiB fit in 448 MiB
}

TEST(Doctor, WithoutATrainerStepTheTargetIsTwiceTheMeasuredRate) {
  RunReport r = CpuBusy(4);
  r.trainer_step_ms = 0;
  DoctorOptions options;
  options.available_cores = 64;
  const Diagnosis d = DiagnoseRun(r, options);
  ASSERT_EQ(d.limit, LimitKind::kCpu);
  // 38 ms x 200 samples/s = 7.6 cores, +25%: 10.
  EXPECT_EQ(AdviceFor(d, "execution.cpu_threads")->suggested, 10);
}

TEST(Doctor, JsonAndTextCarryTheVerdictEvidenceAndAdvice) {
  RunReport r = ReadsAtTheirCap();
  const Diagnosis d = DiagnoseRun(r);
  const std::string json = DiagnosisToJson(d);
  EXPECT_THAT(json, HasSubstr("\"limit\": \"storage_latency\""));
  EXPECT_THAT(json, HasSubstr("\"setting\": \"execution.io_inflight\""));
  EXPECT_THAT(json, HasSubstr("\"unit\": \"ms\""));
  const std::string text = DiagnosisToText(d);
  EXPECT_THAT(text, HasSubstr("storage_latency (stage read)"));
  EXPECT_THAT(text, HasSubstr("raise execution.io_inflight from 4 to ~50"));
}

TEST(Doctor, SavedReportReadsBackToTheSameDiagnosis) {
  RunReport r = ReadsAtTheirCap();
  auto back = RunReportFromJson(RunReportToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(DiagnosisToJson(DiagnoseRun(*back)), DiagnosisToJson(DiagnoseRun(r)));
}

TEST(Doctor, SamplesLostToPackingAreNamedWithTheKeyWhateverTheLimit) {
  RunReport r = WaitingRun();
  r.wait_time_ratio = 0.01;  // nothing to change for the throughput
  r.packed = true;
  r.pack_seq_len = 1024;
  r.pack.samples = 35;
  r.pack.skipped = 10;
  r.pack.truncated = 5;
  const Diagnosis d = DiagnoseRun(r);
  EXPECT_EQ(d.limit, LimitKind::kConsumer);
  ASSERT_EQ(d.advice.size(), 1u);
  EXPECT_THAT(d.advice[0].text,
              HasSubstr("longer than batch.pack.seq_len 1024, 10 were skipped, 5 truncated"));
  EXPECT_THAT(d.advice[0].text, HasSubstr("errors.max_error_rate"));
  ASSERT_NE(EvidenceNamed(d, "pack_samples_skipped"), nullptr);
  EXPECT_DOUBLE_EQ(EvidenceNamed(d, "pack_samples_truncated")->value, 5);
  // A saved report gives the same diagnosis.
  auto back = RunReportFromJson(RunReportToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(DiagnosisToJson(DiagnoseRun(*back)), DiagnosisToJson(d));
}

TEST(Doctor, UnevenStepsAreNamedWhenTheyIdleMoreThanTheDataWait) {
  RunReport r = WaitingRun();
  r.wait_time_ratio = 0.01;
  r.balanced = true;
  r.balance.steps = 10;
  r.balance.mean = 100;
  r.balance.max_before = 150;  // 33% idle as ordered
  r.balance.max_after = 125;   // 20% as dealt
  r.balance.short_ranks = 2;
  const Diagnosis d = DiagnoseRun(r);
  EXPECT_EQ(d.limit, LimitKind::kConsumer);
  ASSERT_NE(EvidenceNamed(d, "balance_idle_ratio"), nullptr);
  EXPECT_DOUBLE_EQ(EvidenceNamed(d, "balance_idle_ratio")->value, 0.2);
  EXPECT_NEAR(EvidenceNamed(d, "balance_idle_ratio_ordered")->value, 1.0 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(EvidenceNamed(d, "balance_short_ranks")->value, 2);
  ASSERT_EQ(d.advice.size(), 1u);
  EXPECT_THAT(d.advice[0].text, HasSubstr("idles 20.0% of a step at the barrier"));
  EXPECT_THAT(d.advice[0].text, HasSubstr("33.3% as the order dealt the steps, over 10 steps"));
  EXPECT_THAT(d.advice[0].text, HasSubstr("more than the 1.0% the trainer waits for data"));
  auto back = RunReportFromJson(RunReportToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(DiagnosisToJson(DiagnoseRun(*back)), DiagnosisToJson(d));
  // Even steps, or a data wait larger than the idle: facts, no advice about the steps.
  r.balance.max_after = 101;
  EXPECT_TRUE(DiagnoseRun(r).advice.empty());
  r.balance.max_after = 125;
  r.wait_time_ratio = 0.3;
  for (const Advice& a : DiagnoseRun(r).advice) EXPECT_THAT(a.text, ::testing::Not(HasSubstr("uneven")));
  r.balanced = false;
  EXPECT_EQ(EvidenceNamed(DiagnoseRun(r), "balance_idle_ratio"), nullptr);
}

TEST(Doctor, TextThatIsNotARunReportIsRefusedNamingWhatIsMissing) {
  EXPECT_FALSE(RunReportFromJson("[1, 2]").ok());
  auto partial = RunReportFromJson(R"({"samples": 1, "batches": 1})");
  ASSERT_FALSE(partial.ok());
  EXPECT_THAT(partial.status().message(), HasSubstr("no 'elapsed_s'"));
}

TEST(DoctorRun, RunsABoundedRunToItsEndAndReportsIt) {
  PipelineSpec spec =
      test::IndexPipeline(std::filesystem::path(testing::TempDir()) / "doctor_end", 10);
  spec.epochs = 2;
  spec.trainer.step_ms = 0;
  auto run = DoctorRun::Start(spec, 0);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto ended = (*run)->RunUntil(Clock::time_point::max());
  ASSERT_TRUE(ended.ok()) << ended.status().ToString();
  EXPECT_TRUE(*ended);
  const RunReport report = (*run)->Report();
  EXPECT_EQ(report.samples, 20);
  EXPECT_EQ(report.batches, 6);  // 3 batches of up to 4 per epoch
}

TEST(DoctorRun, StopsAtItsTimeAndGoesOnFromThere) {
  PipelineSpec spec =
      test::IndexPipeline(std::filesystem::path(testing::TempDir()) / "doctor_until", 10);
  spec.trainer.step_ms = 0;  // epochs: unbounded
  auto run = DoctorRun::Start(spec, 0);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto at_once = (*run)->RunUntil(Clock::now());  // a time already passed
  ASSERT_TRUE(at_once.ok());
  EXPECT_FALSE(*at_once);
  EXPECT_EQ((*run)->Report().batches, 0);
}

TEST(DoctorRun, CancelFromAnotherThreadEndsATrainerStep) {
  PipelineSpec spec =
      test::IndexPipeline(std::filesystem::path(testing::TempDir()) / "doctor_cancel", 10);
  spec.trainer.step_ms = 3'600'000;  // an hour per batch: only Cancel ends the step
  auto run = DoctorRun::Start(spec, 0);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  std::thread canceller([&] { (*run)->Cancel(); });
  auto ran = (*run)->RunUntil(Clock::time_point::max());
  canceller.join();
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.status().code(), StatusCode::kCancelled);
}

}  // namespace doctor_test
}  // namespace headrace
