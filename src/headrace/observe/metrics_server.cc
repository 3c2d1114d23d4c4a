#include "headrace/observe/metrics_server.h"

#include <httplib.h>

#include <cerrno>
#include <cstring>

namespace headrace {

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host, int port,
                                                            Render render) {
  if (port < 0 || port > 65535) {
    return Status::InvalidArgument("metrics port " + std::to_string(port) +
                                   ": allowed 0..65535 (0: any free port)");
  }
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->server_ = std::make_unique<httplib::Server>();
  s->host_ = host;
  // A scrape is small and rare: two threads serve it, not one per core.
  s->server_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  s->server_->Get("/metrics", [render = std::move(render)](const httplib::Request&,
                                                           httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s->server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("headrace: metrics at /metrics\n", "text/plain");
  });
  // httplib's default also sets SO_REUSEPORT, with which a second process would bind the
  // same port and share its scrapes unnoticed; SO_REUSEADDR alone still lets a restart
  // rebind while old connections linger, and a port in use fails.
  s->server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  errno = 0;
  if (port == 0) {
    s->port_ = s->server_->bind_to_any_port(host);
    if (s->port_ < 0) s->port_ = 0;
  } else if (s->server_->bind_to_port(host, port)) {
    s->port_ = port;
  }
  if (s->port_ == 0) {
    const int err = errno;
    return Status::InvalidArgument(
        "metrics endpoint " + host + ":" + std::to_string(port) + ": cannot listen" +
        (err != 0 ? std::string(": ") + std::strerror(err) : std::string()) +
        " (is the port in use? choose another, or 0 for any free port)");
  }
  httplib::Server* server = s->server_.get();
  s->thread_ = std::thread([server] { server->listen_after_bind(); });
  return s;
}

MetricsServer::~MetricsServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string MetricsServer::url() const {
  const std::string host = host_ == "0.0.0.0" || host_.empty() ? "127.0.0.1" : host_;
  return "http://" + host + ":" + std::to_string(port_) + "/metrics";
}

Status ParseListenAddress(const std::string& text, const std::string& default_host,
                          std::string* host, int* port) {
  const auto colon = text.rfind(':');
  *host = colon == std::string::npos ? default_host : text.substr(0, colon);
  const std::string digits = colon == std::string::npos ? text : text.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(digits.c_str(), &end, 10);
  if (digits.empty() || end == digits.c_str() || *end != '\0' || errno != 0 || value < 0 ||
      value > 65535 || host->empty()) {
    return Status::InvalidArgument("'" + text +
                                   "': expected PORT or HOST:PORT with PORT 0..65535 (0: any "
                                   "free port)");
  }
  *port = static_cast<int>(value);
  return Status::Ok();
}

}  // namespace headrace
