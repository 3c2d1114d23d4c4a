// The metrics endpoint, the run monitor and the progress line against a real loader, and
// the Prometheus text and the plot on reports built by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <regex>
#include <thread>

#include "headrace/observe/metrics_server.h"
#include "headrace/observe/progress.h"
#include "headrace/observe/prometheus.h"
#include "headrace/observe/report_plot.h"
#include "headrace/observe/run_monitor.h"
#include "headrace/pipeline/test_pipelines.h"

namespace headrace {
namespace observe_test {

using ::testing::HasSubstr;
using ::testing::Not;

// A text-only pipeline of `samples` records, batches of 4, one op (test.index), 1 epoch.
PipelineSpec SmallPipeline(const std::string& name, int samples) {
  PipelineSpec spec =
      test::IndexPipeline(std::filesystem::path(testing::TempDir()) / name, samples);
  spec.epochs = 1;
  return spec;
}

// The value of the sample line `name` (with its labels, e.g. `x{a="b"}`), or -1.
double Value(const std::string& text, const std::string& name) {
  const auto at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

std::string Scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/metrics");
  EXPECT_TRUE(res) << "no answer on port " << port;
  if (!res) return "";
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->get_header_value("Content-Type"), HasSubstr("text/plain; version=0.0.4"));
  return "\n" + res->body;
}

TEST(MetricsServer, ServesTheLoadersMetricsAndTheyMoveWithTheRun) {
  auto loader = Loader::Make(SmallPipeline("metrics_moves", 40));
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  const Loader& l = **loader;
  auto server = MetricsServer::Start("127.0.0.1", 0, [&l] {
    return PrometheusText(BuildRunReport(l, 0), {{"node", "n1"}, {"rank", "0"}});
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_GT((*server)->port(), 0);
  const std::string before = Scrape((*server)->port());
  EXPECT_EQ(Value(before, R"(headrace_samples_total{node="n1",rank="0"})"), 0);
  for (int i = 0; i < 3; ++i) {
    auto batch = (*loader)->Next();
    ASSERT_TRUE(batch.ok() && batch->has_value());
  }
  const std::string after = Scrape((*server)->port());
  EXPECT_EQ(Value(after, R"(headrace_samples_total{node="n1",rank="0"})"), 12);
  EXPECT_EQ(Value(after, R"(headrace_batches_total{node="n1",rank="0"})"), 3);
  // The op ran on at least the 12 delivered samples, each in its latency histogram.
  EXPECT_GE(Value(after, R"(headrace_op_latency_seconds_count{node="n1",rank="0",op="test.index"})"),
            12);
  EXPECT_GE(Value(after, R"(headrace_next_wait_seconds_count{node="n1",rank="0"})"), 3);
  EXPECT_THAT(after, HasSubstr("# TYPE headrace_stage_seconds_total counter"));
  EXPECT_THAT(after, HasSubstr(R"(headrace_stage_seconds_total{node="n1",rank="0",stage="cpu",state="busy"})"));
  EXPECT_GT(Value(after, R"(headrace_memory_budget_bytes{node="n1",rank="0"})"), 0);
}

TEST(MetricsServer, APortInUseFailsNamingTheAddress) {
  auto first = MetricsServer::Start("127.0.0.1", 0, [] { return std::string("x"); });
  ASSERT_TRUE(first.ok());
  auto second = MetricsServer::Start("127.0.0.1", (*first)->port(), [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(second.status().message(),
              HasSubstr("127.0.0.1:" + std::to_string((*first)->port())));
  EXPECT_THAT(second.status().message(), HasSubstr("in use"));
  // The first still serves.
  EXPECT_EQ(Scrape((*first)->port()), "\nx");
}

TEST(MetricsServer, ParsesPortAndHostPort) {
  std::string host;
  int port = -1;
  ASSERT_TRUE(ParseListenAddress("9100", "0.0.0.0", &host, &port).ok());
  EXPECT_EQ(host, "0.0.0.0");
  EXPECT_EQ(port, 9100);
  ASSERT_TRUE(ParseListenAddress("127.0.0.1:0", "0.0.0.0", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 0);
  for (const char* bad : {"", "x", "70000", "-1", ":9100", "9100x"}) {
    EXPECT_FALSE(ParseListenAddress(bad, "0.0.0.0", &host, &port).ok()) << bad;
  }
}

// --- the endpoint under hostile clients -------------------------------------------------

// A client socket on 127.0.0.1:`port`. Its reads give up after 30 s, so that a server
// that never answers fails the test instead of hanging it.
class Client {
 public:
  explicit Client(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    timeval timeout{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Client() { ::close(fd_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connected_; }
  bool Send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Everything until the server closes; *closed false when the 30 s ran out first.
  std::string ReadToEnd(bool* closed) {
    std::string all;
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n > 0) {
        all.append(buffer, static_cast<size_t>(n));
        continue;
      }
      *closed = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
      return all;
    }
  }

 private:
  int fd_;
  bool connected_ = false;
};

constexpr const char* kScrape = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
// A request that never ends: the line and a header begun.
constexpr const char* kHalfRequest = "GET /metrics HTTP/1.1\r\nX-Slow: ";

// A full scrape on a new connection: the response, "" when none came.
std::string ScrapeRaw(int port) {
  Client c(port);
  if (!c.connected() || !c.Send(kScrape)) return "";
  bool closed = false;
  return c.ReadToEnd(&closed);
}

// The attack of issue 26: each client sends one more byte of a request that never ends,
// once a second, until stopped. The pause is the attacker's pace, not an ordering: the
// tests below order with responses and closes.
class Trickler {
 public:
  explicit Trickler(std::vector<Client*> clients)
      : clients_(std::move(clients)), thread_([this] { Run(); }) {}
  ~Trickler() { Stop(); }
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    while (!stopped_) {
      for (Client* c : clients_) c->Send("x");
      cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopped_; });
    }
  }
  std::vector<Client*> clients_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;  // guarded by mu_
  std::thread thread_;
};

TEST(MetricsServer, SlowClientsPastTheCapDoNotBlockAScrape) {
  // Twenty connections that never finish their request (issue 26: with them, 0 of 66
  // scrapes were answered), then a scrape: it is answered.
  auto server = MetricsServer::Start("127.0.0.1", 0, [] { return std::string("up 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<Client>(port));
    ASSERT_TRUE(slow.back()->connected());
    ASSERT_TRUE(slow.back()->Send(kHalfRequest));
  }
  const std::string response = ScrapeRaw(port);
  EXPECT_THAT(response, HasSubstr("HTTP/1.1 200 OK"));
  EXPECT_THAT(response, HasSubstr("\r\n\r\nup 1\n"));
}

TEST(MetricsServer, AConnectionPastTheCapEvictsTheOldestThatHasNotSentItsRequest) {
  MetricsServerOptions options;
  options.max_connections = 2;
  auto server = MetricsServer::Start("127.0.0.1", 0, [] { return std::string("m 1\n"); }, options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  // a and b are accepted in the order they connect; c is the third: a, the oldest still
  // sending its request, is closed unanswered to make room, b keeps its slot.
  Client a(port), b(port);
  ASSERT_TRUE(a.Send(kHalfRequest) && b.Send(kHalfRequest));
  EXPECT_THAT(ScrapeRaw(port), HasSubstr("HTTP/1.1 200 OK"));
  bool closed = false;
  EXPECT_EQ(a.ReadToEnd(&closed), "");
  EXPECT_TRUE(closed) << "the oldest slow client was not closed";
  // Ending b's request now gets it served: it was held, never more than the cap.
  ASSERT_TRUE(b.Send("1\r\n\r\n"));
  EXPECT_THAT(b.ReadToEnd(&closed), HasSubstr("\r\n\r\nm 1\n"));
}

TEST(MetricsServer, StoppingWithSlowClientsConnectedReturnsPromptly) {
  // Clients sending a byte a second kept `headrace run` (and a Python process with
  // metrics_port) from ever exiting: the destructor waited for them.
  auto server = MetricsServer::Start("127.0.0.1", 0, [] { return std::string("m 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  std::vector<std::unique_ptr<Client>> slow;
  std::vector<Client*> raw;
  for (int i = 0; i < 4; ++i) {
    slow.push_back(std::make_unique<Client>(port));
    ASSERT_TRUE(slow.back()->Send(kHalfRequest));
    raw.push_back(slow.back().get());
  }
  Trickler trickle(raw);
  // A scrape answered after them means the server has accepted them (in order).
  ASSERT_THAT(ScrapeRaw(port), HasSubstr("200 OK"));
  auto stopped = std::async(std::launch::async, [s = std::move(*server)]() mutable { s.reset(); });
  const bool returned = stopped.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  trickle.Stop();  // lets a server that waits for its clients return after all
  EXPECT_TRUE(returned) << "stopping the server waited for its slow clients";
  for (const auto& c : slow) {
    bool closed = false;
    c->ReadToEnd(&closed);
    EXPECT_TRUE(closed) << "a slow client is still connected after the server stopped";
  }
}

TEST(MetricsServer, AClientTricklingItsRequestIsClosedAtTheDeadline) {
  // Each byte used to restart a 5 s read timeout: a byte every second held the
  // connection for ever. Now it is closed at its deadline, unanswered.
  auto server = MetricsServer::Start("127.0.0.1", 0, [] { return std::string("m 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Client slow((*server)->port());
  ASSERT_TRUE(slow.Send(kHalfRequest));
  Trickler trickle({&slow});
  bool closed = false;
  EXPECT_EQ(slow.ReadToEnd(&closed), "");
  EXPECT_TRUE(closed) << "still open after 30 s of trickling";
}

TEST(MetricsServer, ARequestPastTheSizeCapIsRefused) {
  auto server = MetricsServer::Start("127.0.0.1", 0, [] { return std::string("m 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Client c((*server)->port());
  ASSERT_TRUE(c.Send("GET /metrics HTTP/1.1\r\nX-Big: " + std::string(64 << 10, 'a')));
  bool closed = false;
  EXPECT_THAT(c.ReadToEnd(&closed), HasSubstr("HTTP/1.1 431"));
  EXPECT_TRUE(closed);
}

TEST(MetricsServer, AnswersOnlyGetAndHeadOfItsTwoPaths) {
  auto server = MetricsServer::Start("127.0.0.1", 0, [] { return std::string("m 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  const auto ask = [port](const std::string& request) {
    Client c(port);
    bool closed = false;
    return c.Send(request) ? c.ReadToEnd(&closed) : std::string();
  };
  EXPECT_THAT(ask("GET /metrics?x=1 HTTP/1.1\r\n\r\n"), HasSubstr("\r\n\r\nm 1\n"));
  EXPECT_THAT(ask("GET / HTTP/1.0\n\n"), HasSubstr("metrics at /metrics"));
  const std::string head = ask("HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(head, HasSubstr("Content-Length: 4\r\n"));
  EXPECT_THAT(head, Not(HasSubstr("m 1")));
  EXPECT_THAT(ask("GET /nothing HTTP/1.1\r\n\r\n"), HasSubstr("HTTP/1.1 404"));
  EXPECT_THAT(ask("POST /metrics HTTP/1.1\r\n\r\n"), HasSubstr("HTTP/1.1 405"));
  EXPECT_THAT(ask("nonsense\r\n\r\n"), HasSubstr("HTTP/1.1 400"));
  // httplib's client (keep-alive by default) still scrapes.
  EXPECT_EQ(Scrape(port), "\nm 1\n");
}

TEST(MetricsServer, ListensOnLoopbackUnlessTheUserNamesAnAddress) {
  std::string host;
  int port = -1;
  ASSERT_TRUE(ParseListenAddress("9100", kDefaultMetricsHost, &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  ASSERT_TRUE(ParseListenAddress("0.0.0.0:9100", kDefaultMetricsHost, &host, &port).ok());
  EXPECT_EQ(host, "0.0.0.0");
  // A named address of every interface is served (and reached from here on loopback).
  auto server = MetricsServer::Start("0.0.0.0", 0, [] { return std::string("m 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ((*server)->url(), "http://127.0.0.1:" + std::to_string((*server)->port()) + "/metrics");
  EXPECT_EQ(Scrape((*server)->port()), "\nm 1\n");
}

RunReport HandMadeReport() {
  RunReport r;
  r.samples = 100;
  r.batches = 10;
  r.batch_size = 10;
  r.elapsed_s = 5;
  r.samples_per_s = 20;
  r.wait_time_ratio = 0.25;
  r.errors_total = 3;
  r.errors_by_kind = {{"corrupt", 2}, {"not_found", 1}};
  StageReport read;
  read.metrics = StageMetrics{"read", "io", 8, 100, 4.0, 0.5, 0.5};
  read.utilization = 0.8;
  StageReport cpu;
  cpu.metrics = StageMetrics{"cpu", "cpu", 2, 100, 1.0, 3.0, 1.0};
  cpu.utilization = 0.2;
  r.stages = {read, cpu};
  LatencyHistogram h;
  h.Record(3'000'000);
  h.Record(30'000'000);
  r.read_latency = h.Snapshot();
  r.ops.push_back(OpReport{"image.decode", 1.0, 10.0, h.Snapshot()});
  r.ops.push_back(OpReport{"video.decode", 2.0, 20.0, h.Snapshot(), -1, 84, 8, 10.5});
  r.storage.push_back(StorageStats{"s3", "http://x", 12, 2, {{"SlowDown", 2}}, 2, 0, 999, 1, 0});
  return r;
}

TEST(PrometheusText, RendersFamiliesLabelsAndCumulativeBuckets) {
  const std::string text =
      "\n" + PrometheusText(HandMadeReport(), {{"node", "a\"b\\c"}});
  EXPECT_EQ(Value(text, R"(headrace_samples_total{node="a\"b\\c"})"), 100);
  EXPECT_EQ(Value(text, R"(headrace_errors_total{node="a\"b\\c",kind="corrupt"})"), 2);
  EXPECT_EQ(Value(text, R"(headrace_stage_seconds_total{node="a\"b\\c",stage="read",state="busy"})"),
            4.0);
  EXPECT_EQ(Value(text, R"(headrace_storage_retries_total{node="a\"b\\c",backend="s3",reason="SlowDown"})"),
            2);
  // Cumulative: one read <= 5 ms, both <= 50 ms and +Inf.
  EXPECT_EQ(Value(text, R"(headrace_read_latency_seconds_bucket{node="a\"b\\c",le="0.0050000000000000001"})"),
            1);
  EXPECT_EQ(Value(text, R"(headrace_read_latency_seconds_bucket{node="a\"b\\c",le="0.050000000000000003"})"),
            2);
  EXPECT_EQ(Value(text, R"(headrace_read_latency_seconds_bucket{node="a\"b\\c",le="+Inf"})"), 2);
  EXPECT_NEAR(Value(text, R"(headrace_read_latency_seconds_sum{node="a\"b\\c"})"), 0.033, 1e-12);
  EXPECT_EQ(Value(text, R"(headrace_op_latency_seconds_count{node="a\"b\\c",op="image.decode"})"),
            2);
  // A video op's frames decoded and taken; the other ops have none.
  EXPECT_EQ(Value(text, R"(headrace_op_frames_decoded_total{node="a\"b\\c",op="video.decode"})"),
            84);
  EXPECT_EQ(Value(text, R"(headrace_op_frames_taken_total{node="a\"b\\c",op="video.decode"})"),
            8);
  EXPECT_EQ(text.find(R"(headrace_op_frames_decoded_total{node="a\"b\\c",op="image.decode"})"),
            std::string::npos);
  // Every sample line belongs to a family announced before it.
  const std::regex sample(R"(^(headrace_[a-z_]+?)(_bucket|_sum|_count)?(\{.*\})? \S+$)");
  std::string family;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    if (line[0] == '#') continue;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, sample)) << line;
    EXPECT_EQ(line.rfind(family, 0), 0u) << line << " outside " << family;
  }
}

TEST(RunReport, AVideoOpsFramesDecodedPerFrameTakenGoInTheJsonAndTextAndReadBack) {
  const RunReport r = HandMadeReport();
  const std::string json = RunReportToJson(r);
  EXPECT_NE(json.find("\"frames_decoded_per_taken\": 10.5"), std::string::npos) << json;
  EXPECT_NE(RunReportToText(r).find("frames decoded    video.decode 10.50 per frame taken (84 of 8)"),
            std::string::npos)
      << RunReportToText(r);
  auto back = RunReportFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->ops.size(), 2u);
  EXPECT_EQ(back->ops[0].frames_decoded, -1);  // image.decode decodes no video
  EXPECT_EQ(back->ops[1].frames_decoded, 84);
  EXPECT_EQ(back->ops[1].frames_taken, 8);
  EXPECT_DOUBLE_EQ(back->ops[1].frames_decoded_per_taken, 10.5);
}

TEST(RunReport, SamplesLostToPackingAreErrorsByKindInTheMetricsAndAFailedRunGivesNoAdvice) {
  RunReport r = HandMadeReport();
  r.bottleneck = "cpu";
  r.advice = "raise execution.cpu_threads";
  r.packed = true;
  r.pack_seq_len = 1024;
  r.pack.samples = 35;
  r.pack.skipped = 10;
  r.pack.truncated = 5;
  r.errors_by_kind["pack_skipped"] = 10;
  r.errors_by_kind["pack_truncated"] = 5;
  const std::string text = "\n" + PrometheusText(r, {});
  EXPECT_EQ(Value(text, R"(headrace_errors_total{kind="pack_skipped"})"), 10);
  EXPECT_EQ(Value(text, R"(headrace_pack_samples_total{outcome="truncated"})"), 5);
  EXPECT_EQ(Value(text, R"(headrace_pack_samples_total{outcome="skipped"})"), 10);
  EXPECT_EQ(Value(text, R"(headrace_pack_samples_total{outcome="packed"})"), 35);
  EXPECT_NE(RunReportToText(r).find(": " + r.advice), std::string::npos);
  r.failure = "resource_exhausted: too many bad samples";
  const std::string failed = RunReportToText(r);
  EXPECT_EQ(failed.find(r.advice), std::string::npos) << failed;
  EXPECT_NE(failed.find("(no advice: the run failed)\n"), std::string::npos) << failed;
  const std::string json = RunReportToJson(r);
  EXPECT_NE(json.find("\"advice\": \"\""), std::string::npos) << json;
  auto back = RunReportFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->failure, r.failure);
  EXPECT_EQ(back->errors_by_kind.at("pack_truncated"), 5);
  EXPECT_EQ(back->pack.skipped, 10);
  EXPECT_EQ(back->pack_seq_len, 1024);
}

TEST(RunMonitor, RecordsATimelineOfTheRunAndCallsBackEachSample) {
  auto loader = Loader::Make(SmallPipeline("monitor_timeline", 64));
  ASSERT_TRUE(loader.ok());
  int calls = 0;
  RunMonitorOptions options;
  options.interval_s = 3600;  // only Stop() samples: the test decides when
  options.on_sample = [&calls](const RunReport&, const TimelinePoint&) { ++calls; };
  RunMonitor monitor(**loader, 0, options);
  int64_t batches = 0;
  while (true) {
    auto batch = (*loader)->Next();
    ASSERT_TRUE(batch.ok());
    if (!batch->has_value()) break;
    ++batches;
  }
  EXPECT_EQ(batches, 16);
  monitor.Stop();
  monitor.Stop();  // idempotent
  const std::vector<TimelinePoint> timeline = monitor.timeline();
  ASSERT_EQ(timeline.size(), 1u);
  EXPECT_EQ(calls, 1);
  EXPECT_GT(timeline[0].t_s, 0);
  EXPECT_EQ(timeline[0].utilization.size(), 2u);  // cpu, batch: no media reads
  EXPECT_GT(timeline[0].samples_per_s, 0);
  EXPECT_GT(timeline[0].rss_bytes, 0);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  EXPECT_EQ(timeline[0].heap_system_bytes, -1);  // not glibc's allocator
#else
  EXPECT_GT(timeline[0].heap_in_use_bytes, 0);
  EXPECT_GE(timeline[0].heap_system_bytes, timeline[0].heap_in_use_bytes);
#endif
}

TEST(RunMonitor, StepsAndMergesPointsByTheirLengths) {
  RunReport a = HandMadeReport();
  RunReport b = a;
  b.elapsed_s = a.elapsed_s + 2;
  b.samples = a.samples + 40;
  b.consumer_wait_s = a.consumer_wait_s + 0.5;
  b.consumer_busy_s = a.consumer_busy_s + 1.5;
  b.stages[1].metrics.busy_s += 1.0;
  b.memory_budget_bytes = 1000;
  b.budget_used_bytes = 250;
  const TimelinePoint p = TimelineStep(a, b);
  EXPECT_DOUBLE_EQ(p.dt_s, 2);
  EXPECT_DOUBLE_EQ(p.samples_per_s, 20);
  EXPECT_DOUBLE_EQ(p.wait_ratio, 0.25);
  EXPECT_DOUBLE_EQ(p.utilization[0], 0);
  EXPECT_DOUBLE_EQ(p.utilization[1], 0.5);
  EXPECT_DOUBLE_EQ(p.budget_used, 0.25);
  TimelinePoint q = p;
  q.t_s += 6;
  q.dt_s = 6;
  q.samples_per_s = 40;
  const TimelinePoint m = MergePoints(p, q);
  EXPECT_DOUBLE_EQ(m.dt_s, 8);
  EXPECT_DOUBLE_EQ(m.t_s, q.t_s);
  EXPECT_DOUBLE_EQ(m.samples_per_s, 35);  // (20×2 + 40×6) / 8
}

TEST(Progress, ShowsRateWaitBottleneckAndEta) {
  RunReport r = HandMadeReport();
  r.total_batches = 30;
  r.bottleneck = "read";
  // 20 batches left at 2 batches/s (20 samples/s, batches of 10): 10 s.
  const std::string line = ProgressLine(r, 20, -1);
  EXPECT_THAT(line, HasSubstr("100 samples"));
  EXPECT_THAT(line, HasSubstr("20 samples/s"));
  EXPECT_THAT(line, HasSubstr("wait 25.0%"));
  EXPECT_THAT(line, HasSubstr("bottleneck read"));
  EXPECT_THAT(line, HasSubstr("batch 10/30"));
  EXPECT_THAT(line, HasSubstr("ETA 0:10"));
  EXPECT_THAT(line, HasSubstr("skipped 3"));
  // --max-batches shorter than the run bounds the ETA; an unbounded run has none.
  EXPECT_THAT(ProgressLine(r, 20, 14), HasSubstr("batch 10/14  ETA 0:02"));
  r.total_batches = -1;
  EXPECT_THAT(ProgressLine(r, 20, -1), Not(HasSubstr("ETA")));
  r.batches = 0;
  EXPECT_THAT(ProgressLine(r, 0, -1), HasSubstr("waiting for the first batch"));
}

TEST(Progress, PrintsPlainLinesOnlyEveryPeriodOffATerminal) {
  char* buf = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&buf, &size);
  ProgressPrinter printer(out, /*live=*/false, /*period_s=*/10, -1);
  RunReport r = HandMadeReport();
  TimelinePoint p;
  p.dt_s = 1;
  p.samples_per_s = 20;
  for (double t : {11.0, 12.0, 15.0, 21.5, 22.0}) {
    r.elapsed_s = t;
    printer.Update(r, p);
  }
  printer.Finish();  // nothing to clear off a terminal
  std::fclose(out);
  const std::string text(buf, size);
  std::free(buf);
  // At 11 s (10 s after 0) and at 21.5 s (10 s after 11): two lines.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_THAT(text, Not(HasSubstr("\r")));
}

TEST(ReportPlot, DrawsTheTimelineAsSvgAndHtml) {
  RunReport r = HandMadeReport();
  TimelinePoint p;
  p.dt_s = 1;
  for (int i = 1; i <= 5; ++i) {
    p.t_s = i;
    p.samples_per_s = 10.0 * i;
    p.wait_ratio = 0.1;
    p.utilization = {0.9, 0.3};
    r.timeline.push_back(p);
  }
  r.bottleneck = "read";
  r.advice = "raise <io_inflight>";
  const std::string json = RunReportToJson(r);
  auto svg = PlotRunReport(json, PlotFormat::kSvg);
  ASSERT_TRUE(svg.ok()) << svg.status().ToString();
  EXPECT_EQ(svg->rfind("<svg", 0), 0u);
  EXPECT_THAT(*svg, HasSubstr("read busy"));
  EXPECT_THAT(*svg, HasSubstr("cpu busy"));
  EXPECT_THAT(*svg, HasSubstr("trainer waiting"));
  // Five points per series: stages, wait, rate, budget.
  EXPECT_EQ(std::count(svg->begin(), svg->end(), '\n') > 10, true);
  EXPECT_THAT(*svg, HasSubstr("points=\""));
  auto html = PlotRunReport(json, PlotFormat::kHtml);
  ASSERT_TRUE(html.ok());
  EXPECT_THAT(*html, HasSubstr("<!doctype html>"));
  EXPECT_THAT(*html, HasSubstr("raise &lt;io_inflight&gt;"));  // escaped
  // Without a timeline: bars of the totals.
  r.timeline.clear();
  auto bars = PlotRunReport(RunReportToJson(r), PlotFormat::kSvg);
  ASSERT_TRUE(bars.ok());
  EXPECT_THAT(*bars, HasSubstr("no timeline in this report"));
  // Not a report.
  EXPECT_FALSE(PlotRunReport("{\"a\": 1}", PlotFormat::kSvg).ok());
  EXPECT_FALSE(PlotRunReport("not json", PlotFormat::kHtml).ok());
}

}  // namespace observe_test
}  // namespace headrace
