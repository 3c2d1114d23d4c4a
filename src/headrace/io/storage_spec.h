// StorageSpec: how a pipeline reaches object storage (the `storage:` section of a config).
//
// Plain data with documented defaults; every field is optional. Local paths use only
// max_object_bytes and follow_symlinks. Credentials are never part of the spec: they
// come from the environment or the shared credentials file (credentials.h), so a config
// file can be shared safely.
#pragma once

#include <cstdint>
#include <string>

namespace headrace {

// How a bucket appears in an S3 request URL.
enum class AddressingStyle {
  kAuto,     // virtual-hosted on AWS; path-style for a custom endpoint (MinIO, moto, ...)
  kPath,     // https://endpoint/bucket/key
  kVirtual,  // https://bucket.endpoint/key
};

struct StorageSpec {
  // S3 endpoint URL ("http://127.0.0.1:9000"); empty: AWS_ENDPOINT_URL_S3, then
  // AWS_ENDPOINT_URL, then https://s3.REGION.amazonaws.com.
  std::string endpoint;
  // Empty: AWS_REGION, AWS_DEFAULT_REGION, the profile's region, then us-east-1.
  std::string region;
  // Profile of the shared credentials file; empty: AWS_PROFILE, then "default".
  std::string profile;
  // PEM file of the certificate authorities to trust for https endpoints (a private
  // MinIO or proxy, say); empty: AWS_CA_BUNDLE, then the system's trust store.
  std::string ca_bundle;
  // Send unsigned requests (public buckets); no credentials are looked up.
  bool anonymous = false;
  AddressingStyle addressing_style = AddressingStyle::kAuto;

  int64_t connect_timeout_ms = 5000;      // TCP (+TLS) connect
  int64_t first_byte_timeout_ms = 15000;  // request sent -> first response header byte
  // A transfer slower than low_speed_limit bytes/s for low_speed_time_s seconds is
  // aborted (and retried). 0 disables.
  int64_t low_speed_limit = 1024;
  int64_t low_speed_time_s = 10;

  // Retries of one request (attempts = max_retries + 1) for 500/502/503/504, SlowDown,
  // connection errors and timeouts, with exponential backoff and full jitter.
  int max_retries = 6;
  int64_t retry_base_ms = 50;
  int64_t retry_max_ms = 5000;
  // Retries the storage may spend without a success in between: past it the endpoint is
  // declared dead and every read fails at once, naming the endpoint and the last error.
  int64_t retry_budget = 200;

  // Objects above this size are read as ranged GETs of part_bytes, several in parallel,
  // into one buffer.
  int64_t part_bytes = int64_t{8} << 20;
  // Connections kept per host (0: no limit but the reads in flight).
  int max_connections = 0;

  // The largest object a read accepts, on every backend. A larger one fails that read
  // with kResourceExhausted naming this key: before any byte is allocated when its size
  // is known (file size, Content-Length, Content-Range), else as soon as the bytes
  // received pass it (a body without Content-Length cannot grow without bound).
  // 0 (the default): in a pipeline, the larger of memory.budget_bytes and 1 GiB
  // (pipeline/prepared.cc): the manifest, a tokenizer or an index is read whole outside
  // the budget, and a small budget must not refuse them; media objects are held to the
  // I/O budget besides (exec/read_stage.h), which follows memory.budget_bytes. A storage
  // opened with 0 outside a pipeline takes objects of any size.
  int64_t max_object_bytes = 0;
  // false: local media are opened beneath the dataset root without following symbolic
  // links (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS); a link below the root fails
  // the sample with kPathEscape. For manifests from untrusted sources. The root itself
  // may be reached through links.
  bool follow_symlinks = true;
};

}  // namespace headrace
