// Storage: asynchronous whole-object reads from where the data lives.
//
// One interface for manifests, media and (later) shards. Backends: local files now;
// S3 and HTTP(S) plug in behind the same two calls, so the executor never changes.
//
// Contract:
// - ReadAsync returns at once; `done` is called exactly once, with the object's bytes in
//   one Buffer (decoders read it in place) or a Status: kNotFound for a missing object,
//   kIoError for other failures, kCancelled once the storage is shutting down.
// - `done` runs on a storage-owned thread (or inline, for a read that fails before it
//   starts). It must be short and must not block: hand the bytes to another stage.
// - The destructor completes every pending read (with kCancelled if not yet started)
//   and joins its threads before it returns.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "headrace/core/buffer.h"
#include "headrace/core/status.h"

namespace headrace {

using ReadCallback = std::function<void(Result<Buffer>)>;

class Storage {
 public:
  virtual ~Storage() = default;
  virtual void ReadAsync(std::string uri, ReadCallback done) = 0;
  // "local", "s3", ...
  virtual std::string_view name() const = 0;

  // Blocking read built on ReadAsync, for small control files (manifests, models).
  Result<Buffer> Read(const std::string& uri);
};

struct LocalStorageOptions {
  int threads = 2;  // reader threads; page-cache hits are CPU work, misses wait on disk
};

// Reads files from the local file system.
std::unique_ptr<Storage> MakeLocalStorage(const LocalStorageOptions& options = {});

}  // namespace headrace
