// MetricsServer: an HTTP endpoint serving `GET /metrics` (the Prometheus text format)
// from a render callback, on a thread of its own, until it is destroyed.
//
// The port is reachable by whoever can reach the address, so the endpoint is written to
// bound what any client can make it do (README.md, "The metrics endpoint"):
//   - one thread, non-blocking sockets and poll(): no client's pace ever blocks another
//     client, a scrape, or the destructor;
//   - each connection lives at most `connection_timeout` from accept to the end of its
//     response (a client sending a byte every 2 s is closed then), and its request (line
//     and headers) is at most `max_request_bytes` (past it: 431, closed);
//   - at most `max_connections` are held: a new one evicts the oldest whose request has
//     not arrived yet, so slow clients hold slots only until a scraper needs one, and a
//     scrape (which sends its request at once) is not locked out by them;
//   - one request per connection (`Connection: close`), no request bodies.
// The render callback runs on the server's thread, once per scrape: it must be safe to
// call concurrently with the run (Loader::consumer_stats and engine_metrics are).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "headrace/core/status.h"

namespace headrace {

// Where `--metrics-port PORT` and `metrics_port=PORT` listen: this machine only. A
// Prometheus on another machine needs the address named (`0.0.0.0:9100`).
inline constexpr const char* kDefaultMetricsHost = "127.0.0.1";

struct MetricsServerOptions {
  // Connections held at once (a scrape needs one; Prometheus scrapes one at a time).
  int max_connections = 16;
  // From accept to the last byte of the response: a client that has not sent its whole
  // request by then is closed.
  std::chrono::milliseconds connection_timeout{5000};
  // The request line and headers.
  size_t max_request_bytes = 8192;
};

class MetricsServer {
 public:
  using Render = std::function<std::string()>;

  // Binds `host`:`port` (port 0: any free port, see port()) and starts serving. Fails
  // (kInvalidArgument, naming the address and why) when the port is in use, not
  // permitted or the host is not an address of this machine, before any run starts.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port,
                                                      Render render,
                                                      MetricsServerOptions options = {});
  // Stops serving and joins the thread: as long as a render in progress takes, never
  // waiting for a client (connections still open are closed).
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  // "http://host:port/metrics" (0.0.0.0 shown as 127.0.0.1, the address that reaches it
  // from this machine).
  std::string url() const;

 private:
  struct Loop;  // the thread's state: sockets and connections (metrics_server.cc)
  MetricsServer() = default;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  std::string host_;
  int port_ = 0;
};

// Parses "PORT" or "HOST:PORT" (a flag's value): port 0..65535; host default `default_host`.
Status ParseListenAddress(const std::string& text, const std::string& default_host,
                          std::string* host, int* port);

}  // namespace headrace
