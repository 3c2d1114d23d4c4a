#include "headrace/io/loopback_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <queue>
#include <thread>
#include <unordered_map>
#include <vector>

#include "headrace/core/clock.h"
#include "headrace/core/strings.h"

namespace headrace {
namespace {

// epoll_pwait2 (Linux 5.11) through syscall(2): glibc wraps it only from 2.35, and the
// manylinux wheel is linked against 2.31 (scripts/build_wheel_manylinux.sh), whose
// kernel headers (5.10) do not number it either; 441 is its number on every architecture.
#ifdef SYS_epoll_pwait2
constexpr long kEpollPwait2 = SYS_epoll_pwait2;
#else
constexpr long kEpollPwait2 = 441;
#endif

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (fd >= 0) ::close(fd);
    fd = std::exchange(o.fd, -1);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

struct Response {
  std::string head;
  Buffer body;  // a slice of the object: sent from its memory, not copied
  size_t sent = 0;
  bool close_after = false;
};

struct Connection {
  Fd fd;
  uint64_t id = 0;
  std::string in;
  std::deque<Response> out;  // in request order; the front is being written
  int delayed = 0;           // responses still waiting on their latency timer
  bool want_write = false;
  bool closing = false;
};

}  // namespace

struct LoopbackServer::Impl {
  Fd listen_fd;
  Fd epoll_fd;
  Fd wake_fd;
  int port = 0;
  std::thread thread;
  std::atomic<bool> stop{false};

  mutable std::mutex mu;
  std::map<std::string, Buffer> objects;                        // guarded by mu
  std::map<std::string, std::pair<LoopbackFault, int>> faults;  // guarded by mu
  std::chrono::microseconds latency{0};                         // guarded by mu
  LoopbackServerStats stats;                                    // guarded by mu

  // Loop thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections;
  uint64_t next_id = 1;
  struct Timed {
    Clock::time_point due;
    uint64_t connection;
    uint64_t seq;
    Response response;
    bool operator>(const Timed& o) const { return due != o.due ? due > o.due : seq > o.seq; }
  };
  std::priority_queue<Timed, std::vector<Timed>, std::greater<>> timers;
  uint64_t seq = 0;

  void Run();
  void Accept();
  void OnReadable(Connection& c);
  void Flush(Connection& c);
  void Close(uint64_t id);
  void UpdateEvents(Connection& c);
  // Parses complete requests out of c.in and schedules their responses.
  bool HandleRequests(Connection& c);
  Response Answer(std::string_view method, std::string_view path, std::string_view range,
                  std::string_view body, bool* hang);
};

Response LoopbackServer::Impl::Answer(std::string_view method, std::string_view path,
                                      std::string_view range, std::string_view body, bool* hang) {
  Response r;
  const std::string key(path);
  Buffer object;
  bool found = false;
  LoopbackFault fault = LoopbackFault::kNone;
  {
    std::lock_guard lock(mu);
    ++stats.requests;
    if (auto f = faults.find(key); f != faults.end() && f->second.second > 0) {
      fault = f->second.first;
      --f->second.second;
    }
    if (method == "PUT") {
      auto copy = Buffer::CopyOf(body.data(), body.size());
      if (copy.ok()) objects[key] = *copy;
      r.head = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
      return r;
    }
    if (auto it = objects.find(key); it != objects.end()) {
      object = it->second;
      found = true;
    }
  }
  if (fault == LoopbackFault::kHang) {
    *hang = true;
    return r;
  }
  if (fault == LoopbackFault::kSlowDown) {
    static constexpr std::string_view kBody =
        "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>Please reduce your request "
        "rate.</Message></Error>";
    r.head =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
        "Content-Length: " +
        std::to_string(kBody.size()) + "\r\n\r\n" + std::string(kBody);
    return r;
  }
  if (!found) {
    static constexpr std::string_view kBody =
        "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The specified key does "
        "not exist.</Message></Error>";
    r.head = "HTTP/1.1 404 Not Found\r\nContent-Type: application/xml\r\nContent-Length: " +
             std::to_string(kBody.size()) + "\r\n\r\n" + std::string(kBody);
    return r;
  }
  if (fault == LoopbackFault::kNoLength) {
    r.head = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
    if (method != "HEAD") r.body = object;
    r.close_after = true;
    return r;
  }
  size_t start = 0;
  size_t end = object.size();  // exclusive
  bool partial = false;
  if (range.substr(0, 6) == "bytes=") {
    const std::string_view spec = range.substr(6);
    const size_t dash = spec.find('-');
    uint64_t a = 0, b = 0;
    if (dash != std::string_view::npos &&
        std::from_chars(spec.data(), spec.data() + dash, a).ec == std::errc()) {
      if (dash + 1 < spec.size() &&
          std::from_chars(spec.data() + dash + 1, spec.data() + spec.size(), b).ec == std::errc()) {
        end = std::min<size_t>(object.size(), b + 1);
      }
      if (a >= object.size()) {
        r.head = "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */" +
                 std::to_string(object.size()) + "\r\nContent-Length: 0\r\n\r\n";
        return r;
      }
      start = a;
      partial = true;
    }
  }
  const size_t length = end - start;
  r.head = partial
               ? "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes " + std::to_string(start) +
                     "-" + std::to_string(end - 1) + "/" + std::to_string(object.size()) + "\r\n"
               : "HTTP/1.1 200 OK\r\n";
  r.head += "ETag: \"e" + std::to_string(object.size()) +
            "\"\r\nContent-Length: " + std::to_string(length) + "\r\n\r\n";
  if (method != "HEAD") {
    if (fault == LoopbackFault::kTruncate) {
      r.body = object.Slice(start, length / 2);
      r.close_after = true;
    } else {
      r.body = object.Slice(start, length);
    }
  }
  return r;
}

bool LoopbackServer::Impl::HandleRequests(Connection& c) {
  while (true) {
    const size_t end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) return true;
    std::string_view head(c.in.data(), end);
    const size_t line_end = head.find("\r\n");
    const std::string_view request_line = head.substr(0, line_end);
    const size_t sp1 = request_line.find(' ');
    const size_t sp2 = request_line.find(' ', sp1 + 1);
    if (sp1 == std::string_view::npos || sp2 == std::string_view::npos) return false;
    const std::string method(request_line.substr(0, sp1));
    std::string_view target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));
    std::string range;
    size_t content_length = 0;
    bool close = false;
    size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t next = head.find("\r\n", pos);
      if (next == std::string_view::npos) next = head.size();
      const std::string_view line = head.substr(pos, next - pos);
      pos = next + 2;
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string_view name = line.substr(0, colon);
      const std::string_view value = TrimWhitespace(line.substr(colon + 1));
      if (EqualsIgnoreCase(name, "range")) range = std::string(value);
      if (EqualsIgnoreCase(name, "content-length")) {
        std::from_chars(value.data(), value.data() + value.size(), content_length);
      }
      if (EqualsIgnoreCase(name, "connection") && EqualsIgnoreCase(value, "close")) close = true;
    }
    if (c.in.size() < end + 4 + content_length) return true;  // body not complete yet
    const std::string_view body(c.in.data() + end + 4, content_length);
    bool hang = false;
    Response r = Answer(method, target, range, body, &hang);
    c.in.erase(0, end + 4 + content_length);
    if (hang) continue;
    r.close_after = r.close_after || close;
    std::chrono::microseconds delay;
    {
      std::lock_guard lock(mu);
      delay = latency;
    }
    // Responses leave in request order: a connection's timers are FIFO (same delay).
    ++c.delayed;
    timers.push(Timed{Clock::now() + delay, c.id, seq++, std::move(r)});
  }
}

void LoopbackServer::Impl::UpdateEvents(Connection& c) {
  const bool want = !c.out.empty();
  if (want == c.want_write) return;
  c.want_write = want;
  epoll_event ev{};
  ev.events = EPOLLIN | (want ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  ev.data.u64 = c.id;
  epoll_ctl(epoll_fd.fd, EPOLL_CTL_MOD, c.fd.fd, &ev);
}

void LoopbackServer::Impl::Flush(Connection& c) {
  while (!c.out.empty()) {
    Response& r = c.out.front();
    iovec iov[2];
    int n = 0;
    const size_t head_left = r.sent < r.head.size() ? r.head.size() - r.sent : 0;
    if (head_left > 0) iov[n++] = {r.head.data() + r.sent, head_left};
    const size_t body_sent = r.sent > r.head.size() ? r.sent - r.head.size() : 0;
    if (body_sent < r.body.size()) {
      iov[n++] = {const_cast<uint8_t*>(r.body.data()) + body_sent, r.body.size() - body_sent};
    }
    if (n > 0) {
      const ssize_t w = ::writev(c.fd.fd, iov, n);
      if (w < 0) {
        if (errno == EAGAIN || errno == EINTR) break;
        c.closing = true;
        return;
      }
      r.sent += static_cast<size_t>(w);
      if (r.sent < r.head.size() + r.body.size()) continue;
    }
    const bool close_after = r.close_after;
    c.out.pop_front();
    if (close_after) {
      c.closing = true;
      return;
    }
  }
  UpdateEvents(c);
}

void LoopbackServer::Impl::Close(uint64_t id) { connections.erase(id); }

void LoopbackServer::Impl::Accept() {
  while (true) {
    const int fd = ::accept4(listen_fd.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Connection>();
    c->fd = Fd(fd);
    c->id = next_id++;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = c->id;
    epoll_ctl(epoll_fd.fd, EPOLL_CTL_ADD, fd, &ev);
    {
      std::lock_guard lock(mu);
      ++stats.connections;
    }
    connections.emplace(c->id, std::move(c));
  }
}

void LoopbackServer::Impl::OnReadable(Connection& c) {
  char buf[64 << 10];
  while (true) {
    const ssize_t n = ::read(c.fd.fd, buf, sizeof buf);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      c.closing = true;
      return;
    }
    if (errno == EAGAIN || errno == EINTR) break;
    c.closing = true;
    return;
  }
  if (!HandleRequests(c)) c.closing = true;
}

void LoopbackServer::Impl::Run() {
  constexpr uint64_t kListenId = 0;
  constexpr uint64_t kWakeId = ~uint64_t{0};
  epoll_event events[256];
  while (!stop.load(std::memory_order_acquire)) {
    // Timers are held to the microsecond (epoll_pwait2), so that the injected latency
    // is what the client sees, not latency rounded up to the next millisecond.
    auto wait = std::chrono::microseconds(1000000);
    if (!timers.empty()) {
      wait = std::clamp(
          std::chrono::duration_cast<std::chrono::microseconds>(timers.top().due - Clock::now()),
          std::chrono::microseconds(0), wait);
    }
    timespec ts{static_cast<time_t>(wait.count() / 1000000),
                static_cast<long>(wait.count() % 1000000) * 1000};
    int n = static_cast<int>(
        ::syscall(kEpollPwait2, epoll_fd.fd, events, 256, &ts, nullptr, size_t{0}));
    if (n < 0 && errno == ENOSYS) {
      n = ::epoll_wait(epoll_fd.fd, events, 256, static_cast<int>((wait.count() + 999) / 1000));
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kListenId) {
        Accept();
        continue;
      }
      if (id == kWakeId) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wake_fd.fd, &v, sizeof v);
        continue;
      }
      auto it = connections.find(id);
      if (it == connections.end()) continue;
      Connection& c = *it->second;
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) OnReadable(c);
      if (!c.closing && (events[i].events & EPOLLOUT)) Flush(c);
      // Responses still on their timers are dropped with the connection.
      if (c.closing) Close(id);
    }
    const auto now = Clock::now();
    while (!timers.empty() && timers.top().due <= now) {
      Timed t = std::move(const_cast<Timed&>(timers.top()));
      timers.pop();
      auto it = connections.find(t.connection);
      if (it == connections.end()) continue;
      Connection& c = *it->second;
      --c.delayed;
      c.out.push_back(std::move(t.response));
      Flush(c);
      if (c.closing) Close(t.connection);
    }
  }
}

Result<std::unique_ptr<LoopbackServer>> LoopbackServer::Start(std::chrono::microseconds latency) {
  auto impl = std::make_unique<Impl>();
  impl->latency = latency;
  impl->listen_fd = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (impl->listen_fd.fd < 0) return Status::IoError(std::string("socket: ") + strerror(errno));
  const int one = 1;
  ::setsockopt(impl->listen_fd.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(impl->listen_fd.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(impl->listen_fd.fd, 1024) != 0) {
    return Status::IoError(std::string("bind/listen on 127.0.0.1: ") + strerror(errno));
  }
  socklen_t len = sizeof addr;
  ::getsockname(impl->listen_fd.fd, reinterpret_cast<sockaddr*>(&addr), &len);
  impl->port = ntohs(addr.sin_port);
  impl->epoll_fd = Fd(::epoll_create1(EPOLL_CLOEXEC));
  impl->wake_fd = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (impl->epoll_fd.fd < 0 || impl->wake_fd.fd < 0) {
    return Status::IoError(std::string("epoll/eventfd: ") + strerror(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  epoll_ctl(impl->epoll_fd.fd, EPOLL_CTL_ADD, impl->listen_fd.fd, &ev);
  ev.data.u64 = ~uint64_t{0};
  epoll_ctl(impl->epoll_fd.fd, EPOLL_CTL_ADD, impl->wake_fd.fd, &ev);
  Impl* raw = impl.get();
  raw->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<LoopbackServer>(new LoopbackServer(std::move(impl)));
}

LoopbackServer::LoopbackServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LoopbackServer::~LoopbackServer() {
  impl_->stop.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(impl_->wake_fd.fd, &one, sizeof one);
  impl_->thread.join();
}

int LoopbackServer::port() const { return impl_->port; }
std::string LoopbackServer::origin() const {
  return "http://127.0.0.1:" + std::to_string(impl_->port);
}

void LoopbackServer::Put(const std::string& path, Buffer bytes) {
  std::lock_guard lock(impl_->mu);
  impl_->objects[path] = std::move(bytes);
}

void LoopbackServer::SetFault(const std::string& path, LoopbackFault fault, int count) {
  std::lock_guard lock(impl_->mu);
  impl_->faults[path] = {fault, count};
}

void LoopbackServer::SetLatency(std::chrono::microseconds latency) {
  std::lock_guard lock(impl_->mu);
  impl_->latency = latency;
}

LoopbackServerStats LoopbackServer::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

}  // namespace headrace
