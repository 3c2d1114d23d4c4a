// CurlLoop: one I/O thread driving many HTTP transfers at once on libcurl's multi
// interface, with connections kept alive and reused between transfers.
//
//   any thread ── Submit(request, done[, delay]) ──▶ queue ──▶ I/O thread
//                                                              curl_multi_poll / perform
//   done(response) ◀──────────── on the I/O thread ◀────────── transfer finished
//
// Contract:
// - Submit is thread-safe and returns at once; `done` runs exactly once, on the I/O
//   thread (or inline in Submit when the loop is stopping), with the response or the
//   transport error. `done` must not block; it may call Submit (retries do).
// - A response body lands in one Buffer: allocated once from Content-Length (for a 206,
//   from Content-Range's total size, the body written at the range's start, so that the
//   other ranges can be written beside it), or written into HttpRequest::sink. Only a
//   response without Content-Length grows its buffer, and those copies are counted.
//   HttpRequest::max_body_bytes and size_gate are applied before each allocation.
// - Timeouts: connect, first byte (from the start of the transfer to the first response
//   header byte) and low speed; each ends the transfer with TransportError::kTimeout.
// - The destructor stops the thread: pending and running transfers complete with
//   kCancelled before it returns.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/status.h"
#include "headrace/io/retry.h"

namespace headrace {

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD or PUT
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  Buffer body;                       // PUT payload
  // When set, a 2xx body is written into sink at sink_offset (at most
  // sink.size() - sink_offset bytes) instead of a buffer of its own.
  Buffer sink;
  size_t sink_offset = 0;
  // The most 2xx body bytes accepted (-1: no limit). A body announced larger (by
  // Content-Length, or Content-Range's total) ends the transfer before anything is
  // allocated; one of unknown length ends as soon as it passes the limit. Either way
  // the response has TransportError::kOverLimit. Not checked for a sink.
  int64_t max_body_bytes = -1;
  // Asked, on the I/O thread, with the bytes the body's buffer is about to hold: the
  // announced size before the buffer is allocated, then the new capacity before each
  // growth of a body of unknown length. Returning false ends the transfer with
  // TransportError::kRefused. Not asked for a sink.
  std::function<bool(int64_t bytes)> size_gate;
  // For a ranged read of its own (a member of a shard): a 206 body gets a buffer of the
  // range's size (Content-Range's END - START + 1), written from its start, instead of
  // one of the object's total size. max_body_bytes and size_gate then see the range's
  // size.
  bool range_body = false;
  // Asked on the I/O thread while the request waits for its delay or runs (about every
  // kWantedPollInterval): false ends it with TransportError::kCancelled, its transfer
  // removed from the connection (which is closed or reused as libcurl sees fit).
  std::function<bool()> wanted;
};

// How often a request's `wanted` is asked while it waits or runs.
inline constexpr std::chrono::milliseconds kWantedPollInterval{100};

struct HttpResponse {
  TransportError error = TransportError::kNone;
  std::string error_text;  // curl's description of a transport error
  long status = 0;         // HTTP status; 0 when none arrived
  // 2xx: the destination (see the contract); the bytes of this response are
  // [body_offset, body_offset + received).
  Buffer body;
  size_t body_offset = 0;
  size_t received = 0;
  int64_t content_length = -1;  // -1: not announced
  int64_t range_start = -1;     // from Content-Range, -1 when absent
  int64_t range_end = -1;
  int64_t range_total = -1;
  std::string etag;
  std::string error_body;    // the first 8 KiB of a non-2xx body
  int64_t bytes_copied = 0;  // bytes moved when growing a buffer of unknown size
};

using HttpCallback = std::function<void(HttpResponse)>;

struct CurlLoopOptions {
  int64_t connect_timeout_ms = 5000;
  int64_t first_byte_timeout_ms = 15000;  // 0: none
  int64_t low_speed_limit = 1024;         // bytes/s; 0: none
  int64_t low_speed_time_s = 10;
  int max_host_connections = 0;  // 0: unlimited
  std::string ca_bundle;         // CAs to trust for TLS; empty: the system's
};

struct CurlLoopStats {
  int64_t transfers = 0;       // finished transfers, any outcome
  int64_t bytes_received = 0;  // 2xx body bytes
  int64_t bytes_copied = 0;    // see HttpResponse::bytes_copied
  int64_t connections = 0;     // new connections opened (the rest were reused)
};

class CurlLoop {
 public:
  static Result<std::unique_ptr<CurlLoop>> Start(const CurlLoopOptions& options);
  ~CurlLoop();
  CurlLoop(const CurlLoop&) = delete;
  CurlLoop& operator=(const CurlLoop&) = delete;

  // Starts `request` after `delay` (0: as soon as the loop picks it up).
  void Submit(HttpRequest request, HttpCallback done,
              std::chrono::milliseconds delay = std::chrono::milliseconds(0));

  CurlLoopStats stats() const;

 private:
  struct Impl;
  explicit CurlLoop(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace headrace
