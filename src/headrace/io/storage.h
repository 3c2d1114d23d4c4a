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
// - Stats() may be called from any thread, during or after a run.
// - ReadAsyncGated is ReadAsync with a ReadGate. A backend that cannot know an object's
//   size before its bytes arrive may ignore the gate (the default does): the reader then
//   learns the size in `done`. Local, S3 and HTTP backends honour it.
// - An object larger than the backend's limit (storage.max_object_bytes) fails with
//   kResourceExhausted naming the limit, before its bytes are allocated when its size is
//   known, else as soon as the bytes received pass it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/status.h"

namespace headrace {

using ReadCallback = std::function<void(Result<Buffer>)>;
// The size of an object in bytes, or why it cannot be known (kNotFound, kIoError, ...).
using SizeCallback = std::function<void(Result<int64_t>)>;
// Asked on the storage thread, before a read allocates memory for an object's bytes,
// with the bytes it is about to hold: the object's size (local: the file's size; HTTP,
// S3: Content-Length or Content-Range's total), or for a body of unknown length its
// buffer's new capacity before each growth. Returning false gives the read up: nothing
// more is allocated and `done` gets kCancelled (not counted as a storage error). Must
// be short and must not block.
// The engine charges its I/O budget here, so that bytes are counted before they exist.
// A backend also asks it with kReadStillWanted (no size) whenever the read would go on
// waiting: before it starts, before each retry and, while it waits (a retry's backoff, a
// slow first byte), about ten times a second. false there ends the read at once with
// kCancelled: a reader that stopped (a closing engine) does not wait out timeouts and
// retries it no longer needs.
using ReadGate = std::function<bool(int64_t bytes)>;
inline constexpr int64_t kReadStillWanted = -1;

// What one backend has done so far, for run reports. Counters and the endpoint's origin
// only: never a credential, a signed URL or an object's URI.
struct StorageStats {
  std::string backend;   // "local", "s3", "http"
  std::string endpoint;  // object stores: where requests go; empty for local files
  int64_t requests = 0;  // local: files read; object stores: HTTP attempts, retries included
  int64_t retries = 0;   // object stores: attempts repeated after a retryable failure
  // Retries by what caused them: an S3 error code ("SlowDown", "InternalError"), else
  // "http_<status>", or the transport error ("reset", "timeout", "truncated", "connect").
  std::map<std::string, int64_t> retries_by_reason;
  int64_t throttles = 0;     // responses asking the client to slow down: 429, 503, SlowDown
  int64_t errors = 0;        // reads that failed for good (after any retries); not cancellations
  int64_t bytes = 0;         // bytes read (object stores: 2xx body bytes received)
  int64_t connections = 0;   // object stores: connections opened (the rest were reused)
  int64_t bytes_copied = 0;  // object stores: bytes moved beyond the one write per object
};

class Storage {
 public:
  virtual ~Storage() = default;
  virtual void ReadAsync(std::string uri, ReadCallback done) = 0;
  virtual void ReadAsyncGated(std::string uri, ReadCallback done, ReadGate gate) {
    ReadAsync(std::move(uri), std::move(done));
  }
  // Reads bytes [offset, offset + length) of the object (length < 0: to its end), for
  // members of shards. The gate sees the range's size. A range that starts past the
  // object's end fails with kInvalidArgument; one that runs past it is cut short
  // (the callback gets fewer bytes: the reader checks what it needs).
  // The default reads the whole object and slices it: backends that can fetch a range
  // (local pread, HTTP Range) override it.
  virtual void ReadRangeAsyncGated(std::string uri, int64_t offset, int64_t length,
                                   ReadCallback done, ReadGate gate);
  // The object's size, without its bytes (local: fstat; HTTP, S3: a one-byte ranged GET's
  // Content-Range), for a reader that then reads ranges of it (video.decode `read:
  // ranges`). `done` as ReadAsync's: once, on a storage thread or inline. `wanted`, when
  // set, is asked as a read's gate is with kReadStillWanted: false gives the request up
  // (kCancelled). The default reads the whole object and counts its bytes.
  virtual void SizeAsync(std::string uri, SizeCallback done, ReadGate wanted);
  // "local", "s3", ...
  virtual std::string_view name() const = 0;
  // One entry per backend that has been used (a router lists each backend it opened).
  virtual std::vector<StorageStats> Stats() const { return {}; }

  // Blocking read built on ReadAsync, for small control files (manifests, models).
  Result<Buffer> Read(const std::string& uri);
  // Blocking SizeAsync (no `wanted`).
  Result<int64_t> Size(const std::string& uri);
};

struct LocalStorageOptions {
  int threads = 2;  // reader threads; page-cache hits are CPU work, misses wait on disk
  // Files larger than this fail with kResourceExhausted (checked by fstat before any
  // byte is read). <= 0: no limit.
  int64_t max_object_bytes = 0;
  // false: paths under `root` are opened relative to it with openat2(RESOLVE_BENEATH |
  // RESOLVE_NO_SYMLINKS) (kernels without openat2: one openat(O_NOFOLLOW) per
  // component), so a symbolic link anywhere below the root (the file or a folder on the
  // way) fails the read with kPathEscape. The root itself may be reached through links.
  // Paths outside the root (manifest, tokenizer model) are opened as usual.
  bool follow_symlinks = true;
  std::string root = {};  // absolute; empty: the rule above does not apply
};

// Reads files from the local file system.
std::unique_ptr<Storage> MakeLocalStorage(const LocalStorageOptions& options = {});

}  // namespace headrace
