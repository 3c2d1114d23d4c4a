#include "headrace/io/curl_loop.h"

#include <curl/curl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <queue>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "headrace/core/clock.h"
#include "headrace/core/strings.h"

namespace headrace {
namespace {

struct EasyDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct MultiDeleter {
  void operator()(CURLM* m) const { curl_multi_cleanup(m); }
};
struct SlistDeleter {
  void operator()(curl_slist* s) const { curl_slist_free_all(s); }
};
using EasyHandle = std::unique_ptr<CURL, EasyDeleter>;
using MultiHandle = std::unique_ptr<CURLM, MultiDeleter>;
using Slist = std::unique_ptr<curl_slist, SlistDeleter>;

constexpr size_t kMaxErrorBody = 8 << 10;
constexpr size_t kUnknownSizeStart = 64 << 10;

bool HeaderIs(std::string_view name, std::string_view want) {
  if (name.size() != want.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(name[i])) != want[i]) return false;
  }
  return true;
}

bool ParseInt(std::string_view s, int64_t* out) {
  s = TrimWhitespace(s);
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// One transfer in flight. Lives in a unique_ptr owned by the loop; curl's PRIVATE
// pointer and the callbacks' user data point at it.
struct Transfer {
  HttpRequest request;
  HttpCallback done;
  EasyHandle easy;
  Slist headers;
  HttpResponse response;
  Clock::time_point started;
  bool first_byte = false;
  bool first_byte_timed_out = false;
  bool overflow = false;
  bool over_limit = false;
  bool refused = false;
  bool alloc_failed = false;
  bool is_2xx = false;
  bool growable = false;
  size_t capacity = 0;  // bytes writable at body_offset
  size_t upload_pos = 0;
  char error_buffer[CURL_ERROR_SIZE] = {};

  // Decides where the body goes once the headers of the final response are in.
  bool PrepareBody() {
    HttpResponse& r = response;
    is_2xx = r.status >= 200 && r.status < 300;
    if (!is_2xx || request.method == "HEAD") return true;
    if (!request.sink.empty() || request.sink_offset > 0) {
      r.body = request.sink;
      r.body_offset = request.sink_offset;
      capacity =
          request.sink.size() > request.sink_offset ? request.sink.size() - request.sink_offset : 0;
      return true;
    }
    size_t size = 0;
    if (request.range_body && r.status == 206 && r.range_start >= 0 &&
        r.range_end >= r.range_start) {
      size = static_cast<size_t>(r.range_end - r.range_start + 1);
    } else if (r.range_total >= 0 && r.range_start >= 0 && r.range_start <= r.range_total) {
      size = static_cast<size_t>(r.range_total);
      r.body_offset = static_cast<size_t>(r.range_start);
    } else if (r.content_length >= 0) {
      size = static_cast<size_t>(r.content_length);
    } else {
      size = kUnknownSizeStart;
      if (request.max_body_bytes >= 0) {
        size = std::min(size, static_cast<size_t>(request.max_body_bytes));
      }
      growable = true;
    }
    if (!growable && request.max_body_bytes >= 0 &&
        size > static_cast<size_t>(request.max_body_bytes)) {
      over_limit = true;
      return false;
    }
    if (!Admit(size)) return false;
    Result<Buffer> buffer = Buffer::Allocate(size);
    if (!buffer.ok()) {
      alloc_failed = true;
      return false;
    }
    r.body = std::move(buffer).value();
    capacity = size - r.body_offset;
    return true;
  }

  // Whether the body may hold `bytes` (the size gate); records a refusal.
  bool Admit(size_t bytes) {
    if (!request.size_gate || request.size_gate(static_cast<int64_t>(bytes))) return true;
    refused = true;
    return false;
  }

  size_t OnHeader(std::string_view line) {
    first_byte = true;
    HttpResponse& r = response;
    if (line.substr(0, 5) == "HTTP/") {  // a new status line: reset what came before
      r.status = 0;
      r.content_length = r.range_start = r.range_end = r.range_total = -1;
      r.etag.clear();
      const size_t sp = line.find(' ');
      int64_t status = 0;
      if (sp != std::string_view::npos && ParseInt(line.substr(sp + 1, 3), &status)) {
        r.status = static_cast<long>(status);
      }
      return line.size();
    }
    if (TrimWhitespace(line).empty()) {                           // end of headers
      if (r.status >= 100 && r.status < 200) return line.size();  // 100 Continue
      return PrepareBody() ? line.size() : 0;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return line.size();
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = TrimWhitespace(line.substr(colon + 1));
    if (HeaderIs(name, "content-length")) {
      int64_t v = -1;
      if (ParseInt(value, &v) && v >= 0) r.content_length = v;
    } else if (HeaderIs(name, "content-range")) {
      // "bytes START-END/TOTAL" (TOTAL may be "*")
      std::string_view v = value;
      if (v.substr(0, 6) == "bytes ") v.remove_prefix(6);
      const size_t dash = v.find('-');
      const size_t slash = v.find('/');
      int64_t a = 0, b = 0, t = 0;
      if (dash != std::string_view::npos && slash != std::string_view::npos && dash < slash &&
          ParseInt(v.substr(0, dash), &a) && ParseInt(v.substr(dash + 1, slash - dash - 1), &b)) {
        r.range_start = a;
        r.range_end = b;
        if (ParseInt(v.substr(slash + 1), &t)) r.range_total = t;
      }
    } else if (HeaderIs(name, "etag")) {
      r.etag = std::string(value);
    }
    return line.size();
  }

  size_t OnBody(const char* data, size_t n) {
    HttpResponse& r = response;
    if (!is_2xx) {
      const size_t keep = std::min(n, kMaxErrorBody - std::min(kMaxErrorBody, r.error_body.size()));
      r.error_body.append(data, keep);
      return n;
    }
    if (r.received + n > capacity) {
      if (!growable) {
        overflow = true;
        return 0;  // ends the transfer with CURLE_WRITE_ERROR
      }
      size_t new_capacity = std::max(capacity * 2, r.received + n);
      if (request.max_body_bytes >= 0) {
        const auto limit = static_cast<size_t>(request.max_body_bytes);
        if (r.received + n > limit) {
          over_limit = true;
          return 0;
        }
        new_capacity = std::min(new_capacity, limit);
      }
      if (!Admit(new_capacity)) return 0;
      Result<Buffer> bigger = Buffer::Allocate(new_capacity);
      if (!bigger.ok()) {
        alloc_failed = true;
        return 0;
      }
      std::memcpy(bigger->mutable_data(), r.body.data(), r.received);
      r.bytes_copied += static_cast<int64_t>(r.received);
      r.body = std::move(bigger).value();
      capacity = new_capacity;
    }
    std::memcpy(r.body.mutable_data() + r.body_offset + r.received, data, n);
    r.received += n;
    return n;
  }

  size_t OnUpload(char* out, size_t n) {
    const size_t left = request.body.size() - upload_pos;
    const size_t take = std::min(left, n);
    std::memcpy(out, request.body.data() + upload_pos, take);
    upload_pos += take;
    return take;
  }
};

size_t HeaderCallback(char* buffer, size_t size, size_t nitems, void* user) {
  return static_cast<Transfer*>(user)->OnHeader(std::string_view(buffer, size * nitems));
}
size_t WriteCallback(char* ptr, size_t size, size_t nmemb, void* user) {
  return static_cast<Transfer*>(user)->OnBody(ptr, size * nmemb);
}
size_t UploadCallback(char* out, size_t size, size_t nitems, void* user) {
  return static_cast<Transfer*>(user)->OnUpload(out, size * nitems);
}

TransportError Classify(CURLcode rc, const Transfer& t) {
  if (t.first_byte_timed_out) return TransportError::kTimeout;
  switch (rc) {
    case CURLE_OK:
      if (t.is_2xx && t.response.content_length >= 0 &&
          static_cast<int64_t>(t.response.received) < t.response.content_length &&
          t.request.method != "HEAD") {
        return TransportError::kTruncated;
      }
      return TransportError::kNone;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return TransportError::kConnect;
    case CURLE_OPERATION_TIMEDOUT: return TransportError::kTimeout;
    case CURLE_PARTIAL_FILE: return TransportError::kTruncated;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING: return TransportError::kReset;
    case CURLE_WRITE_ERROR:
      if (t.over_limit) return TransportError::kOverLimit;
      if (t.refused) return TransportError::kRefused;
      return t.overflow ? TransportError::kBodyTooLarge : TransportError::kOther;
    default: return TransportError::kOther;
  }
}

struct Pending {
  HttpRequest request;
  HttpCallback done;
  Clock::time_point due;
};

struct LaterFirst {
  bool operator()(const std::unique_ptr<Pending>& a, const std::unique_ptr<Pending>& b) const {
    return a->due > b->due;
  }
};

HttpResponse CancelledResponse(const char* why = "storage shut down") {
  HttpResponse r;
  r.error = TransportError::kCancelled;
  r.error_text = why;
  return r;
}

constexpr const char* kGivenUp = "the reader gave the read up";

}  // namespace

// The loop drives libcurl with curl_multi_socket_action over its own epoll set: each
// wake-up touches only the transfers whose sockets are ready (curl_multi_perform would
// walk every transfer in flight, which costs more than the I/O at 128 in flight).
struct CurlLoop::Impl {
  CurlLoopOptions options;
  MultiHandle multi;
  int epoll_fd = -1;
  int wake_fd = -1;  // eventfd: Submit and the destructor wake the loop through it
  Clock::time_point curl_deadline = Clock::time_point::max();  // I/O thread only
  Clock::time_point next_wanted_check;                          // I/O thread only
  bool asks_wanted = false;  // I/O thread only: some request has a `wanted` to ask

  mutable std::mutex mu;
  std::vector<std::unique_ptr<Pending>> queue;  // guarded by mu
  bool stopping = false;                        // guarded by mu
  CurlLoopStats stats;                          // guarded by mu

  // I/O thread only.
  std::priority_queue<std::unique_ptr<Pending>, std::vector<std::unique_ptr<Pending>>, LaterFirst>
      delayed;
  std::unordered_map<Transfer*, std::unique_ptr<Transfer>> active;  // running transfers
  std::vector<EasyHandle> idle_handles;

  std::thread thread;

  ~Impl() {
    // libcurl reports sockets it closes on cleanup; the epoll set must outlive that.
    idle_handles.clear();
    multi.reset();
    if (epoll_fd >= 0) ::close(epoll_fd);
    if (wake_fd >= 0) ::close(wake_fd);
  }
  void Wake() const {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(wake_fd, &one, sizeof one);
  }
  static int OnSocket(CURL* easy, curl_socket_t s, int what, void* user, void* socketp);
  static int OnTimer(CURLM* multi, long timeout_ms, void* user);
  void Run();
  void StartTransfer(std::unique_ptr<Pending> p);
  void Finish(Transfer* t, CURLcode rc);
  std::unique_ptr<Transfer> Release(Transfer* t);
  void CheckFirstByte(Clock::time_point now, Clock::time_point* earliest);
  // Ends the delayed and running requests whose `wanted` says no; true if any request
  // waiting or running has a `wanted` to ask again later.
  bool CheckWanted();
};

bool CurlLoop::Impl::CheckWanted() {
  bool asks = false;
  std::vector<Transfer*> unwanted;
  for (const auto& [t, owner] : active) {
    if (!t->request.wanted) continue;
    asks = true;
    if (!t->request.wanted()) unwanted.push_back(t);
  }
  for (Transfer* t : unwanted) {
    curl_multi_remove_handle(multi.get(), t->easy.get());
    std::unique_ptr<Transfer> owned = Release(t);
    idle_handles.push_back(std::move(owned->easy));
    HttpCallback done = std::move(owned->done);
    owned.reset();
    done(CancelledResponse(kGivenUp));
  }
  // A priority queue cannot drop from its middle: rebuild it without the unwanted.
  std::vector<std::unique_ptr<Pending>> keep, given_up;
  while (!delayed.empty()) {
    auto p = std::move(const_cast<std::unique_ptr<Pending>&>(delayed.top()));
    delayed.pop();
    if (p->request.wanted) {
      asks = true;
      if (!p->request.wanted()) {
        given_up.push_back(std::move(p));
        continue;
      }
    }
    keep.push_back(std::move(p));
  }
  for (auto& p : keep) delayed.push(std::move(p));
  for (auto& p : given_up) p->done(CancelledResponse(kGivenUp));
  return asks;
}

std::unique_ptr<Transfer> CurlLoop::Impl::Release(Transfer* t) {
  auto node = active.extract(t);
  return std::move(node.mapped());
}

void CurlLoop::Impl::StartTransfer(std::unique_ptr<Pending> p) {
  if (p->request.wanted) {
    if (!p->request.wanted()) {
      p->done(CancelledResponse(kGivenUp));
      return;
    }
    asks_wanted = true;  // poll it from the next wake-up on
  }
  auto t = std::make_unique<Transfer>();
  t->request = std::move(p->request);
  t->done = std::move(p->done);
  if (!idle_handles.empty()) {
    t->easy = std::move(idle_handles.back());
    idle_handles.pop_back();
    curl_easy_reset(t->easy.get());
  } else {
    t->easy.reset(curl_easy_init());
  }
  CURL* e = t->easy.get();
  if (e == nullptr) {
    HttpResponse r;
    r.error = TransportError::kOther;
    r.error_text = "curl_easy_init failed";
    t->done(std::move(r));
    return;
  }
  curl_slist* list = nullptr;
  for (const std::string& h : t->request.headers) list = curl_slist_append(list, h.c_str());
  if (t->request.method == "PUT") list = curl_slist_append(list, "Expect:");
  t->headers.reset(list);

  curl_easy_setopt(e, CURLOPT_URL, t->request.url.c_str());
  curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers.get());
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, HeaderCallback);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, WriteCallback);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error_buffer);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);  // the signed path is the path sent
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_NOPROXY, "localhost,127.0.0.1,::1");
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout_ms));
  if (!options.ca_bundle.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, options.ca_bundle.c_str());
  if (options.low_speed_limit > 0 && options.low_speed_time_s > 0) {
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(options.low_speed_limit));
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options.low_speed_time_s));
  }
  if (t->request.method == "HEAD") {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else if (t->request.method == "PUT") {
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, UploadCallback);
    curl_easy_setopt(e, CURLOPT_READDATA, t.get());
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(t->request.body.size()));
  } else if (t->request.method != "GET") {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, t->request.method.c_str());
  }
  t->started = Clock::now();
  Transfer* raw = t.get();
  const CURLMcode mc = curl_multi_add_handle(multi.get(), e);
  if (mc != CURLM_OK) {
    HttpResponse r;
    r.error = TransportError::kOther;
    r.error_text = std::string("curl_multi_add_handle: ") + curl_multi_strerror(mc);
    t->done(std::move(r));
    return;
  }
  active.emplace(raw, std::move(t));
}

void CurlLoop::Impl::Finish(Transfer* raw, CURLcode rc) {
  curl_multi_remove_handle(multi.get(), raw->easy.get());
  std::unique_ptr<Transfer> t = Release(raw);
  HttpResponse& r = t->response;
  r.error = Classify(rc, *t);
  if (t->alloc_failed) {
    r.error = TransportError::kOther;
    r.error_text = "cannot allocate the response buffer";
  } else if (t->first_byte_timed_out) {
    r.error_text = "no response within " + std::to_string(options.first_byte_timeout_ms) +
                   " ms (first-byte timeout)";
  } else if (r.error == TransportError::kTruncated) {
    r.error_text = "truncated body: received " + std::to_string(r.received) + " of " +
                   (r.content_length >= 0 ? std::to_string(r.content_length) : "?") +
                   " bytes (Content-Length mismatch)";
  } else if (r.error == TransportError::kBodyTooLarge) {
    r.error_text = "the body is larger than announced";
  } else if (r.error == TransportError::kOverLimit) {
    const int64_t announced = r.range_total >= 0 ? r.range_total : r.content_length;
    r.error_text = announced >= 0 ? "the object is " + std::to_string(announced) + " bytes"
                                  : "the body passed the limit after " +
                                        std::to_string(r.received) +
                                        " bytes (length not announced)";
    r.error_text += ", limit " + std::to_string(t->request.max_body_bytes) + " bytes";
  } else if (r.error == TransportError::kRefused) {
    r.error_text = "the body's size was refused by the reader";
  } else if (r.error != TransportError::kNone) {
    r.error_text = t->error_buffer[0] != '\0' ? t->error_buffer : curl_easy_strerror(rc);
  }
  if (t->growable && r.error == TransportError::kNone) r.body = r.body.Slice(0, r.received);
  long connects = 0;
  curl_easy_getinfo(t->easy.get(), CURLINFO_NUM_CONNECTS, &connects);
  {
    std::lock_guard lock(mu);
    ++stats.transfers;
    if (t->is_2xx) stats.bytes_received += static_cast<int64_t>(r.received);
    stats.bytes_copied += r.bytes_copied;
    stats.connections += connects;
  }
  // Drop what the response must not keep alive before the handle is reused.
  t->headers.reset();
  idle_handles.push_back(std::move(t->easy));
  HttpCallback done = std::move(t->done);
  HttpResponse response = std::move(t->response);
  t.reset();
  done(std::move(response));
}

int CurlLoop::Impl::OnSocket(CURL*, curl_socket_t s, int what, void* user, void*) {
  auto* impl = static_cast<Impl*>(user);
  if (what == CURL_POLL_REMOVE) {
    epoll_ctl(impl->epoll_fd, EPOLL_CTL_DEL, s, nullptr);
    return 0;
  }
  epoll_event ev{};
  ev.data.fd = s;
  ev.events = ((what & CURL_POLL_IN) ? static_cast<uint32_t>(EPOLLIN) : 0u) |
              ((what & CURL_POLL_OUT) ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  if (epoll_ctl(impl->epoll_fd, EPOLL_CTL_MOD, s, &ev) != 0 && errno == ENOENT) {
    epoll_ctl(impl->epoll_fd, EPOLL_CTL_ADD, s, &ev);
  }
  return 0;
}

int CurlLoop::Impl::OnTimer(CURLM*, long timeout_ms, void* user) {
  auto* impl = static_cast<Impl*>(user);
  impl->curl_deadline = timeout_ms < 0 ? Clock::time_point::max()
                                       : Clock::now() + std::chrono::milliseconds(timeout_ms);
  return 0;
}

void CurlLoop::Impl::CheckFirstByte(Clock::time_point now, Clock::time_point* earliest) {
  if (options.first_byte_timeout_ms <= 0) return;
  const auto limit = std::chrono::milliseconds(options.first_byte_timeout_ms);
  std::vector<Transfer*> expired;
  for (const auto& [t, owner] : active) {
    if (t->first_byte) continue;
    const auto deadline = t->started + limit;
    if (deadline <= now) {
      expired.push_back(t);
    } else {
      *earliest = std::min(*earliest, deadline);
    }
  }
  for (Transfer* t : expired) {
    t->first_byte_timed_out = true;
    Finish(t, CURLE_OPERATION_TIMEDOUT);
  }
}

void CurlLoop::Impl::Run() {
  while (true) {
    std::vector<std::unique_ptr<Pending>> incoming;
    {
      std::lock_guard lock(mu);
      if (stopping) break;
      incoming.swap(queue);
    }
    Clock::time_point now = Clock::now();
    for (auto& p : incoming) {
      if (p->due <= now) {
        StartTransfer(std::move(p));
      } else {
        if (p->request.wanted) asks_wanted = true;
        delayed.push(std::move(p));
      }
    }
    while (!delayed.empty() && delayed.top()->due <= now) {
      // priority_queue::top is const; the element is moved out right before pop.
      auto p = std::move(const_cast<std::unique_ptr<Pending>&>(delayed.top()));
      delayed.pop();
      StartTransfer(std::move(p));
    }
    // Asked every kWantedPollInterval, not at every wake-up: under load the loop wakes
    // thousands of times a second, and asking walks every request.
    if (now >= next_wanted_check) {
      asks_wanted = CheckWanted();
      next_wanted_check = now + kWantedPollInterval;
    }
    const bool asks = asks_wanted;
    now = Clock::now();
    Clock::time_point wake =
        asks ? std::min(next_wanted_check, now + kWantedPollInterval) : now + std::chrono::seconds(1);
    CheckFirstByte(now, &wake);
    if (!delayed.empty()) wake = std::min(wake, delayed.top()->due);
    wake = std::min(wake, curl_deadline);
    {
      std::lock_guard lock(mu);
      if (stopping) continue;
      if (!queue.empty()) wake = now;
    }
    const auto wait_us = std::chrono::duration_cast<std::chrono::microseconds>(wake - now).count();
    epoll_event events[256];
    const int n = ::epoll_wait(epoll_fd, events, 256,
                               static_cast<int>(std::max<int64_t>(0, (wait_us + 999) / 1000)));
    int running = 0;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wake_fd, &v, sizeof v);
        continue;
      }
      int mask = 0;
      if (events[i].events & EPOLLIN) mask |= CURL_CSELECT_IN;
      if (events[i].events & EPOLLOUT) mask |= CURL_CSELECT_OUT;
      if (events[i].events & (EPOLLERR | EPOLLHUP)) mask |= CURL_CSELECT_ERR;
      curl_multi_socket_action(multi.get(), fd, mask, &running);
    }
    if (Clock::now() >= curl_deadline) {
      curl_deadline = Clock::time_point::max();
      curl_multi_socket_action(multi.get(), CURL_SOCKET_TIMEOUT, 0, &running);
    }
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi.get(), &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &t);
      const CURLcode rc = msg->data.result;
      Finish(t, rc);
    }
  }
  // Stopping: everything still here completes with kCancelled.
  while (!active.empty()) {
    Transfer* t = active.begin()->first;
    curl_multi_remove_handle(multi.get(), t->easy.get());
    std::unique_ptr<Transfer> owned_t = Release(t);
    HttpCallback done = std::move(owned_t->done);
    owned_t.reset();
    done(CancelledResponse());
  }
  while (!delayed.empty()) {
    auto p = std::move(const_cast<std::unique_ptr<Pending>&>(delayed.top()));
    delayed.pop();
    p->done(CancelledResponse());
  }
  std::vector<std::unique_ptr<Pending>> rest;
  {
    std::lock_guard lock(mu);
    rest.swap(queue);
  }
  for (auto& p : rest) p->done(CancelledResponse());
}

Result<std::unique_ptr<CurlLoop>> CurlLoop::Start(const CurlLoopOptions& options) {
  static const CURLcode global = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (global != CURLE_OK) {
    return Status::IoError(std::string("curl_global_init: ") + curl_easy_strerror(global));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->multi.reset(curl_multi_init());
  if (!impl->multi) return Status::IoError("curl_multi_init failed");
  impl->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  impl->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->epoll_fd < 0 || impl->wake_fd < 0) return Status::IoError("epoll/eventfd failed");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = impl->wake_fd;
  epoll_ctl(impl->epoll_fd, EPOLL_CTL_ADD, impl->wake_fd, &ev);
  curl_multi_setopt(impl->multi.get(), CURLMOPT_SOCKETFUNCTION, &Impl::OnSocket);
  curl_multi_setopt(impl->multi.get(), CURLMOPT_SOCKETDATA, impl.get());
  curl_multi_setopt(impl->multi.get(), CURLMOPT_TIMERFUNCTION, &Impl::OnTimer);
  curl_multi_setopt(impl->multi.get(), CURLMOPT_TIMERDATA, impl.get());
  if (options.max_host_connections > 0) {
    curl_multi_setopt(impl->multi.get(), CURLMOPT_MAX_HOST_CONNECTIONS,
                      static_cast<long>(options.max_host_connections));
  }
  Impl* raw = impl.get();
  raw->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<CurlLoop>(new CurlLoop(std::move(impl)));
}

CurlLoop::CurlLoop(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CurlLoop::~CurlLoop() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->Wake();
  impl_->thread.join();
}

void CurlLoop::Submit(HttpRequest request, HttpCallback done, std::chrono::milliseconds delay) {
  auto p = std::make_unique<Pending>();
  p->request = std::move(request);
  p->done = std::move(done);
  p->due = Clock::now() + delay;
  {
    std::lock_guard lock(impl_->mu);
    if (!impl_->stopping) {
      impl_->queue.push_back(std::move(p));
      p = nullptr;
    }
  }
  if (p) {
    p->done(CancelledResponse());
    return;
  }
  impl_->Wake();
}

CurlLoopStats CurlLoop::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

}  // namespace headrace
