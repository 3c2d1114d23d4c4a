// MetricsServer: an HTTP endpoint serving `GET /metrics` (the Prometheus text format)
// from a render callback, on a thread of its own, until it is destroyed.
//
// Served with cpp-httplib (Debian's libcpp-httplib), which keeps the HTTP parsing out of
// this project. The render callback runs on the server's thread, once per scrape: it
// must be safe to call concurrently with the run (Loader::consumer_stats and
// engine_metrics are).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "headrace/core/status.h"

namespace httplib {
class Server;
}

namespace headrace {

class MetricsServer {
 public:
  using Render = std::function<std::string()>;

  // Binds `host`:`port` (port 0: any free port, see port()) and starts serving. Fails
  // (kInvalidArgument, naming the address and why) when the port is in use, not
  // permitted or the host is not an address of this machine, before any run starts.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port,
                                                      Render render);
  ~MetricsServer();  // stops serving and joins the thread
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  // "http://host:port/metrics" (0.0.0.0 shown as 127.0.0.1, the address that reaches it
  // from this machine).
  std::string url() const;

 private:
  MetricsServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string host_;
  int port_ = 0;
};

// Parses "PORT" or "HOST:PORT" (a flag's value): port 0..65535; host default `default_host`.
Status ParseListenAddress(const std::string& text, const std::string& default_host,
                          std::string* host, int* port);

}  // namespace headrace
