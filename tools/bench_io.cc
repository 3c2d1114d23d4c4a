// headrace bench io: object-storage read throughput against a local server that holds
// every response back by an injected latency (object storage's first-byte latency).
//
// 1. The server's own limit: objects/s at zero latency with 128 reads in flight (client
//    and server share the machine, so this is a lower bound of the server alone).
// 2. For io_inflight = 1, 8, 32, 128 at --latency-ms: objects/s and MB/s through the S3
//    backend (anonymous, path-style), against ideal = min(server limit,
//    inflight / latency). Rows go to --report (bench/io.json), a JSON list.
// 3. With --config: the same pipeline end to end from local disk and from the server
//    (the manifest's folder served as s3://bench/...), samples/s on the same cores,
//    written to --e2e-report (bench/io_e2e.json).
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "commands.h"
#include "headrace/core/clock.h"
#include "headrace/core/json_writer.h"
#include "headrace/exec/thread_pool.h"
#include "headrace/io/loopback_server.h"
#include "headrace/io/object_storage.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/loader.h"
#include "interrupt.h"

namespace headrace::tools {
namespace {

struct IoRow {
  int inflight = 0;
  double objects_per_s = 0;
  double mb_per_s = 0;
  double ideal_objects_per_s = 0;
  int64_t objects = 0;
  int64_t errors = 0;
};

// Keeps `inflight` reads of the objects going for `seconds`; counts completions.
IoRow Drive(ObjectStore& store, int objects, int inflight, double seconds) {
  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;
  int64_t done = 0, errors = 0, bytes = 0;
  const auto start = Clock::now();
  const auto until =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  int64_t issued = 0;
  while (Clock::now() < until) {
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return pending < inflight; });
      ++pending;
    }
    store.ReadAsync("s3://bench/o" + std::to_string(issued++ % objects), [&](Result<Buffer> r) {
      const bool in_window = Clock::now() < until;  // the drain after it is not counted
      std::lock_guard lock(mu);
      --pending;
      if (!in_window) {
        errors += r.ok() ? 0 : 1;
      } else if (r.ok()) {
        ++done;
        bytes += static_cast<int64_t>(r->size());
      } else {
        ++errors;
      }
      cv.notify_all();
    });
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return pending == 0; });
  const double elapsed = std::chrono::duration<double>(until - start).count();
  IoRow row;
  row.inflight = inflight;
  row.objects = done;
  row.errors = errors;
  row.objects_per_s = done / elapsed;
  row.mb_per_s = bytes / elapsed / 1e6;
  return row;
}

std::vector<int> ParseList(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (int v = std::atoi(item.c_str()); v > 0) out.push_back(v);
  }
  return out;
}

struct E2eRun {
  double samples_per_s = 0;
  int64_t samples = 0;
  int64_t errors = 0;
};

Result<E2eRun> RunPipeline(const PipelineSpec& spec, int64_t max_batches) {
  HR_ASSIGN_OR_RETURN(auto loader, Loader::Make(spec));
  E2eRun run;
  const auto start = Clock::now();
  for (int64_t n = 0; n < max_batches; ++n) {
    HR_ASSIGN_OR_RETURN(auto batch, loader->Next());
    if (!batch) break;
    run.samples += batch->size();
  }
  run.samples_per_s = run.samples / SecondsSince(start);
  run.errors = loader->engine_metrics().samples_failed;
  return run;
}

// Serves every file under `dir` as /bench/<relative path>.
Result<int64_t> ServeDirectory(LoopbackServer& server, const std::string& dir) {
  int64_t bytes = 0;
  auto local = MakeLocalStorage({.threads = 1});
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    HR_ASSIGN_OR_RETURN(Buffer b, local->Read(entry.path().string()));
    const auto size = b.size();
    const std::string rel = std::filesystem::relative(entry.path(), dir).generic_string();
    server.Put("/bench/" + UriEncode(rel, true), b);
    bytes += static_cast<int64_t>(size);
  }
  return bytes;
}

}  // namespace

// headrace bench serve DIR [--latency-ms 20]: the benchmark's object server on its own,
// for scripts (bench/shards.py): every file under DIR as s3://bench/<path>, each response
// held back by the latency. Prints "endpoint http://127.0.0.1:PORT" and serves until
// SIGINT or SIGTERM.
int BenchServeCommand(const Args& args) {
  std::string dir, value;
  double latency_ms = 20;
  ArgReader r{args};
  while (!r.done()) {
    const std::string flag = r.peek();
    if (flag == "--latency-ms") {
      if (!r.Value(flag, &value)) return 2;
      latency_ms = std::atof(value.c_str());
    } else if (dir.empty() && !flag.starts_with("--")) {
      dir = flag;
      ++r.i;
    } else {
      std::fprintf(stderr, "usage: headrace bench serve DIR [--latency-ms 20]\n");
      return 2;
    }
  }
  if (dir.empty() || !(latency_ms >= 0)) {
    std::fprintf(stderr, "usage: headrace bench serve DIR [--latency-ms 20]\n");
    return 2;
  }
  InterruptWatcher interrupt;
  auto server = LoopbackServer::Start(
      std::chrono::microseconds(static_cast<int64_t>(latency_ms * 1000)));
  if (!server.ok()) {
    std::fprintf(stderr, "headrace bench serve: %s\n", server.status().ToString().c_str());
    return 1;
  }
  auto bytes = ServeDirectory(**server, dir);
  if (!bytes.ok()) {
    std::fprintf(stderr, "headrace bench serve: %s\n", bytes.status().ToString().c_str());
    return 1;
  }
  std::printf("endpoint %s (%.1f MB of %s as s3://bench/, %.0f ms latency)\n",
              (*server)->origin().c_str(), *bytes / 1e6, dir.c_str(), latency_ms);
  std::fflush(stdout);
  while (!interrupt.WaitFor(std::chrono::seconds(1))) {
  }
  const LoopbackServerStats stats = (*server)->stats();
  std::printf("served %lld requests\n", static_cast<long long>(stats.requests));
  return 0;
}

int BenchIoCommand(const Args& args) {
  double latency_ms = 20, seconds = 2;
  int64_t object_bytes = 64 << 10;
  int objects = 512;
  std::vector<int> inflights = {1, 8, 32, 128};
  std::string report = "bench/io.json", e2e_report = "bench/io_e2e.json", config, value;
  int64_t samples = 1000;
  ArgReader r{args};
  while (!r.done()) {
    const std::string flag = r.peek();
    if (!r.Value(flag, &value)) return 2;
    if (flag == "--latency-ms") {
      latency_ms = std::atof(value.c_str());
    } else if (flag == "--seconds") {
      seconds = std::max(0.1, std::atof(value.c_str()));
    } else if (flag == "--object-bytes") {
      object_bytes = std::max<int64_t>(1, std::atoll(value.c_str()));
    } else if (flag == "--objects") {
      objects = std::max(1, std::atoi(value.c_str()));
    } else if (flag == "--inflight") {
      inflights = ParseList(value);
    } else if (flag == "--report") {
      report = value;
    } else if (flag == "--config") {
      config = value;
    } else if (flag == "--samples") {
      samples = std::max<int64_t>(1, std::atoll(value.c_str()));
    } else if (flag == "--e2e-report") {
      e2e_report = value;
    } else {
      std::fprintf(stderr,
                   "usage: headrace bench io [--latency-ms 20] [--seconds 2] "
                   "[--object-bytes 65536] [--objects 512] [--inflight 1,8,32,128] "
                   "[--report bench/io.json] [--config CONFIG --samples N --e2e-report PATH]\n");
      return 2;
    }
  }
  auto server = LoopbackServer::Start();
  if (!server.ok()) {
    std::fprintf(stderr, "headrace bench io: %s\n", server.status().ToString().c_str());
    return 1;
  }
  for (int i = 0; i < objects; ++i) {
    Buffer b = *Buffer::Allocate(static_cast<size_t>(object_bytes));
    std::fill(b.mutable_data(), b.mutable_data() + b.size(), static_cast<uint8_t>(i));
    (*server)->Put("/bench/o" + std::to_string(i), b);
  }
  StorageSpec spec;
  spec.endpoint = (*server)->origin();
  spec.anonymous = true;
  auto store = MakeS3Storage(spec);
  if (!store.ok()) {
    std::fprintf(stderr, "headrace bench io: %s\n", store.status().ToString().c_str());
    return 1;
  }
  Drive(**store, objects, 32, 0.3);  // warm-up: connections, allocator
  const IoRow limit = Drive(**store, objects, 128, seconds);
  std::printf(
      "server limit (no latency, 128 in flight, %lld-byte objects): %.0f objects/s, "
      "%.0f MB/s\n",
      static_cast<long long>(object_bytes), limit.objects_per_s, limit.mb_per_s);
  (*server)->SetLatency(std::chrono::microseconds(static_cast<int64_t>(latency_ms * 1000)));
  std::printf(
      "latency %.1f ms per request:\n  inflight  objects/s      MB/s    ideal  "
      "efficiency\n",
      latency_ms);
  JsonWriter w;
  w.BeginArray();
  int rc = 0;
  for (int inflight : inflights) {
    IoRow row = Drive(**store, objects, inflight, seconds);
    row.ideal_objects_per_s = std::min(limit.objects_per_s, inflight * 1e3 / latency_ms);
    std::printf("  %8d  %9.1f  %8.1f  %7.1f  %9.3f%s\n", inflight, row.objects_per_s, row.mb_per_s,
                row.ideal_objects_per_s, row.objects_per_s / row.ideal_objects_per_s,
                row.errors ? "  (errors!)" : "");
    if (row.errors) rc = 1;
    w.BeginObject().Key("inflight").Int(inflight).Key("objects_per_s").Double(row.objects_per_s);
    w.Key("mb_per_s")
        .Double(row.mb_per_s)
        .Key("ideal_objects_per_s")
        .Double(row.ideal_objects_per_s);
    w.Key("latency_ms").Double(latency_ms).Key("object_bytes").Int(object_bytes);
    w.Key("server_limit_objects_per_s").Double(limit.objects_per_s);
    w.Key("objects").Int(row.objects).Key("errors").Int(row.errors).EndObject();
  }
  w.EndArray();
  const ObjectStoreStats stats = (*store)->stats();
  std::printf("requests %lld, connections opened %lld, bytes copied beyond the one write %lld\n",
              static_cast<long long>(stats.requests), static_cast<long long>(stats.connections),
              static_cast<long long>(stats.bytes_copied));
  if (!report.empty() && !WriteTextFile(report, w.str() + "\n")) rc = 1;
  store->reset();
  if (config.empty()) return rc;

  // End to end: the same pipeline from local disk and from the latency server.
  auto pipeline = LoadPipelineConfig(config);
  if (!pipeline.ok()) {
    std::fprintf(stderr, "headrace bench io: %s\n", pipeline.status().ToString().c_str());
    return 2;
  }
  const std::string dir = std::filesystem::path(pipeline->source.manifest).parent_path().string();
  auto served = ServeDirectory(**server, dir.empty() ? "." : dir);
  if (!served.ok()) {
    std::fprintf(stderr, "headrace bench io: %s\n", served.status().ToString().c_str());
    return 1;
  }
  PipelineSpec local = *pipeline;
  local.epochs = std::max<int64_t>(local.epochs.value_or(1), 1000);
  if (local.execution.cpu_threads == 0) local.execution.cpu_threads = AvailableCores();
  PipelineSpec remote = local;
  remote.source.manifest =
      "s3://bench/" + std::filesystem::path(pipeline->source.manifest).filename().string();
  remote.source.root.clear();
  remote.storage = spec;
  const int64_t batches = std::max<int64_t>(1, samples / local.batch.size);
  std::printf(
      "\nend to end: %s, %lld batches of %lld, %d CPU threads, io_inflight %d, "
      "latency %.1f ms (%.1f MB served)\n",
      config.c_str(), static_cast<long long>(batches), static_cast<long long>(local.batch.size),
      local.execution.cpu_threads, local.execution.io_inflight, latency_ms, *served / 1e6);
  double local_sum = 0, remote_sum = 0;
  int64_t remote_errors = 0;
  constexpr int kRounds = 2;
  for (int round = 0; round < kRounds; ++round) {
    auto a = RunPipeline(local, batches);
    auto b = RunPipeline(remote, batches);
    if (!a.ok() || !b.ok()) {
      std::fprintf(stderr, "headrace bench io: %s\n",
                   (!a.ok() ? a.status() : b.status()).ToString().c_str());
      return 1;
    }
    std::printf("  round %d: local %.1f samples/s, object storage %.1f samples/s\n", round + 1,
                a->samples_per_s, b->samples_per_s);
    local_sum += a->samples_per_s;
    remote_sum += b->samples_per_s;
    remote_errors += b->errors;
  }
  const double ratio = remote_sum / local_sum;
  std::printf("  mean: local %.1f, object storage %.1f samples/s: ratio %.3f (target >= 0.9)\n",
              local_sum / kRounds, remote_sum / kRounds, ratio);
  JsonWriter e;
  e.BeginObject().Key("config").String(config).Key("latency_ms").Double(latency_ms);
  e.Key("cpu_threads").Int(local.execution.cpu_threads);
  e.Key("io_inflight").Int(local.execution.io_inflight).Key("batches").Int(batches);
  e.Key("local_samples_per_s").Double(local_sum / kRounds);
  e.Key("object_storage_samples_per_s").Double(remote_sum / kRounds);
  e.Key("ratio").Double(ratio).Key("object_storage_errors").Int(remote_errors).EndObject();
  if (!e2e_report.empty() && !WriteTextFile(e2e_report, e.str() + "\n")) rc = 1;
  return rc;
}

}  // namespace headrace::tools
