#include "headrace/capacity/capacity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>

namespace headrace::capacity {
namespace {

using ::testing::HasSubstr;

PlanInputs CpuInputs(std::string instance = "p4d.24xlarge") {
  PlanInputs in;
  in.instance = std::move(instance);
  in.cpu_seconds_per_sample = 0.010;  // 10 ms
  in.gpu_step_ms = 100;
  in.batch_size = 32;  // 320 samples/s per GPU -> 3.2 vCPU-s per s at efficiency 1
  in.cpu_efficiency = 1;
  in.target_wait_ratio = 0;
  return in;
}

Plan MustPlan(const PlanInputs& in) {
  auto plan = ComputePlan(in);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? *plan : Plan{};
}

std::string ErrorOf(const PlanInputs& in) {
  auto plan = ComputePlan(in);
  EXPECT_FALSE(plan.ok());
  return plan.ok() ? "" : plan.status().ToString();
}

TEST(CapacityIo, SourcesExampleGivesSixteenAndAHalfHoursOfMaterializingIo) {
  PlanInputs in;
  ApplySourcesExample(&in);
  const Plan plan = MustPlan(in);
  ASSERT_TRUE(plan.io.has_value());
  EXPECT_FALSE(plan.cpu.has_value());
  const IoPlan& io = *plan.io;
  EXPECT_DOUBLE_EQ(io.raw_tb, 500);
  EXPECT_DOUBLE_EQ(io.expanded_tb, 1000);
  EXPECT_NEAR(io.read_gb_per_s, 92.5926, 1e-4);
  EXPECT_NEAR(io.write_gb_per_s, 92.5926, 1e-4);
  EXPECT_NEAR(io.gpu_read_gb_per_s, 23.1481, 1e-4);
  EXPECT_NEAR(io.raw_read_hours, 1.5, 1e-9);
  EXPECT_NEAR(io.expanded_write_hours, 3, 1e-9);
  EXPECT_NEAR(io.expanded_read_hours_per_epoch, 12, 1e-9);
  EXPECT_NEAR(io.materialize_io_hours, 16.5, 1e-9);
  EXPECT_NEAR(io.streaming_io_hours, 1.5, 1e-9);
}

TEST(CapacityIo, TheDocumentedFlagsOfTheExampleGiveSixteenAndAHalfHours) {
  // README.md's command, bandwidths rounded to what a person types.
  PlanInputs in;
  ASSERT_TRUE(SetInput(&in, "dataset-tb", "500").ok());
  ASSERT_TRUE(SetInput(&in, "expansion", "2").ok());
  ASSERT_TRUE(SetInput(&in, "read-gb-per-s", "92.59").ok());
  ASSERT_TRUE(SetInput(&in, "write_gb_per_s", "92.59").ok());  // YAML spelling
  ASSERT_TRUE(SetInput(&in, "gpu-read-gb-per-s", "23.15").ok());
  const Plan plan = MustPlan(in);
  EXPECT_NEAR(plan.io->materialize_io_hours, 16.5, 0.005);
  EXPECT_NE(PlanToText(plan).find("16.50 h"), std::string::npos) << PlanToText(plan);
}

TEST(CapacityIo, EpochsRepeatTheExpandedReadAndTheRawStream) {
  PlanInputs in;
  ApplySourcesExample(&in);
  in.epochs = 3;
  const IoPlan io = *MustPlan(in).io;
  EXPECT_NEAR(io.materialize_io_hours, 1.5 + 3 + 3 * 12, 1e-9);
  EXPECT_NEAR(io.streaming_io_hours, 3 * 1.5, 1e-9);
}

TEST(CapacityIo, GpuReadDefaultsToTheReadBandwidth) {
  PlanInputs in;
  in.dataset_tb = 10;
  in.expansion = 1;
  in.read_gb_per_s = 10;
  in.write_gb_per_s = 5;
  const IoPlan io = *MustPlan(in).io;
  EXPECT_DOUBLE_EQ(io.gpu_read_gb_per_s, 10);
  EXPECT_NEAR(io.raw_read_hours, 10e12 / 10e9 / 3600, 1e-12);
  EXPECT_NEAR(io.expanded_write_hours, 10e12 / 5e9 / 3600, 1e-12);
}

TEST(CapacityIo, DatasetFromSamplesTimesSampleSize) {
  PlanInputs in;
  ApplySourcesExample(&in);
  in.dataset_tb.reset();
  in.samples = 1'000'000;
  in.sample_mb = 2;  // 2 TB
  const IoPlan io = *MustPlan(in).io;
  EXPECT_DOUBLE_EQ(io.raw_tb, 2);
}

TEST(CapacityCpu, PresetsGiveTheSourcesVcpusPerGpu) {
  const CpuPlan p4d = *MustPlan(CpuInputs("p4d.24xlarge")).cpu;
  EXPECT_DOUBLE_EQ(p4d.vcpus_per_node, 96);
  EXPECT_DOUBLE_EQ(p4d.gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(p4d.instance_vcpus_per_gpu, 12);
  const CpuPlan p5 = *MustPlan(CpuInputs("p5.48xlarge")).cpu;
  EXPECT_DOUBLE_EQ(p5.vcpus_per_node, 192);
  EXPECT_DOUBLE_EQ(p5.instance_vcpus_per_gpu, 24);
  EXPECT_DOUBLE_EQ(p5.own_vcpus_per_gpu, 24 - kDefaultReservedVcpusPerGpu);
}

TEST(CapacityCpu, VcpusAreConsumptionTimesCostOverEfficiency) {
  PlanInputs in = CpuInputs();
  in.cpu_efficiency = 0.8;
  in.target_wait_ratio = 0.25;
  const CpuPlan c = *MustPlan(in).cpu;
  EXPECT_DOUBLE_EQ(c.samples_per_s_per_gpu, 320);
  EXPECT_DOUBLE_EQ(c.samples_per_s_total, 320 * 8);  // --gpus defaults to one node's
  EXPECT_NEAR(c.vcpus_per_gpu_no_wait, 320 * 0.010 / 0.8, 1e-12);  // 4
  EXPECT_NEAR(c.vcpus_per_gpu_for_target, 0.75 * 4, 1e-12);
  EXPECT_NEAR(c.vcpus_per_gpu_node_for_target, 8 * 3, 1e-12);
}

TEST(CapacityCpu, OwnVcpusBoundTheUtilizationAndCpuNodesMakeUpTheRest) {
  PlanInputs in = CpuInputs();  // p4d: 12 vCPUs per GPU, 10 after 2 reserved
  in.cpu_seconds_per_sample = 0.125;  // 320 samples/s x 0.125 s = 40 vCPUs per GPU
  in.gpus = 64;
  in.cpu_node_vcpus = 64;
  const CpuPlan c = *MustPlan(in).cpu;
  EXPECT_NEAR(c.vcpus_per_gpu_no_wait, 40, 1e-9);
  EXPECT_DOUBLE_EQ(c.own_vcpus_per_gpu, 10);
  EXPECT_NEAR(c.gpu_utilization_own_vcpus, 0.25, 1e-12);
  EXPECT_NEAR(c.wait_time_ratio_own_vcpus, 0.75, 1e-12);
  EXPECT_NEAR(c.extra_vcpus_per_gpu_node, 8 * 30, 1e-9);
  EXPECT_NEAR(c.cpu_only_nodes_per_gpu_node, 240.0 / 64, 1e-12);
  EXPECT_EQ(c.gpu_nodes, 8);
  EXPECT_EQ(c.cpu_only_nodes_total, 30);  // 64 GPUs x 30 vCPUs / 64
}

TEST(CapacityCpu, ACheapPipelineNeedsNoCpuNodes) {
  const CpuPlan c = *MustPlan(CpuInputs()).cpu;  // 3.2 vCPUs per GPU < 10
  EXPECT_DOUBLE_EQ(c.gpu_utilization_own_vcpus, 1);
  EXPECT_DOUBLE_EQ(c.wait_time_ratio_own_vcpus, 0);
  EXPECT_DOUBLE_EQ(c.cpu_only_nodes_per_gpu_node, 0);
  EXPECT_EQ(c.cpu_only_nodes_total, 0);
}

TEST(CapacityCpu, MoreCpuPerSampleNeedsMoreVcpusAndLowersOwnUtilization) {
  double last_vcpus = 0, last_utilization = 2, last_nodes = -1;
  for (double ms : {1.0, 5.0, 20.0, 50.0, 100.0, 400.0}) {
    PlanInputs in = CpuInputs("p5.48xlarge");
    in.cpu_seconds_per_sample = ms / 1e3;
    in.target_wait_ratio = 0.1;
    const CpuPlan c = *MustPlan(in).cpu;
    EXPECT_GT(c.vcpus_per_gpu_no_wait, last_vcpus) << ms;
    EXPECT_GT(c.vcpus_per_gpu_for_target, 0) << ms;
    EXPECT_LE(c.gpu_utilization_own_vcpus, last_utilization) << ms;
    EXPECT_GE(c.cpu_only_nodes_per_gpu_node, last_nodes) << ms;
    last_vcpus = c.vcpus_per_gpu_no_wait;
    last_utilization = c.gpu_utilization_own_vcpus;
    last_nodes = c.cpu_only_nodes_per_gpu_node;
  }
  EXPECT_LT(last_utilization, 1);
  EXPECT_GT(last_nodes, 0);
}

TEST(CapacityCpu, AHigherTargetWaitRatioNeedsFewerVcpus) {
  PlanInputs strict = CpuInputs();
  strict.target_wait_ratio = 0.02;
  PlanInputs loose = CpuInputs();
  loose.target_wait_ratio = 0.2;
  EXPECT_GT(MustPlan(strict).cpu->vcpus_per_gpu_for_target,
            MustPlan(loose).cpu->vcpus_per_gpu_for_target);
}

TEST(CapacityCpu, CustomInstanceUsesItsShape) {
  PlanInputs in = CpuInputs("custom");
  in.vcpus_per_node = 64;
  in.gpus_per_node = 4;
  in.reserved_vcpus_per_gpu = 0;
  const CpuPlan c = *MustPlan(in).cpu;
  EXPECT_DOUBLE_EQ(c.own_vcpus_per_gpu, 16);
  EXPECT_DOUBLE_EQ(c.gpus, 4);
}

TEST(CapacityCpu, SamplesGiveTheEpochsCpuTimeAndLength) {
  PlanInputs in = CpuInputs();
  in.samples = 3'600'000;
  const CpuPlan c = *MustPlan(in).cpu;
  EXPECT_NEAR(c.cpu_hours_per_epoch, 3'600'000 * 0.010 / 3600, 1e-9);     // 10 vCPU-hours
  EXPECT_NEAR(c.epoch_hours_at_gpu_pace, 3'600'000 / 2560.0 / 3600, 1e-9);  // 8 GPUs
}

TEST(CapacityBoth, StreamingReadNeededAtGpuPace) {
  PlanInputs in = CpuInputs();
  ApplySourcesExample(&in);
  in.dataset_tb.reset();
  in.samples = 1'000'000;
  in.sample_mb = 1;  // 2560 samples/s x 1 MB = 2.56 GB/s
  const Plan plan = MustPlan(in);
  EXPECT_NEAR(plan.io->stream_read_gb_per_s_needed, 2.56, 1e-9);
}

TEST(CapacityInput, RejectsOutOfRangeValuesNamingTheFlag) {
  PlanInputs in;
  EXPECT_THAT(SetInput(&in, "read-gb-per-s", "0").ToString(),
              HasSubstr("--read-gb-per-s must be > 0 (got 0)"));
  EXPECT_THAT(SetInput(&in, "write-gb-per-s", "-5").ToString(),
              HasSubstr("--write-gb-per-s must be > 0"));
  EXPECT_THAT(SetInput(&in, "dataset-tb", "-1").ToString(), HasSubstr("--dataset-tb"));
  EXPECT_THAT(SetInput(&in, "sample-mb", "-0.5").ToString(), HasSubstr("--sample-mb"));
  EXPECT_THAT(SetInput(&in, "gpu-step-ms", "0").ToString(), HasSubstr("--gpu-step-ms must be > 0"));
  EXPECT_THAT(SetInput(&in, "batch-size", "2.5").ToString(),
              HasSubstr("--batch-size must be a whole number >= 1"));
  EXPECT_THAT(SetInput(&in, "target-wait-ratio", "1").ToString(), HasSubstr("in [0, 1)"));
  EXPECT_THAT(SetInput(&in, "cpu-ms-per-sample", "0").ToString(),
              HasSubstr("--cpu-ms-per-sample must be > 0 (got 0)"));
  EXPECT_THAT(SetInput(&in, "gpus", "abc").ToString(), HasSubstr("--gpus needs a number"));
  EXPECT_THAT(SetInput(&in, "expansion", "nan").ToString(),
              HasSubstr("--expansion needs a number"));
  EXPECT_THAT(SetInput(&in, "expansion", "1e999").ToString(), HasSubstr("needs a number"));
  EXPECT_THAT(SetInput(&in, "bogus", "1").ToString(), HasSubstr("unknown input 'bogus'"));
  // Nothing was set by the rejected values.
  EXPECT_FALSE(in.read_gb_per_s || in.dataset_tb || in.gpu_step_ms || in.batch_size);
}

TEST(CapacityInput, ValidateChecksValuesSetDirectlyToo) {
  PlanInputs in;
  ApplySourcesExample(&in);
  in.read_gb_per_s = 0;
  EXPECT_THAT(ErrorOf(in), HasSubstr("--read-gb-per-s must be > 0"));
  in = CpuInputs();
  in.gpu_step_ms = 0;
  EXPECT_THAT(ErrorOf(in), HasSubstr("--gpu-step-ms must be > 0"));
  in = CpuInputs();
  ASSERT_TRUE(SetInput(&in, "cpu-ms-per-sample", "5").ok());
  in.cpu_seconds_per_sample = -0.001;
  EXPECT_THAT(ErrorOf(in), HasSubstr("--cpu-ms-per-sample must be > 0 (got -1)"));
}

TEST(CapacityInput, ResultsThatOverflowAreRejected) {
  PlanInputs in;
  ApplySourcesExample(&in);
  in.dataset_tb = 1e300;
  in.expansion = 1e300;
  EXPECT_THAT(ErrorOf(in), HasSubstr("not a finite number"));
}

TEST(CapacityInput, UnknownInstanceListsThePresets) {
  EXPECT_THAT(ErrorOf(CpuInputs("p3.16xlarge")),
              HasSubstr("--instance: unknown instance 'p3.16xlarge' (allowed: p4d.24xlarge, "
                        "p5.48xlarge, custom)"));
  PlanInputs none = CpuInputs("");
  EXPECT_THAT(ErrorOf(none), HasSubstr("--instance is required"));
  EXPECT_THAT(ErrorOf(CpuInputs("custom")),
              HasSubstr("--instance custom needs --vcpus-per-node and --gpus-per-node"));
  PlanInputs both = CpuInputs("p5.48xlarge");
  both.vcpus_per_node = 100;
  EXPECT_THAT(ErrorOf(both), HasSubstr("--vcpus-per-node is for --instance custom (p5.48xlarge "
                                       "has 192 vCPUs and 8 GPUs)"));
}

TEST(CapacityInput, ASectionAskedForNeedsAllItsInputs) {
  PlanInputs in;
  EXPECT_THAT(ErrorOf(in), HasSubstr("nothing to plan"));
  in = CpuInputs();
  in.batch_size.reset();
  EXPECT_THAT(ErrorOf(in), HasSubstr("needs --batch-size"));
  in = CpuInputs();
  in.cpu_seconds_per_sample.reset();
  EXPECT_THAT(ErrorOf(in), HasSubstr("--from-report"));
  in = PlanInputs{};
  in.dataset_tb = 1;
  in.expansion = 1;
  in.read_gb_per_s = 1;
  EXPECT_THAT(ErrorOf(in), HasSubstr("needs --write-gb-per-s"));
  in.write_gb_per_s = 1;
  in.samples = 1000;
  in.sample_mb = 2;  // 0.002 TB, not 1
  EXPECT_THAT(ErrorOf(in), HasSubstr("disagrees"));
}

TEST(CapacityReport, RunReportCostIsTheCpuStagesBusyTimePerSample) {
  const auto cost = CpuCostFromReport(R"({"samples": 2000, "stages": [
      {"name": "read", "kind": "io", "concurrency": 32, "items": 2000, "busy_s": 1.37},
      {"name": "cpu", "kind": "cpu", "concurrency": 2, "items": 2000, "busy_s": 4.0}],
      "ops": [{"name": "image.decode", "busy_s": 7, "ms_per_sample": 3.5}]})");
  ASSERT_TRUE(cost.ok()) << cost.status().ToString();
  EXPECT_DOUBLE_EQ(cost->cpu_seconds_per_sample, 4.0 * 2 / 2000);
  EXPECT_THAT(cost->source, HasSubstr("cpu stage"));
}

TEST(CapacityReport, WithoutACpuStageTheOpsAreSummed) {
  const auto cost = CpuCostFromReport(R"({"ops": [{"name": "a", "ms_per_sample": 3.5},
      {"name": "b", "ms_per_sample": 0.5}]})");
  ASSERT_TRUE(cost.ok());
  EXPECT_DOUBLE_EQ(cost->cpu_seconds_per_sample, 0.004);
}

TEST(CapacityReport, BenchOpsTotalIsUsed) {
  const auto cost = CpuCostFromReport(R"({"ops": [{"name": "a", "ms_per_sample": 3.5}],
      "total_ms_per_sample": 3.5, "read_ms_per_sample": 1, "samples": 10})");
  ASSERT_TRUE(cost.ok());
  EXPECT_DOUBLE_EQ(cost->cpu_seconds_per_sample, 0.0035);
  EXPECT_THAT(cost->source, HasSubstr("bench ops"));
}

TEST(CapacityReport, ReportsWithoutACostAreRejected) {
  EXPECT_THAT(CpuCostFromReport("not json").status().ToString(), HasSubstr("not a JSON object"));
  EXPECT_THAT(CpuCostFromReport("[1, 2]").status().ToString(), HasSubstr("not a JSON object"));
  EXPECT_THAT(CpuCostFromReport(R"({"stages": [{"name": "cpu", "concurrency": 2,
      "items": 0, "busy_s": 0}], "ops": []})").status().ToString(), HasSubstr("no CPU cost"));
}

TEST(CapacityOutput, JsonNamesEveryFieldWithItsUnitAndNullsMissingSections) {
  PlanInputs in;
  ApplySourcesExample(&in);
  const std::string io_only = PlanToJson(MustPlan(in));
  EXPECT_THAT(io_only, HasSubstr(R"("cpu": null)"));
  EXPECT_THAT(io_only, HasSubstr(R"("materialize_io_hours": 16.5)"));
  EXPECT_THAT(io_only, HasSubstr(R"("stream_read_gb_per_s_needed": null)"));
  const std::string cpu_only = PlanToJson(MustPlan(CpuInputs()));
  EXPECT_THAT(cpu_only, HasSubstr(R"("io": null)"));
  EXPECT_THAT(cpu_only, HasSubstr(R"("instance_vcpus_per_gpu": 12)"));
  EXPECT_THAT(cpu_only, HasSubstr(R"("vcpus_per_gpu_no_wait": 3.2)"));
}

TEST(CapacityOutput, TextIsAnAlignedTable) {
  PlanInputs in = CpuInputs();
  ApplySourcesExample(&in);
  const std::string text = PlanToText(MustPlan(in));
  EXPECT_THAT(text, HasSubstr("CPU for 8 GPUs on 1 p4d.24xlarge node (96 vCPUs, 8 GPUs each)"));
  EXPECT_THAT(text, HasSubstr("materialize: all I/O"));
  // Every row's number ends in the same column, whatever its label and unit.
  const std::regex row("^  (.+?)  +([0-9.]+) \\S");
  size_t column = 0;
  int rows = 0;
  size_t start = 0;
  for (size_t end = text.find('\n'); end != std::string::npos;
       start = end + 1, end = text.find('\n', start)) {
    const std::string line = text.substr(start, end - start);
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    const size_t number_end = m.position(2) + m.length(2);
    if (rows++ == 0) column = number_end;
    EXPECT_EQ(number_end, column) << line << "\n" << text;
  }
  EXPECT_EQ(rows, 13) << text;
}

}  // namespace
}  // namespace headrace::capacity
