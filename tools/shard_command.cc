#include <algorithm>
#include <cstdio>

#include "commands.h"
#include "shard.h"

namespace headrace::tools {
namespace {

// "256MB", "1GiB", "1000000": bytes, decimal (kB, MB, GB) or binary (KiB, MiB, GiB) units.
bool ParseSize(const std::string& text, int64_t* bytes) {
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    return false;
  }
  const std::string unit = text.substr(end);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "kB" || unit == "KB") scale = 1e3;
  if (unit == "MB") scale = 1e6;
  if (unit == "GB") scale = 1e9;
  if (unit == "KiB") scale = 1024.0;
  if (unit == "MiB") scale = 1024.0 * 1024;
  if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  if (scale == 0 || !(value * scale >= 1) || value * scale > 9e18) return false;
  *bytes = static_cast<int64_t>(value * scale);
  return true;
}

}  // namespace

int ShardCommand(const Args& args) {
  ShardOptions options;
  ArgReader r{args};
  std::string value;
  while (!r.done()) {
    const std::string flag = r.peek();
    if (flag == "--out" || flag == "--target-size" || flag == "--media") {
      if (!r.Value(flag, &value)) return 2;
      if (flag == "--out") options.out_dir = value;
      if (flag == "--media") {
        for (size_t begin = 0; begin <= value.size();) {
          const size_t comma = std::min(value.find(',', begin), value.size());
          options.media.push_back(value.substr(begin, comma - begin));
          begin = comma + 1;
        }
      }
      if (flag == "--target-size" && !ParseSize(value, &options.target_bytes)) {
        std::fprintf(stderr,
                     "headrace shard: --target-size needs a size such as 256MB or 1GiB, got "
                     "'%s'\n",
                     value.c_str());
        return 2;
      }
      continue;
    }
    if (flag.starts_with("--") || !options.manifest.empty()) {
      std::fprintf(stderr,
                   "headrace shard: unexpected '%s' (usage: headrace shard MANIFEST --out DIR "
                   "[--target-size 256MB] [--media image,video,views:4])\n",
                   flag.c_str());
      return 2;
    }
    options.manifest = flag;
    ++r.i;
  }
  if (options.manifest.empty() || options.out_dir.empty()) {
    std::fprintf(stderr, "headrace shard: MANIFEST and --out DIR are required\n");
    return 2;
  }
  auto stats = WriteShards(options);
  if (!stats.ok()) {
    std::fprintf(stderr, "headrace shard: %s\n", stats.status().ToString().c_str());
    return 1;
  }
  for (const std::string& skipped : stats->skipped) {
    std::fprintf(stderr, "headrace shard: skipped %s\n", skipped.c_str());
  }
  std::printf("wrote %lld samples in %lld shards (%.1f MB) to %s; skipped %zu bad records\n",
              static_cast<long long>(stats->samples), static_cast<long long>(stats->shards),
              stats->bytes / 1e6, options.out_dir.c_str(), stats->skipped.size());
  return 0;
}

}  // namespace headrace::tools
