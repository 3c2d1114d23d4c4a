// headrace index sizes CONFIG [--out PATH]: every sample's sizes (tokens, each image's and
// video's patches) by the chain's size pass on every core, nothing decoded, written as a
// size index (exec/size_index.h) that batch.balance.index deals the steps by. Prints the
// build rate and the index's read cost per sample.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "headrace/exec/size_index.h"
#include "headrace/exec/thread_pool.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/prepared.h"

namespace headrace::tools {
namespace {

constexpr const char* kIndexUsage =
    "usage: headrace index sizes CONFIG [--out PATH] [--header-bytes N] [--set key=value ...]\n"
    "  --out PATH          where the index goes (default: the config's batch.balance.index\n"
    "                      or batch.pack.index)\n"
    "  --header-bytes N    an image's first N bytes are read for its header (default 16384;\n"
    "                      one whose header lies past them is read again whole); 0: whole\n";

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int IndexCommand(const Args& args) {
  if (args.empty() || args[0] != "sizes") {
    std::fputs(kIndexUsage, stderr);
    return 2;
  }
  std::string config_path, out, value;
  std::vector<std::string> overrides;
  int64_t header_bytes = kIndexHeaderBytes;
  ArgReader r{args, 1};
  while (!r.done()) {
    const std::string flag = r.peek();
    if (flag == "--out") {
      if (!r.Value(flag, &out)) return 2;
    } else if (flag == "--header-bytes") {
      if (!r.Value(flag, &value)) return 2;
      int64_t n = -1;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || n < 0) {
        std::fprintf(stderr, "headrace index sizes: --header-bytes: '%s' is not a count of "
                             "bytes (0 or more)\n%s", value.c_str(), kIndexUsage);
        return 2;
      }
      header_bytes = n;
    } else if (flag == "--set") {
      if (!r.Value(flag, &value)) return 2;
      overrides.push_back(value);
    } else if (config_path.empty() && flag[0] != '-') {
      config_path = flag, ++r.i;
    } else {
      std::fprintf(stderr, "headrace index sizes: unknown argument '%s'\n%s", flag.c_str(), kIndexUsage);
      return 2;
    }
  }
  if (config_path.empty()) {
    std::fputs(kIndexUsage, stderr);
    return 2;
  }
  Result<PipelineSpec> spec = LoadPipelineConfig(config_path, overrides);
  if (!spec.ok()) {
    std::fprintf(stderr, "headrace index sizes: %s: %s\n", config_path.c_str(),
                 spec.status().ToString().c_str());
    return 2;
  }
  if (out.empty()) out = spec->batch.balance.index;
  if (out.empty()) out = spec->batch.pack.index;
  if (out.empty()) {
    std::fprintf(stderr, "headrace index sizes: give --out PATH or set batch.balance.index "
                         "(or batch.pack.index)\n");
    return 2;
  }
  if (!CheckWritable("headrace index sizes", "--out", out)) return 2;
  Result<SizeIndexing> indexing = PrepareSizeIndexing(*std::move(spec));
  if (!indexing.ok()) {
    std::fprintf(stderr, "headrace index sizes: %s\n", indexing.status().ToString().c_str());
    return 2;
  }
  const int64_t n = indexing->samples;
  const std::string& fingerprint = indexing->fingerprint;
  const auto built_from = std::chrono::steady_clock::now();
  Result<SizeIndex> built = indexing->Build(AvailableCores(), 0, -1, header_bytes);
  if (!built.ok()) {
    std::fprintf(stderr, "headrace index sizes: %s: %s\n", config_path.c_str(),
                 built.status().message().c_str());
    return 2;
  }
  const double build_seconds = SecondsSince(built_from);
  const int64_t untold = built->untold();
  if (Status st = built->Write(out); !st.ok()) {
    std::fprintf(stderr, "headrace index sizes: %s\n", st.ToString().c_str());
    return 1;
  }
  // What a run pays: reading the index, then an entry a sample.
  const auto read_from = std::chrono::steady_clock::now();
  Result<SizeIndex> index = SizeIndex::Read(out);
  if (!index.ok()) {
    std::fprintf(stderr, "headrace index sizes: %s\n", index.status().ToString().c_str());
    return 1;
  }
  const double load_seconds = SecondsSince(read_from);
  const auto entries_from = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  for (int64_t i = 0; i < n; ++i) tokens += index->At(i).value_or(SampleSize{}).tokens;
  const double entry_seconds = SecondsSince(entries_from);
  int64_t bytes_read = 0;
  if (const auto& storage = indexing->prepared->source().storage(); storage != nullptr) {
    for (const StorageStats& s : storage->Stats()) bytes_read += s.bytes;
  }
  std::printf("headrace index sizes: %lld samples (%lld not told: a balanced run costs them "
              "its step's mean), %lld tokens, fingerprint %s -> %s\n",
              static_cast<long long>(n), static_cast<long long>(untold),
              static_cast<long long>(tokens), fingerprint.c_str(), out.c_str());
  std::printf("built in %.2f s on %d threads: %.0f samples/s, %.1f MB of media read; read "
              "back in %.3f s, then %.0f ns an entry\n",
              build_seconds, AvailableCores(), build_seconds > 0 ? double(n) / build_seconds : 0.0,
              double(bytes_read) / 1e6, load_seconds,
              n > 0 ? 1e9 * entry_seconds / double(n) : 0.0);
  return untold == n && n > 0 ? 1 : 0;
}

}  // namespace headrace::tools
