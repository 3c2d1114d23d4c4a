// headrace upload DIR s3://bucket/prefix: puts every file under DIR into the bucket,
// keys = prefix + path relative to DIR, many PUTs in flight on one I/O thread.
// headrace ls PATTERN: lists objects under an S3 prefix or matching a glob.
//
// Both take the storage flags (--endpoint, --region, --profile, --anonymous,
// --addressing-style) with the same meaning as a config's `storage:` section;
// credentials come from the environment or the shared credentials file.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "commands.h"
#include "headrace/core/clock.h"
#include "headrace/io/object_storage.h"
#include "headrace/io/uri.h"

namespace headrace::tools {
namespace {

// Consumes one storage flag at r.i into `spec`; returns 0 when the flag is not one,
// 1 when consumed, -1 on a usage error (printed).
int StorageFlag(ArgReader& r, StorageSpec* spec) {
  const std::string flag = r.peek();
  std::string value;
  if (flag == "--anonymous") {
    spec->anonymous = true;
    ++r.i;
    return 1;
  }
  if (flag != "--endpoint" && flag != "--region" && flag != "--profile" &&
      flag != "--addressing-style") {
    return 0;
  }
  if (!r.Value(flag, &value)) return -1;
  if (flag == "--endpoint") spec->endpoint = value;
  if (flag == "--region") spec->region = value;
  if (flag == "--profile") spec->profile = value;
  if (flag == "--addressing-style") {
    if (value == "auto") {
      spec->addressing_style = AddressingStyle::kAuto;
    } else if (value == "path") {
      spec->addressing_style = AddressingStyle::kPath;
    } else if (value == "virtual") {
      spec->addressing_style = AddressingStyle::kVirtual;
    } else {
      std::fprintf(stderr,
                   "headrace: --addressing-style: unknown value '%s' (allowed: auto, "
                   "path, virtual)\n",
                   value.c_str());
      return -1;
    }
  }
  return 1;
}

constexpr const char* kUploadUsage =
    "usage: headrace upload DIR s3://bucket/prefix [--create-bucket] [--inflight N] "
    "[--endpoint URL] [--region R] [--profile P] [--anonymous] [--addressing-style "
    "auto|path|virtual]\n";

}  // namespace

UploadStats UploadFiles(ObjectStore& store, const std::string& dir, const std::string& base,
                        int inflight, const char* command) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());

  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;
  UploadStats stats;
  stats.files = static_cast<int64_t>(files.size());
  auto local = MakeLocalStorage({.threads = 1});
  for (const auto& path : files) {
    auto data = local->Read(path.string());
    if (!data.ok()) {
      std::fprintf(stderr, "%s: %s\n", command, data.status().ToString().c_str());
      std::lock_guard lock(mu);
      ++stats.failed;
      continue;
    }
    const std::string uri = base + std::filesystem::relative(path, dir).generic_string();
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return pending < inflight; });
      ++pending;
      stats.bytes += static_cast<int64_t>(data->size());
    }
    store.WriteAsync(uri, std::move(data).value(), [&, uri](Status s) {
      std::lock_guard lock(mu);
      if (!s.ok()) {
        ++stats.failed;
        std::fprintf(stderr, "%s: %s\n", command, s.ToString().c_str());
      }
      --pending;
      cv.notify_all();
    });
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return pending == 0; });
  return stats;
}

int UploadCommand(const Args& args) {
  StorageSpec spec;
  std::string dir, dest, value;
  bool create_bucket = false;
  int inflight = 32;
  ArgReader r{args};
  while (!r.done()) {
    const int storage = StorageFlag(r, &spec);
    if (storage < 0) return 2;
    if (storage > 0) continue;
    const std::string flag = r.peek();
    if (flag == "--create-bucket") {
      create_bucket = true;
      ++r.i;
    } else if (flag == "--inflight") {
      if (!r.Value(flag, &value)) return 2;
      inflight = std::max(1, std::atoi(value.c_str()));
    } else if (flag[0] != '-' && dir.empty()) {
      dir = flag, ++r.i;
    } else if (flag[0] != '-' && dest.empty()) {
      dest = flag, ++r.i;
    } else {
      std::fprintf(stderr, "headrace upload: unknown argument '%s'\n%s", flag.c_str(),
                   kUploadUsage);
      return 2;
    }
  }
  if (dir.empty() || dest.empty()) {
    std::fputs(kUploadUsage, stderr);
    return 2;
  }
  auto location = ParseS3Uri(dest);
  if (!location.ok()) {
    std::fprintf(stderr, "headrace upload: %s\n", location.status().ToString().c_str());
    return 2;
  }
  if (!std::filesystem::is_directory(dir)) {
    std::fprintf(stderr, "headrace upload: not a directory: %s\n", dir.c_str());
    return 2;
  }
  auto store = MakeS3Storage(spec);
  if (!store.ok()) {
    std::fprintf(stderr, "headrace upload: %s\n", store.status().ToString().c_str());
    return 2;
  }
  if (create_bucket) {
    Status created = (*store)->CreateBucket("s3://" + location->bucket);
    if (!created.ok()) {
      std::fprintf(stderr, "headrace upload: %s\n", created.ToString().c_str());
      return 1;
    }
  }
  std::string prefix = location->key;
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  const std::string base = "s3://" + location->bucket + "/" + (prefix.empty() ? "" : prefix + "/");

  const auto start = Clock::now();
  const UploadStats up = UploadFiles(**store, dir, base, inflight, "headrace upload");
  const double seconds = SecondsSince(start);
  std::printf("uploaded %lld of %lld files (%.1f MB) to %s in %.2f s\n",
              static_cast<long long>(up.files - up.failed), static_cast<long long>(up.files),
              up.bytes / 1e6, base.c_str(), seconds);
  return up.failed == 0 ? 0 : 1;
}

int ListCommand(const Args& args) {
  StorageSpec spec;
  std::string pattern, value;
  int page_size = 1000;
  ArgReader r{args};
  while (!r.done()) {
    const int storage = StorageFlag(r, &spec);
    if (storage < 0) return 2;
    if (storage > 0) continue;
    const std::string flag = r.peek();
    if (flag == "--page-size") {
      if (!r.Value(flag, &value)) return 2;
      page_size = std::clamp(std::atoi(value.c_str()), 1, 1000);
    } else if (flag[0] != '-' && pattern.empty()) {
      pattern = flag, ++r.i;
    } else {
      std::fprintf(stderr, "headrace ls: unknown argument '%s'\n", flag.c_str());
      return 2;
    }
  }
  if (pattern.empty()) {
    std::fputs("usage: headrace ls s3://bucket/prefix-or-glob [--page-size N] [storage flags]\n",
               stderr);
    return 2;
  }
  auto store = MakeS3Storage(spec);
  if (!store.ok()) {
    std::fprintf(stderr, "headrace ls: %s\n", store.status().ToString().c_str());
    return 2;
  }
  auto objects = (*store)->List(pattern, page_size);
  if (!objects.ok()) {
    std::fprintf(stderr, "headrace ls: %s\n", objects.status().ToString().c_str());
    return 1;
  }
  int64_t total = 0;
  for (const ObjectInfo& o : *objects) {
    std::printf("%12lld  %s\n", static_cast<long long>(o.size), o.uri.c_str());
    total += o.size;
  }
  std::printf("%zu objects, %lld bytes, %lld requests\n", objects->size(),
              static_cast<long long>(total), static_cast<long long>((*store)->stats().requests));
  return 0;
}

}  // namespace headrace::tools
