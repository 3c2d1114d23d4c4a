// The run report's four forms, byte for byte, on a report with every optional section
// filled: the JSON, the text summary, the Prometheus exposition and what JSON-in reads
// back (shown by writing it out again), and an older report's JSON read back. The golden
// texts were captured from the hand-written walks that the schema (report_schema.h)
// replaced; a change to any of them is a change to an interface.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "headrace/observe/prometheus.h"
#include "headrace/observe/report.h"

namespace headrace {
namespace report_golden_test {

std::string Golden(const std::string& name) {
  std::ifstream in(std::string(HR_OBSERVE_TESTDATA) + "/" + name);
  EXPECT_TRUE(in.good()) << "no golden file " << name;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Compares with testdata/`name`; when they differ, writes `actual` beside the test's
// temporary files, to be diffed (`diff -u`) against the golden instead of read from the log.
void ExpectGolden(const std::string& name, const std::string& golden, const std::string& actual) {
  if (golden == actual) return;
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path) << actual;
  ADD_FAILURE() << "observe/testdata/" << name << " changed; the new text is in " << path;
}
void ExpectGolden(const std::string& name, const std::string& actual) {
  ExpectGolden(name, Golden(name), actual);
}

// `text` with each of `edits`' first strings replaced by the second, each found once.
std::string Edited(std::string text,
                   std::initializer_list<std::pair<std::string, std::string>> edits) {
  for (const auto& [from, to] : edits) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  }
  return text;
}

HistogramSnapshot Latencies(std::initializer_list<int64_t> nanos) {
  LatencyHistogram h;
  for (int64_t n : nanos) h.Record(n);
  return h.Snapshot();
}

// Every field set to a value of its own, every optional section present.
RunReport RichReport() {
  RunReport r;
  r.samples = 1200;
  r.batches = 75;
  r.elapsed_s = 12.5;
  r.samples_per_s = 96;
  r.mb_per_s = 41.25;
  r.wait_time_ratio = 0.125;
  r.wait_time_ratio_with_cold_start = 0.1875;
  r.time_to_first_batch_s = 0.75;
  r.consumer_wait_s = 1.5;
  r.consumer_busy_s = 10.5;
  r.peak_rss_bytes = 734003200;
  r.baseline_rss_bytes = 104857600;
  r.memory_budget_bytes = 1073741824;
  r.budget_peak_bytes = 536870912;
  r.io_budget_bytes = 134217728;
  r.batch_budget_bytes = 939524096;
  r.full_batch_bytes = 50331648;
  r.batch_memory_reused = 70;
  r.batch_memory_fresh = 5;
  r.rows_waits = 2;
  r.rows_wait_s = 0.25;
  r.manifest_bytes = 2097152;
  r.manifest_mapped_bytes = 8388608;
  r.scratch_bytes = 3145728;
  r.scratch_peak_bytes = 6291456;
  r.scratch_sample_peak_bytes = 1048576;
  r.scratch_bytes_per_thread = 4194304;
  r.decode_bytes_per_thread = 268435456;
  r.bytes_copied_per_sample = 123.5;
  r.ranged_reads = MediaReader::Stats{40, 5000000, 3};
  r.regions_mapped_bytes = 536870912;
  r.stale_entries = StaleEntries{true, 2, "epoch 0, index 12, /data/a/000012.jpg: 180 tokens, its entry 160"};
  r.cpu_threads = 6;
  r.batch_size = 16;
  r.trainer_step_ms = 150;
  r.errors_total = 9;
  r.errors_by_kind = {{"corrupt_data", 4}, {"not_found", 2}, {"pack_skipped", 3}};
  r.first_errors = {
      SampleError{0, 17, "/data/a/000017.jpg", Status::CorruptData("bad \"huffman\" table")},
      SampleError{1, 3, "s3://b/x.mp4", Status::NotFound("no such key")}};
  StageReport read;
  read.metrics = StageMetrics{"read", "io", 32, 1250, 4.5, 6.25, 1.75};
  read.metrics.queue_fill = 0.375;
  read.metrics.mean_latency_ms = 12.25;
  read.utilization = 0.36;
  read.verdict = "blocked";
  StageReport cpu;
  cpu.metrics = StageMetrics{"cpu", "cpu", 6, 1210, 11.25, 0.5, 0.75};
  cpu.utilization = 0.9;
  cpu.verdict = "cpu-bound";
  StageReport batch;
  batch.metrics = StageMetrics{"batch", "assembly", 4, 75, 0.25, 11.5, 0.5};
  batch.metrics.queue_fill = 0.625;
  batch.utilization = 0.02;
  batch.verdict = "starved";
  r.stages = {read, cpu, batch};
  r.ops.push_back(
      OpReport{"image.decode", 7.5, 6.25, Latencies({3'000'000, 7'000'000, 30'000'000})});
  r.ops.push_back(OpReport{"py.augment", 2.5, 2.0, Latencies({900'000}), 0.5, -1, 0, -1,
                           "captions"});
  r.ops.push_back(OpReport{"video.decode", 3.0, 2.5, Latencies({20'000'000, 2'000'000'000}),
                           -1, 84, 8, 10.5, "clips"});
  r.read_latency = Latencies({40'000, 3'000'000, 30'000'000, 70'000'000'000});
  r.next_wait = Latencies({1'000'000, 200'000'000});
  r.budget_used_bytes = 268435456;
  r.batches_ready = 3;
  r.reads_inflight = 17;
  r.total_batches = 300;
  for (int i = 1; i <= 3; ++i) {
    TimelinePoint p;
    p.t_s = i;
    p.dt_s = 1;
    p.samples_per_s = 90.5 + i;
    p.wait_ratio = 0.0625 * i;
    p.utilization = {0.25 * i, 0.3};  // one stage short: written as 0
    p.budget_used = 0.125 * i;
    r.timeline.push_back(p);
  }
  r.storage.push_back(StorageStats{"local", "", 300, 0, {}, 0, 1, 12000000, 0, 0});
  r.storage.push_back(StorageStats{"s3", "https://s3.example:9000", 950, 12,
                                   {{"SlowDown", 8}, {"reset", 4}}, 8, 2, 500000000, 24, 4096});
  r.source = "shards s3://b/shards-{0000..0099}.tar (100 shards)";
  r.neighbour_distance = 3300.5;
  r.uniform_neighbour_distance = 400;
  r.shuffle_quality = 8.25125;
  r.entries = {EngineMetrics::Entry{"captions", 800, 5, 300000000},
               EngineMetrics::Entry{"clips", 400, 4, 212000000}};
  r.has_block_cache = true;
  r.block_cache = BlockCacheStats{110, 900, 35, 12, 40, 16777216, 67108864, 2048, 134217728,
                                  8388608};
  r.has_row_group_cache = true;
  r.row_group_cache = RowGroupCacheStats{60, 5, 14, 58, 2, 1, 7, 33554432, 50331648, 268435456};
  r.bottleneck = "cpu";
  r.advice = "CPU-bound: 6 threads are busy; raise execution.cpu_threads";
  r.batch_digests = {"00112233445566ff", "8899aabbccddeeff"};
  r.interrupted_by = "SIGINT";
  r.packed = true;
  r.pack_seq_len = 1024;
  r.pack = PackStats{75, 150, 1180, 140000, 13600, 2200, 6, 3, 1, 12, 65536, 262144, 4096, 70, 5,
                     60};
  return r;
}

TEST(RunReportGolden, JsonIsByteIdentical) {
  ExpectGolden("rich.json", RunReportToJson(RichReport()));
}

TEST(RunReportGolden, TextIsByteIdentical) {
  ExpectGolden("rich.txt", RunReportToText(RichReport()));
}

TEST(RunReportGolden, PrometheusIsByteIdentical) {
  ExpectGolden("rich.prom", PrometheusText(RichReport(), {{"node", "n\"1"}, {"rank", "0"}}));
}

// An empty report: every family that is always announced, with no samples.
TEST(RunReportGolden, AnEmptyReportsFormsAreByteIdentical) {
  ExpectGolden("empty.json", RunReportToJson(RunReport{}));
  ExpectGolden("empty.txt", RunReportToText(RunReport{}));
  ExpectGolden("empty.prom", PrometheusText(RunReport{}, {}));
}

// What JSON-in keeps, shown by writing the report read back out again.
TEST(RunReportGolden, JsonInReadsBackWhatItKeeps) {
  auto back = RunReportFromJson(RunReportToJson(RichReport()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectGolden("rich_back.json", RunReportToJson(*back));
  ExpectGolden("rich_back.txt", RunReportToText(*back));
}

// A report as the first observe/ version (2026-12-01) wrote it: no pack, ranged reads,
// shuffle, blend entries, decoders' bytes, or ops' entries and frames.
TEST(RunReportGolden, AnOlderReportReadsBack) {
  auto back = RunReportFromJson(Golden("older_report.json"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectGolden("older_back.json", RunReportToJson(*back));
}

// The variants the rich report does not take: a token budget instead of rows, and a
// failed run (its advice blanked in the JSON, "no advice" in the text), not interrupted.
TEST(RunReportGolden, BudgetPackingAndAFailedRunChangeOnlyTheirLines) {
  RunReport r = RichReport();
  r.pack_budget = true;
  r.failure = "resource_exhausted: too many bad samples";
  r.interrupted_by.clear();
  const std::string advice = "\"advice\": \"" + r.advice + "\",\n";
  ExpectGolden("rich.json",
               Edited(Golden("rich.json"),
                      {{"\"seq_len\": 1024", "\"max_tokens\": 1024"},
                       {advice + "  \"partial\": true,\n  \"interrupted_by\": \"SIGINT\",",
                        "\"advice\": \"\",\n  \"failure\": \"" + r.failure +
                            "\",\n  \"partial\": false,"}}),
               RunReportToJson(r));
  ExpectGolden(
      "rich.txt",
      Edited(Golden("rich.txt"),
             {{"  interrupted       by SIGINT: a partial report\n", ""},
              {"packing           150 rows of 1024 tokens, fill 91.1%, 13600 padding tokens",
               "max_tokens        150 batches of up to 1024 tokens, fill 91.1%, 13600 unused"},
              {"cpu: " + r.advice, "cpu (no advice: the run failed)"}}),
      RunReportToText(r));
}

}  // namespace report_golden_test
}  // namespace headrace
