// headrace materialize CONFIG --to URI: the pipeline's preprocessed samples as shards
// (materialize.h). A local --to is written in place; an s3:// one is written to a
// local staging folder first and uploaded with the config's storage settings.
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "headrace/core/clock.h"
#include "headrace/io/object_storage.h"
#include "headrace/io/uri.h"
#include "headrace/pipeline/config.h"
#include "materialize.h"

namespace headrace::tools {
namespace {

constexpr const char* kMaterializeUsage =
    "usage: headrace materialize CONFIG --to URI [--set key=value ...] [--epochs LIST|all] "
    "[--shard-size BYTES] [--quiet]\n";

// "all" (the config's epochs), or "0,1,3": the epochs to write. Prints why not.
bool ParseEpochs(const std::string& text, const PipelineSpec& spec, std::vector<int64_t>* out) {
  if (text == "all") {
    if (!spec.epochs) {
      std::fputs("headrace materialize: --epochs all: the config's epochs is null (unbounded); "
                 "give a list\n", stderr);
      return false;
    }
    for (int64_t e = 0; e < *spec.epochs; ++e) out->push_back(e);
    return true;
  }
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    char* end = nullptr;
    const long long e = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || e < 0 ||
        std::find(out->begin(), out->end(), e) != out->end()) {
      std::fprintf(stderr,
                   "headrace materialize: --epochs needs 'all' or a list of distinct epochs "
                   "(0,1,2), got '%s'\n", text.c_str());
      return false;
    }
    out->push_back(e);
    start = comma + 1;
  }
  return true;
}

// Where the files go before an upload: a fresh folder under $TMPDIR.
std::string MakeStagingDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "headrace-materialize-XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) return "";
  return pattern;
}

}  // namespace

int MaterializeCommand(const Args& args) {
  std::string config_path, to, epochs_text, shard_size, value;
  std::vector<std::string> overrides;
  bool quiet = false;
  ArgReader r{args};
  while (!r.done()) {
    const std::string flag = r.peek();
    if (flag == "--to" || flag == "--epochs" || flag == "--shard-size") {
      if (!r.Value(flag, &value)) return 2;
      (flag == "--to" ? to : flag == "--epochs" ? epochs_text : shard_size) = value;
    } else if (flag == "--set") {
      if (!r.Value(flag, &value)) return 2;
      overrides.push_back(value);
    } else if (flag == "--quiet") {
      quiet = true, ++r.i;
    } else if (!flag.empty() && flag[0] == '-') {
      std::fprintf(stderr,
                   "headrace materialize: unknown flag '%s' (allowed: --to, --set, --epochs, "
                   "--shard-size, --quiet)\n",
                   flag.c_str());
      return 2;
    } else if (config_path.empty()) {
      config_path = flag, ++r.i;
    } else {
      std::fprintf(stderr, "headrace materialize: unexpected argument '%s'\n", flag.c_str());
      return 2;
    }
  }
  if (config_path.empty() || to.empty()) {
    std::fputs(kMaterializeUsage, stderr);
    return 2;
  }
  MaterializeOptions options;
  if (!shard_size.empty()) {
    auto bytes = ParseByteSize(shard_size);
    if (!bytes.ok() || *bytes < 1) {
      std::fprintf(stderr, "headrace materialize: --shard-size needs a positive size (256MB, "
                           "1GiB, bytes), got '%s'\n", shard_size.c_str());
      return 2;
    }
    options.shard_bytes = *bytes;
  }
  auto spec = LoadPipelineConfig(config_path, overrides);
  if (!spec.ok()) {
    std::fprintf(stderr, "headrace materialize: %s: %s\n", config_path.c_str(),
                 spec.status().ToString().c_str());
    return 2;
  }
  options.spec = *spec;
  if (!epochs_text.empty() && !ParseEpochs(epochs_text, *spec, &options.epochs)) return 2;
  const std::vector<std::string> random_ops = RandomOps(*spec);
  if (random_ops.empty() && !options.epochs.empty()) {
    std::fprintf(stderr, "headrace materialize: no op draws randomness: one copy serves every "
                         "epoch (--epochs is not needed)\n");
    options.epochs.clear();
  }

  // The destination, checked before any work: a local folder we can write in, or a
  // bucket that exists and answers.
  std::unique_ptr<ObjectStore> store;
  std::string upload_base;
  if (SchemeOf(to) == UriScheme::kS3) {
    Status ready;
    auto location = ParseS3Uri(to);
    if (!location.ok()) ready = location.status();
    if (ready.ok()) {
      auto opened = MakeS3Storage(spec->storage);
      if (opened.ok()) {
        store = *std::move(opened);
      } else {
        ready = opened.status();
      }
    }
    if (ready.ok()) {
      std::string prefix = location->key;
      while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
      upload_base = "s3://" + location->bucket + "/" + (prefix.empty() ? "" : prefix + "/");
      // Fails for a bucket that does not exist or that these credentials cannot list.
      auto listed = store->List(upload_base, 1);
      if (!listed.ok()) ready = listed.status();
    }
    if (!ready.ok()) {
      std::fprintf(stderr, "headrace materialize: --to %s: cannot write: %s\n", to.c_str(),
                   ready.ToString().c_str());
      return 2;
    }
    options.out_dir = MakeStagingDir();
    if (options.out_dir.empty()) {
      std::fprintf(stderr, "headrace materialize: cannot create a staging folder in %s\n",
                   std::filesystem::temp_directory_path().c_str());
      return 1;
    }
  } else if (SchemeOf(to) == UriScheme::kHttp) {
    std::fprintf(stderr, "headrace materialize: --to %s: cannot write: http(s) is read-only; "
                         "give a local folder or s3://bucket/prefix\n", to.c_str());
    return 2;
  } else {
    if (!CheckWritable("headrace materialize", "--to",
                       (std::filesystem::path(to) / std::string(kMaterializedFile)).string())) {
      return 2;
    }
    options.out_dir = to;
  }

  const auto start = Clock::now();
  auto info = Materialize(options);
  if (!info.ok()) {
    std::fprintf(stderr, "headrace materialize: %s: %s\n", config_path.c_str(),
                 info.status().ToString().c_str());
    const StatusCode code = info.status().code();
    if (store) std::filesystem::remove_all(options.out_dir);
    return code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound ? 2 : 1;
  }
  if (store) {
    const UploadStats up = UploadFiles(*store, options.out_dir, upload_base, 32,
                                       "headrace materialize");
    std::filesystem::remove_all(options.out_dir);
    if (up.failed > 0) {
      std::fprintf(stderr, "headrace materialize: %lld of %lld files did not upload to %s\n",
                   static_cast<long long>(up.failed), static_cast<long long>(up.files), to.c_str());
      return 1;
    }
  }
  if (!quiet) {
    for (const auto& set : info->sets) {
      int64_t bytes = 0;
      for (const auto& shard : set.shards) bytes += shard.bytes;
      std::printf("materialized %s: %lld samples (%zu skipped) in %zu shards, %.1f MB, into %s\n",
                  set.epoch ? ("epoch " + std::to_string(*set.epoch)).c_str() : "every epoch",
                  static_cast<long long>(set.samples), set.skipped.size(), set.shards.size(),
                  bytes / 1e6, JoinUri(to, set.dir).c_str());
    }
    std::printf("%s in %.2f s\n", JoinUri(to, kMaterializedFile).c_str(), SecondsSince(start));
  }
  return 0;
}

}  // namespace headrace::tools
