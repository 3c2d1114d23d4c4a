// LoopbackServer: a small HTTP/1.1 object server on 127.0.0.1, for tests and the I/O
// benchmark. Not for production traffic.
//
// One epoll thread serves keep-alive connections from an in-memory map of objects
// (path -> bytes): GET (with "Range: bytes=A-B"), HEAD and PUT. Every response is held
// back by `latency` (object storage's first-byte latency) on a timer, so that one
// thread can keep thousands of delayed requests in flight. Faults for tests are set per
// path. Paths are matched as sent, without the query string ("/bucket/key").
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "headrace/core/buffer.h"
#include "headrace/core/status.h"

namespace headrace {

// What the server does to requests for one path.
enum class LoopbackFault {
  kNone,
  kSlowDown,  // answer 503 SlowDown (`count` times, then serve normally)
  kTruncate,  // announce the full Content-Length, send half the body, close
  kHang,      // never answer (until the client gives up)
  kNoLength,  // answer 200 without Content-Length (ignoring Range), the body ended by
              // closing the connection
};

struct LoopbackServerStats {
  int64_t requests = 0;
  int64_t connections = 0;
};

class LoopbackServer {
 public:
  // Listens on 127.0.0.1 on a free port and starts its thread.
  static Result<std::unique_ptr<LoopbackServer>> Start(
      std::chrono::microseconds latency = std::chrono::microseconds(0));
  ~LoopbackServer();  // stops the thread and closes every connection

  int port() const;
  std::string origin() const;  // "http://127.0.0.1:PORT"

  void Put(const std::string& path, Buffer bytes);
  void SetFault(const std::string& path, LoopbackFault fault, int count = 1 << 30);
  void SetLatency(std::chrono::microseconds latency);
  LoopbackServerStats stats() const;

  struct Impl;

 private:
  explicit LoopbackServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace headrace
