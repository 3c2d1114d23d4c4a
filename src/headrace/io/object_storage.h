// Object storage backends (S3, HTTP(S)) and OpenStorage, the router a pipeline reads
// through: one Storage for local paths, s3:// and http(s):// URIs alike, so that a local
// manifest may name S3 media and a manifest on S3 resolves its media against its own
// prefix.
//
//   ReadAsync(uri) ─▶ ranged GET [0, part_bytes) ─▶ CurlLoop (one I/O thread)
//        206 with total > part: the buffer of `total` bytes is allocated from
//        Content-Range, the first part lands at 0, the other parts are fetched in
//        parallel straight into the same buffer (If-Match: the first part's ETag)
//   retryable failure ─▶ resubmitted after a jittered backoff, on the same loop
//   done(buffer) once every part is in, on the I/O thread
//
// Errors: 404 is kNotFound (NoSuchKey: "no such object", NoSuchBucket: "bucket does
// not exist"); 403 and other 4xx are kIoError naming the endpoint, the S3 error code and
// where the credentials came from (never the secret); a request that exhausts its
// retries is kIoError naming the endpoint and the last error; once the storage-wide
// retry budget is spent the endpoint is dead and every read fails at once with
// kResourceExhausted, naming the endpoint and the last error.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "headrace/io/credentials.h"
#include "headrace/io/storage.h"
#include "headrace/io/storage_spec.h"

namespace headrace {

struct ObjectInfo {
  std::string uri;  // "s3://bucket/key"
  int64_t size = 0;
};

struct ObjectStoreStats {
  int64_t requests = 0;  // HTTP attempts, retries included
  int64_t retries = 0;
  // By cause: the S3 error code ("SlowDown"), else "http_<status>", else the transport
  // error ("reset", "timeout", "truncated", "connect").
  std::map<std::string, int64_t> retries_by_reason;
  int64_t throttles = 0;     // 429 / 503 / SlowDown responses, retried or not
  int64_t failed_reads = 0;  // ReadAsync calls that ended in an error (not cancellation)
  int64_t bytes_received = 0;
  int64_t bytes_copied = 0;  // beyond the one write into the destination buffer
  int64_t connections = 0;   // connections opened; requests - connections were reused
};

// A Storage that also lists and writes. Blocking calls (List, CreateBucket) must not be
// made from a read's callback (they wait on the I/O thread that runs it).
class ObjectStore : public Storage {
 public:
  // Objects under an S3 prefix, or matching a glob in the key ("s3://b/images/*.jpg":
  // '*', '?' and '[...]' match within one '/'-separated segment). ListObjectsV2, page by
  // page (`page_size` keys per request, 1-1000), sorted by key.
  virtual Result<std::vector<ObjectInfo>> List(const std::string& pattern,
                                               int page_size = 1000) = 0;
  // Puts `bytes` at `uri`; `done` runs once, on the I/O thread.
  virtual void WriteAsync(std::string uri, Buffer bytes, std::function<void(Status)> done) = 0;
  // Creates the bucket of an "s3://bucket" URI; ok when it exists and is ours.
  virtual Status CreateBucket(const std::string& bucket_uri) = 0;
  virtual ObjectStoreStats stats() const = 0;
  // The endpoint's origin, for messages ("http://127.0.0.1:9000").
  virtual std::string endpoint() const = 0;
};

Result<std::unique_ptr<ObjectStore>> MakeS3Storage(const StorageSpec& spec,
                                                   const EnvLookup& env = ProcessEnv());
// Plain HTTP(S) GETs of the URI as given (no signing); List is unsupported.
Result<std::unique_ptr<ObjectStore>> MakeHttpStorage(const StorageSpec& spec);

// One Storage for every scheme (see uri.h): local paths go to MakeLocalStorage(local),
// s3:// to MakeS3Storage(spec), http(s):// to MakeHttpStorage(spec). Each backend is
// created on first use, so a local-only pipeline never looks for credentials; a backend
// that cannot be created (no credentials, bad endpoint) fails each read that needs it
// with that reason.
std::shared_ptr<Storage> OpenStorage(const StorageSpec& spec,
                                     const LocalStorageOptions& local = {});

}  // namespace headrace
