#include "headrace/observe/metrics_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

namespace headrace {
namespace {

using SteadyClock = std::chrono::steady_clock;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// One client. Its whole life (request in, response out) ends by `deadline`.
struct Connection {
  // The two phases of a connection; it is closed after the second.
  enum class Phase {
    kReading,   // the request line and headers are arriving
    kWriting,   // the response is being sent
    kDraining,  // sent and shut for writing: what the client still sends is read and
                // dropped until it closes (closing with unread bytes would reset the
                // connection, and a reset can discard the response before it is read)
  };
  Fd fd;
  uint64_t order = 0;  // accept order: the lowest reading one is evicted first
  SteadyClock::time_point deadline;
  Phase phase = Phase::kReading;
  std::string in;
  std::string out;
  size_t sent = 0;
};

std::string Response(int code, std::string_view reason, std::string_view content_type,
                     const std::string& body, bool head) {
  std::string r = "HTTP/1.1 " + std::to_string(code) + " " + std::string(reason) + "\r\n";
  r += "Content-Type: " + std::string(content_type) + "\r\n";
  r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  if (code == 405) r += "Allow: GET, HEAD\r\n";
  r += "Connection: close\r\n\r\n";
  if (!head) r += body;
  return r;
}

std::string PlainError(int code, std::string_view reason) {
  return Response(code, reason, "text/plain", std::string(reason) + "\n", false);
}

// Where the headers end in `in` (the index past the blank line), or npos.
size_t HeaderEnd(const std::string& in) {
  const size_t crlf = in.find("\r\n\r\n");
  const size_t lf = in.find("\n\n");
  if (crlf == std::string::npos && lf == std::string::npos) return std::string::npos;
  if (lf == std::string::npos || (crlf != std::string::npos && crlf < lf)) return crlf + 4;
  return lf + 2;
}

}  // namespace

struct MetricsServer::Loop {
  Fd listen_fd;
  Fd wake_fd;  // an eventfd: the destructor's write ends poll()
  Render render;
  MetricsServerOptions options;
  std::atomic<bool> stop{false};
  std::vector<Connection> connections;  // the loop thread's only
  uint64_t accepted = 0;

  void Run();
  void Accept(SteadyClock::time_point now);
  void Read(Connection& c);
  void Respond(Connection& c, std::string response);
  void Write(Connection& c);
  void Drain(Connection& c);
  std::string Handle(const std::string& request_line);
};

void MetricsServer::Loop::Run() {
  std::vector<pollfd> fds;
  while (!stop.load(std::memory_order_acquire)) {
    fds.clear();
    fds.push_back({wake_fd.get(), POLLIN, 0});
    fds.push_back({listen_fd.get(), POLLIN, 0});
    auto next_deadline = SteadyClock::time_point::max();
    for (const Connection& c : connections) {
      fds.push_back({c.fd.get(),
                     static_cast<short>(c.phase == Connection::Phase::kWriting ? POLLOUT : POLLIN),
                     0});
      next_deadline = std::min(next_deadline, c.deadline);
    }
    int timeout_ms = -1;
    if (next_deadline != SteadyClock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(next_deadline -
                                                                     SteadyClock::now());
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60'000));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (stop.load(std::memory_order_acquire)) break;
    for (size_t i = 0; i < connections.size(); ++i) {
      const short events = fds[i + 2].revents;
      if (events == 0) continue;
      Connection& c = connections[i];
      switch (c.phase) {
        case Connection::Phase::kReading:
          Read(c);
          break;
        case Connection::Phase::kWriting:
          Write(c);
          break;
        case Connection::Phase::kDraining:
          Drain(c);
          break;
      }
    }
    const auto now = SteadyClock::now();
    // Closed (fd reset), finished or past its deadline: gone. Erasing keeps accept order.
    std::erase_if(connections, [now](const Connection& c) {
      return c.fd.get() < 0 || c.deadline <= now;
    });
    if (fds[1].revents != 0) Accept(now);
  }
  connections.clear();  // closes every client still connected
}

void MetricsServer::Loop::Accept(SteadyClock::time_point now) {
  for (;;) {
    Fd fd(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd.get() < 0) return;  // EAGAIN: no more waiting; anything else: try next poll
    if (static_cast<int>(connections.size()) >= options.max_connections) {
      // Make room by dropping the oldest client that has not sent its request (or has
      // had its answer): a scraper sends at once and is answered within one turn of the
      // loop, so only a client slower than the newcomers loses its slot.
      auto oldest = std::find_if(connections.begin(), connections.end(), [](const Connection& c) {
        return c.phase != Connection::Phase::kWriting;
      });
      if (oldest == connections.end()) continue;  // every slot is sending a response: refuse
      connections.erase(oldest);
    }
    Connection c;
    c.fd = std::move(fd);
    c.order = accepted++;
    c.deadline = now + options.connection_timeout;
    connections.push_back(std::move(c));
  }
}

void MetricsServer::Loop::Read(Connection& c) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(c.fd.get(), buffer, sizeof buffer, 0);
    if (n == 0) {  // the client went away before its request was whole
      c.fd.Reset();
      return;
    }
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.fd.Reset();
      return;
    }
    c.in.append(buffer, static_cast<size_t>(n));
    const size_t end = HeaderEnd(c.in);
    if (end == std::string::npos) {
      if (c.in.size() > options.max_request_bytes) {
        return Respond(c, PlainError(431, "Request Header Fields Too Large"));
      }
      continue;
    }
    if (end > options.max_request_bytes) {
      return Respond(c, PlainError(431, "Request Header Fields Too Large"));
    }
    const size_t line_end = c.in.find('\n');
    std::string line = c.in.substr(0, line_end);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return Respond(c, Handle(line));
  }
}

std::string MetricsServer::Loop::Handle(const std::string& request_line) {
  // "METHOD SP TARGET SP VERSION"
  const size_t a = request_line.find(' ');
  const size_t b = a == std::string::npos ? a : request_line.find(' ', a + 1);
  if (a == std::string::npos || b == std::string::npos) return PlainError(400, "Bad Request");
  const std::string method = request_line.substr(0, a);
  std::string target = request_line.substr(a + 1, b - a - 1);
  target = target.substr(0, target.find('?'));
  const bool head = method == "HEAD";
  if (method != "GET" && !head) return PlainError(405, "Method Not Allowed");
  if (target == "/metrics") {
    return Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render(), head);
  }
  if (target == "/") {
    return Response(200, "OK", "text/plain", "headrace: metrics at /metrics\n", head);
  }
  return PlainError(404, "Not Found");
}

void MetricsServer::Loop::Respond(Connection& c, std::string response) {
  c.phase = Connection::Phase::kWriting;
  c.in.clear();
  c.out = std::move(response);
  c.sent = 0;
  Write(c);  // most responses fit the socket's buffer: sent now
}

void MetricsServer::Loop::Write(Connection& c) {
  while (c.sent < c.out.size()) {
    // MSG_NOSIGNAL: a client that closed early must not raise SIGPIPE in the process.
    const ssize_t n =
        ::send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      break;
    }
    c.sent += static_cast<size_t>(n);
  }
  if (c.sent < c.out.size() || ::shutdown(c.fd.get(), SHUT_WR) != 0) {
    c.fd.Reset();  // the client is gone
    return;
  }
  // All sent: one request per connection. The client closes on reading it.
  c.phase = Connection::Phase::kDraining;
  c.out.clear();
  c.out.shrink_to_fit();
  Drain(c);
}

void MetricsServer::Loop::Drain(Connection& c) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(c.fd.get(), buffer, sizeof buffer, 0);
    if (n > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    c.fd.Reset();  // closed by the client (or failed): done
    return;
  }
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host, int port,
                                                            Render render,
                                                            MetricsServerOptions options) {
  if (port < 0 || port > 65535) {
    return Status::InvalidArgument("metrics port " + std::to_string(port) +
                                   ": allowed 0..65535 (0: any free port)");
  }
  const std::string address = host + ":" + std::to_string(port);
  const auto fail = [&address](const std::string& why) {
    return Status::InvalidArgument("metrics endpoint " + address + ": cannot listen: " + why +
                                   " (is the port in use? choose another, or 0 for any free "
                                   "port)");
  };
  // "[::1]" names an IPv6 address as URLs write it.
  std::string name = host;
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(name.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return fail(::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  Fd listener;
  int err = 0;
  for (const addrinfo* ai = found; ai != nullptr && listener.get() < 0; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                   ai->ai_protocol));
    if (fd.get() < 0) {
      err = errno;
      continue;
    }
    // SO_REUSEADDR lets a restart rebind while old connections linger; no SO_REUSEPORT,
    // with which a second process would bind the same port and share its scrapes unnoticed.
    int yes = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), 64) != 0) {
      err = errno;
      continue;
    }
    listener = std::move(fd);
  }
  if (listener.get() < 0) return fail(std::strerror(err != 0 ? err : EADDRNOTAVAIL));
  sockaddr_storage bound{};
  socklen_t bound_size = sizeof bound;
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&bound), &bound_size) != 0) {
    return fail(std::strerror(errno));
  }
  const int bound_port =
      bound.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
          : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);

  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->host_ = host;
  s->port_ = bound_port;
  s->loop_ = std::make_unique<Loop>();
  s->loop_->listen_fd = std::move(listener);
  s->loop_->wake_fd = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (s->loop_->wake_fd.get() < 0) return fail(std::strerror(errno));
  s->loop_->render = std::move(render);
  options.max_connections = std::max(options.max_connections, 1);
  s->loop_->options = options;
  s->thread_ = std::thread([loop = s->loop_.get()] { loop->Run(); });
  return s;
}

MetricsServer::~MetricsServer() {
  if (loop_ != nullptr) {
    loop_->stop.store(true, std::memory_order_release);
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(loop_->wake_fd.get(), &one, sizeof one);
  }
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
