#include "headrace/io/object_storage.h"

#include <fnmatch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>

#include "headrace/core/strings.h"
#include "headrace/io/curl_loop.h"
#include "headrace/io/retry.h"
#include "headrace/io/sigv4.h"
#include "headrace/io/uri.h"

namespace headrace {
namespace {

enum class Backend {
  kS3,    // signed (or anonymous) S3 REST requests
  kHttp,  // the URI is the URL
};

// The text between <tag> and </tag> from `from` on, XML entities decoded; npos-safe.
std::string XmlValue(std::string_view xml, std::string_view tag, size_t* from = nullptr) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  const size_t start_at = from ? *from : 0;
  const size_t a = xml.find(open, start_at);
  if (a == std::string_view::npos) return {};
  const size_t b = xml.find(close, a + open.size());
  if (b == std::string_view::npos) return {};
  if (from) *from = b + close.size();
  std::string_view raw = xml.substr(a + open.size(), b - a - open.size());
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '&') {
      static constexpr std::pair<std::string_view, char> kEntities[] = {
          {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
      bool matched = false;
      for (const auto& [name, c] : kEntities) {
        if (raw.substr(i, name.size()) == name) {
          out += c;
          i += name.size() - 1;
          matched = true;
          break;
        }
      }
      if (matched) continue;
    }
    out += raw[i];
  }
  return out;
}

// Encodes what may not appear raw in a URL (spaces, controls, non-ASCII, a few
// delimiters); keeps '%', '/', '?', '&', '=' and the other reserved characters.
std::string SafeUrl(std::string_view uri) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : uri) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f || c == '"' || c == '<' || c == '>' || c == '\\' || c == '^' ||
        c == '`' || c == '{' || c == '|' || c == '}') {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

bool Is2xx(const HttpResponse& r) { return r.status >= 200 && r.status < 300; }

// The server asked us to slow down (S3 answers throttling with 503 SlowDown).
bool IsThrottle(const HttpResponse& r, std::string_view code) {
  return r.error == TransportError::kNone &&
         (r.status == 429 || r.status == 503 || code == "SlowDown");
}

// The key of a retry in ObjectStoreStats::retries_by_reason.
// A read's gate asked whether the read is still wanted (storage.h), as curl's `wanted`.
std::function<bool()> StillWanted(const ReadGate& gate) {
  if (!gate) return nullptr;
  return [gate] { return gate(kReadStillWanted); };
}

std::string RetryReason(const HttpResponse& r, const std::string& code) {
  switch (r.error) {
    case TransportError::kNone: break;
    case TransportError::kConnect: return "connect";
    case TransportError::kTimeout: return "timeout";
    case TransportError::kReset: return "reset";
    case TransportError::kTruncated: return "truncated";
    default: return std::string(TransportErrorName(r.error));
  }
  return code.empty() ? "http_" + std::to_string(r.status) : code;
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

using RequestFactory = std::function<Result<HttpRequest>()>;
using ResponseCallback = std::function<void(Result<HttpResponse>)>;

class ObjectStorage final : public ObjectStore {
 public:
  ObjectStorage(Backend backend, S3Settings settings, const StorageSpec& spec,
                std::unique_ptr<CurlLoop> loop)
      : backend_(backend),
        settings_(std::move(settings)),
        spec_(spec),
        policy_{spec.max_retries, std::chrono::milliseconds(spec.retry_base_ms),
                std::chrono::milliseconds(spec.retry_max_ms)},
        budget_(spec.retry_budget),
        loop_(std::move(loop)) {
    virtual_hosted_ =
        spec.addressing_style == AddressingStyle::kVirtual ||
        (spec.addressing_style == AddressingStyle::kAuto && !settings_.custom_endpoint);
    part_bytes_ = static_cast<size_t>(std::max<int64_t>(spec.part_bytes, 1));
  }

  // The loop (and its thread) goes first: every pending callback runs with kCancelled
  // while the rest of this object is still alive.
  ~ObjectStorage() override { loop_.reset(); }

  std::string_view name() const override { return backend_ == Backend::kS3 ? "s3" : "http"; }

  std::string endpoint() const override {
    return backend_ == Backend::kS3 ? settings_.endpoint.Origin() + settings_.endpoint.base_path
                                    : "http(s)";
  }

  ObjectStoreStats stats() const override {
    ObjectStoreStats s;
    const CurlLoopStats l = loop_->stats();
    s.requests = requests_.load();
    s.retries = retries_.load();
    {
      std::lock_guard lock(stats_mu_);
      s.retries_by_reason = retries_by_reason_;
    }
    s.throttles = throttles_.load();
    s.failed_reads = failed_reads_.load();
    s.bytes_received = l.bytes_received;
    s.bytes_copied = l.bytes_copied;
    s.connections = l.connections;
    return s;
  }

  std::vector<StorageStats> Stats() const override {
    const ObjectStoreStats o = stats();
    StorageStats s;
    s.backend = std::string(name());
    s.endpoint = endpoint();
    s.requests = o.requests;
    s.retries = o.retries;
    s.retries_by_reason = o.retries_by_reason;
    s.throttles = o.throttles;
    s.errors = o.failed_reads;
    s.bytes = o.bytes_received;
    s.connections = o.connections;
    s.bytes_copied = o.bytes_copied;
    return {s};
  }

  void ReadAsync(std::string uri, ReadCallback done) override {
    ReadAsyncGated(std::move(uri), std::move(done), nullptr);
  }
  void ReadAsyncGated(std::string uri, ReadCallback done, ReadGate gate) override;
  void ReadRangeAsyncGated(std::string uri, int64_t offset, int64_t length, ReadCallback done,
                           ReadGate gate) override;
  void SizeAsync(std::string uri, SizeCallback done, ReadGate wanted) override;
  Result<std::vector<ObjectInfo>> List(const std::string& pattern, int page_size) override;
  void WriteAsync(std::string uri, Buffer bytes, std::function<void(Status)> done) override;
  Status CreateBucket(const std::string& bucket_uri) override;

 private:
  struct ReadOp;

  // Builds a request for `uri` (S3: signed at this moment).
  Result<HttpRequest> MakeRequest(const std::string& method, const std::string& uri,
                                  std::vector<std::pair<std::string, std::string>> query,
                                  std::vector<std::string> extra_headers, Buffer body) const;
  // Runs `make` with retries; `done` gets the final response (any status) or the error.
  void Execute(RequestFactory make, std::string what, ResponseCallback done, int retry = 0,
               std::chrono::milliseconds delay = std::chrono::milliseconds(0));
  Result<HttpResponse> ExecuteBlocking(RequestFactory make, std::string what);
  // The Status of a final non-2xx response to an operation on `uri`.
  Status ErrorOf(const HttpResponse& r, const std::string& what, const std::string& uri) const;
  Status DeadStatus() const;
  std::string Describe(const HttpResponse& r) const;
  void ReadParts(const std::shared_ptr<ReadOp>& op, Buffer buffer, size_t first_len,
                 std::string etag);

  const Backend backend_;
  const S3Settings settings_;
  const StorageSpec spec_;
  const RetryPolicy policy_;
  RetryBudget budget_;
  bool virtual_hosted_ = false;
  size_t part_bytes_ = 8 << 20;
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> retries_{0};
  std::atomic<int64_t> throttles_{0};
  std::atomic<int64_t> failed_reads_{0};
  mutable std::mutex stats_mu_;
  std::map<std::string, int64_t> retries_by_reason_;  // guarded by stats_mu_
  std::atomic<uint64_t> jitter_seed_{0x243f6a8885a308d3ULL};
  mutable std::mutex dead_mu_;
  std::string last_error_;  // guarded by dead_mu_: why the endpoint was declared dead
  std::unique_ptr<CurlLoop> loop_;
};

// One ReadAsync: its parts all complete on the I/O thread, so no lock is needed.
struct ObjectStorage::ReadOp {
  std::string uri;
  std::string what;  // "GET '<uri, shortened>'", for messages
  ReadCallback done;
  int parts_pending = 0;
  bool finished = false;
  Buffer buffer;

  void Fail(Status s) {
    if (finished) return;
    finished = true;
    done(std::move(s));
  }
};

Result<HttpRequest> ObjectStorage::MakeRequest(
    const std::string& method, const std::string& uri,
    std::vector<std::pair<std::string, std::string>> query, std::vector<std::string> extra_headers,
    Buffer body) const {
  HttpRequest req;
  req.method = method;
  req.headers = std::move(extra_headers);
  req.body = std::move(body);
  if (backend_ == Backend::kHttp) {
    req.url = SafeUrl(uri);
    return req;
  }
  HR_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(uri));
  const Endpoint& ep = settings_.endpoint;
  const bool virtual_host = virtual_hosted_ && IsVirtualHostableBucket(loc.bucket);
  std::string host_name = virtual_host ? loc.bucket + "." + ep.host : ep.host;
  std::string path = ep.base_path;
  if (virtual_host) {
    path += "/" + UriEncode(loc.key, true);
  } else {
    path += "/" + loc.bucket;
    if (!loc.key.empty()) path += "/" + UriEncode(loc.key, true);
  }
  const std::string host = ep.HostHeader(host_name);
  req.url = ep.Origin(host_name) + path;
  if (!query.empty()) req.url += "?" + CanonicalQuery(query);
  req.headers.push_back("Host: " + host);
  if (settings_.anonymous) return req;

  const std::string payload_hash =
      req.body.empty() ? std::string(kEmptyPayloadSha256)
                       : Sha256Hex(std::string_view(reinterpret_cast<const char*>(req.body.data()),
                                                    req.body.size()));
  const std::string date = AmzDate(std::chrono::system_clock::now());
  SigningRequest s;
  s.method = method;
  s.canonical_uri = path;
  s.query = std::move(query);
  s.headers = {{"host", host}, {"x-amz-content-sha256", payload_hash}, {"x-amz-date", date}};
  if (!settings_.credentials.session_token.empty()) {
    s.headers.emplace_back("x-amz-security-token", settings_.credentials.session_token);
    req.headers.push_back("x-amz-security-token: " + settings_.credentials.session_token);
  }
  s.payload_sha256 = payload_hash;
  s.amz_date = date;
  s.region = settings_.region;
  const SigningResult signature = SignV4(settings_.credentials, s);
  req.headers.push_back("x-amz-content-sha256: " + payload_hash);
  req.headers.push_back("x-amz-date: " + date);
  req.headers.push_back("Authorization: " + signature.authorization);
  return req;
}

std::string ObjectStorage::Describe(const HttpResponse& r) const {
  std::string text;
  if (r.error != TransportError::kNone) {
    text = std::string(TransportErrorName(r.error)) + ": " + r.error_text;
  } else {
    text = "HTTP " + std::to_string(r.status);
    const std::string code = XmlValue(r.error_body, "Code");
    const std::string message = XmlValue(r.error_body, "Message");
    if (!code.empty()) text += " " + code;
    if (!message.empty()) text += ": " + message;
  }
  return Redact(std::move(text), settings_.credentials);
}

Status ObjectStorage::DeadStatus() const {
  std::lock_guard lock(dead_mu_);
  return Status::ResourceExhausted(
      "endpoint " + endpoint() + " is failing: retry budget exhausted (" +
      std::to_string(budget_.limit()) +
      " retries without a success, storage.retry_budget); last error: " + last_error_);
}

void ObjectStorage::Execute(RequestFactory make, std::string what, ResponseCallback done, int retry,
                            std::chrono::milliseconds delay) {
  if (budget_.Dead()) {
    done(DeadStatus());
    return;
  }
  Result<HttpRequest> request = make();
  if (!request.ok()) {
    done(request.status());
    return;
  }
  requests_.fetch_add(1, std::memory_order_relaxed);
  loop_->Submit(
      std::move(request).value(),
      [this, make = std::move(make), what = std::move(what), done = std::move(done),
       retry](HttpResponse r) mutable {
        if (r.error == TransportError::kCancelled) {
          done(Status::Cancelled(what + ": " + r.error_text));
          return;
        }
        const std::string code = r.error == TransportError::kNone && !Is2xx(r)
                                     ? XmlValue(r.error_body, "Code")
                                     : std::string();
        if (IsThrottle(r, code)) throttles_.fetch_add(1, std::memory_order_relaxed);
        if (IsRetryable(r.error, r.status, code)) {
          const std::string last = Describe(r);
          if (retry >= policy_.max_retries) {
            done(Status::IoError(what + " failed after " + std::to_string(retry + 1) +
                                 " attempts at endpoint " + endpoint() + "; last error: " + last));
            return;
          }
          if (!budget_.TrySpend()) {
            {
              std::lock_guard lock(dead_mu_);
              if (last_error_.empty()) last_error_ = last + " (" + what + ")";
            }
            done(DeadStatus());
            return;
          }
          retries_.fetch_add(1, std::memory_order_relaxed);
          {
            std::lock_guard lock(stats_mu_);
            ++retries_by_reason_[RetryReason(r, code)];
          }
          const uint64_t random =
              SplitMix(jitter_seed_.fetch_add(0x9e3779b97f4a7c15ULL, std::memory_order_relaxed));
          Execute(std::move(make), std::move(what), std::move(done), retry + 1,
                  policy_.Backoff(retry + 1, random));
          return;
        }
        if (r.error == TransportError::kOverLimit) {
          done(Status::ResourceExhausted(what + ": " + r.error_text +
                                         " (storage.max_object_bytes; by default the larger of "
                                         "memory.budget_bytes and 1 GiB); transfer aborted"));
          return;
        }
        if (r.error == TransportError::kRefused) {
          done(Status::Cancelled(what + ": " + r.error_text));
          return;
        }
        if (r.error != TransportError::kNone) {
          done(Status::IoError(what + " at endpoint " + endpoint() + ": " + Describe(r)));
          return;
        }
        budget_.OnSuccess();  // the endpoint answered
        done(std::move(r));
      },
      delay);
}

Result<HttpResponse> ObjectStorage::ExecuteBlocking(RequestFactory make, std::string what) {
  std::promise<Result<HttpResponse>> promise;
  auto future = promise.get_future();
  Execute(std::move(make), std::move(what),
          [&promise](Result<HttpResponse> r) { promise.set_value(std::move(r)); });
  return future.get();
}

Status ObjectStorage::ErrorOf(const HttpResponse& r, const std::string& what,
                              const std::string& uri) const {
  const std::string code = XmlValue(r.error_body, "Code");
  const std::string detail = Describe(r);
  if (r.status == 404) {
    if (code == "NoSuchBucket") {
      const auto loc = ParseS3Uri(uri);
      return Status::NotFound("bucket " + QuoteForMessage(loc.ok() ? loc->bucket : uri) +
                              " does not exist at endpoint " + endpoint() + " (" + detail + ")");
    }
    return Status::NotFound("no such object: " + QuoteForMessage(uri) + " (" + detail + ")");
  }
  std::string message = what + " at endpoint " + endpoint() + ": " + detail;
  if (r.status == 403 || r.status == 401) {
    message = "access denied: " + message;
    if (backend_ == Backend::kS3) {
      message += settings_.anonymous
                     ? " (anonymous request: the bucket is not public; set credentials and "
                       "storage.anonymous: false)"
                     : " (credentials from " + settings_.credentials.source + ", access key id " +
                           settings_.credentials.RedactedKeyId() + ")";
    }
  } else if (r.status == 301 || r.status == 307 || code == "AuthorizationHeaderMalformed" ||
             code == "PermanentRedirect") {
    message +=
        " (the bucket is in another region or needs another endpoint: set "
        "storage.region or storage.endpoint; region now " +
        settings_.region + ")";
  }
  return Status::IoError(Redact(std::move(message), settings_.credentials));
}

void ObjectStorage::ReadAsyncGated(std::string uri, ReadCallback done, ReadGate gate) {
  auto op = std::make_shared<ReadOp>();
  op->uri = std::move(uri);
  op->what = "GET " + QuoteForMessage(op->uri);
  op->done = [this, done = std::move(done)](Result<Buffer> result) {
    if (!result.ok() && result.status().code() != StatusCode::kCancelled) {
      failed_reads_.fetch_add(1, std::memory_order_relaxed);
    }
    done(std::move(result));
  };
  const std::string range = "Range: bytes=0-" + std::to_string(part_bytes_ - 1);
  // The first reply says how big the object is: the limit and the gate apply to it (the
  // other parts land in the buffer it allocates).
  auto make = [this, op, range, gate = std::move(gate)]() -> Result<HttpRequest> {
    HR_ASSIGN_OR_RETURN(HttpRequest req, MakeRequest("GET", op->uri, {}, {range}, Buffer()));
    req.max_body_bytes = spec_.max_object_bytes > 0 ? spec_.max_object_bytes : -1;
    req.size_gate = gate;
    req.wanted = StillWanted(gate);
    return req;
  };
  Execute(std::move(make), op->what, [this, op](Result<HttpResponse> result) {
    if (!result.ok()) return op->Fail(result.status());
    HttpResponse& r = *result;
    if (r.status == 416 && r.range_total <= 0) {  // an empty object has no byte 0
      op->finished = true;
      return op->done(Buffer());
    }
    if (!Is2xx(r)) return op->Fail(ErrorOf(r, op->what, op->uri));
    if (r.status == 206 && r.range_start == 0 && r.range_total >= 0) {
      const size_t total = static_cast<size_t>(r.range_total);
      if (r.received >= total) {
        op->finished = true;
        return op->done(r.body.Slice(0, total));
      }
      return ReadParts(op, std::move(r.body), r.received, r.etag);
    }
    if (r.status == 206) {
      return op->Fail(Status::IoError(op->what +
                                      ": unexpected Content-Range in reply "
                                      "to a request for the first part"));
    }
    op->finished = true;  // 200: the whole object (a server that ignores Range)
    op->done(std::move(r.body));
  });
}

// One GET with "Range: bytes=A-B" (a shard member or a block of one), whatever
// part_bytes says: the caller chose the range's size. The body lands in a buffer of the
// range's size (HttpRequest::range_body), so the limit and the gate see the range.
void ObjectStorage::ReadRangeAsyncGated(std::string uri, int64_t offset, int64_t length,
                                        ReadCallback done, ReadGate gate) {
  if (offset < 0) {
    return done(Status::InvalidArgument("byte range starts at " + std::to_string(offset)));
  }
  if (length == 0) return done(Buffer());
  auto op = std::make_shared<ReadOp>();
  op->uri = std::move(uri);
  const std::string last = length < 0 ? std::string() : std::to_string(offset + length - 1);
  op->what = "GET " + QuoteForMessage(op->uri) + " bytes " + std::to_string(offset) + "-" + last;
  op->done = [this, done = std::move(done)](Result<Buffer> result) {
    if (!result.ok() && result.status().code() != StatusCode::kCancelled) {
      failed_reads_.fetch_add(1, std::memory_order_relaxed);
    }
    done(std::move(result));
  };
  const std::string range = "Range: bytes=" + std::to_string(offset) + "-" + last;
  auto make = [this, op, range, gate = std::move(gate)]() -> Result<HttpRequest> {
    HR_ASSIGN_OR_RETURN(HttpRequest req, MakeRequest("GET", op->uri, {}, {range}, Buffer()));
    req.max_body_bytes = spec_.max_object_bytes > 0 ? spec_.max_object_bytes : -1;
    req.size_gate = gate;
    req.wanted = StillWanted(gate);
    req.range_body = true;
    return req;
  };
  Execute(std::move(make), op->what, [this, op, offset, length](Result<HttpResponse> result) {
    if (!result.ok()) return op->Fail(result.status());
    HttpResponse& r = *result;
    if (r.status == 416) {
      return op->Fail(Status::InvalidArgument(
          op->what + ": the range starts past the object's end" +
          (r.range_total >= 0 ? " (" + std::to_string(r.range_total) + " bytes)" : "")));
    }
    if (!Is2xx(r)) return op->Fail(ErrorOf(r, op->what, op->uri));
    op->finished = true;
    if (r.status == 206) return op->done(r.body.Slice(0, r.received));
    // 200: a server that ignores Range sent the whole object.
    const auto size = static_cast<int64_t>(r.body.size());
    if (offset > size) {
      return op->done(Status::InvalidArgument(op->what + ": the range starts past the object's " +
                                              std::to_string(size) + " bytes"));
    }
    const int64_t n = length < 0 ? size - offset : std::min(length, size - offset);
    op->done(r.body.Slice(static_cast<size_t>(offset), static_cast<size_t>(n)));
  });
}

// A one-byte ranged GET: its Content-Range carries the object's size (S3 and HTTP servers
// answer HEAD too, but a GET is what every read here is: one path for signing, retries
// and errors).
void ObjectStorage::SizeAsync(std::string uri, SizeCallback done, ReadGate wanted) {
  auto what = std::make_shared<std::string>("GET " + QuoteForMessage(uri) + " bytes 0-0");
  auto make = [this, uri, wanted = std::move(wanted)]() -> Result<HttpRequest> {
    HR_ASSIGN_OR_RETURN(HttpRequest req,
                        MakeRequest("GET", uri, {}, {"Range: bytes=0-0"}, Buffer()));
    req.range_body = true;
    if (wanted) req.wanted = StillWanted(wanted);
    return req;
  };
  Execute(std::move(make), *what,
          [this, uri, what, done = std::move(done)](Result<HttpResponse> result) {
            if (!result.ok()) {
              if (result.status().code() != StatusCode::kCancelled) {
                failed_reads_.fetch_add(1, std::memory_order_relaxed);
              }
              return done(result.status());
            }
            const HttpResponse& r = *result;
            if (r.status == 416 && r.range_total <= 0) return done(int64_t{0});  // empty
            if (!Is2xx(r)) {
              failed_reads_.fetch_add(1, std::memory_order_relaxed);
              return done(ErrorOf(r, *what, uri));
            }
            if (r.status == 206 && r.range_total >= 0) return done(r.range_total);
            if (r.status == 200) return done(static_cast<int64_t>(r.received));
            failed_reads_.fetch_add(1, std::memory_order_relaxed);
            done(Status::IoError(*what + ": the reply gives no object size (" + Describe(r) + ")"));
          });
}

void ObjectStorage::ReadParts(const std::shared_ptr<ReadOp>& op, Buffer buffer, size_t first_len,
                              std::string etag) {
  const size_t total = buffer.size();
  op->buffer = buffer;
  for (size_t start = first_len; start < total; start += part_bytes_) {
    ++op->parts_pending;
  }
  for (size_t start = first_len; start < total; start += part_bytes_) {
    const size_t end = std::min(total, start + part_bytes_);  // exclusive
    std::vector<std::string> headers = {"Range: bytes=" + std::to_string(start) + "-" +
                                        std::to_string(end - 1)};
    if (!etag.empty()) headers.push_back("If-Match: " + etag);
    auto make = [this, op, headers, buffer, start]() -> Result<HttpRequest> {
      HR_ASSIGN_OR_RETURN(HttpRequest req, MakeRequest("GET", op->uri, {}, headers, Buffer()));
      req.sink = buffer.Slice(0, buffer.size());
      req.sink_offset = start;
      return req;
    };
    const std::string what =
        op->what + " bytes " + std::to_string(start) + "-" + std::to_string(end - 1);
    Execute(std::move(make), what, [this, op, start, end, what](Result<HttpResponse> result) {
      if (op->finished) return;
      if (!result.ok()) return op->Fail(result.status());
      const HttpResponse& r = *result;
      if (r.status == 412) {
        return op->Fail(
            Status::IoError(op->what + ": the object changed while its parts were read"));
      }
      if (r.status != 206) {
        return op->Fail(Is2xx(r) ? Status::IoError(what + ": the server ignored the Range header")
                                 : ErrorOf(r, what, op->uri));
      }
      if (r.received != end - start) {
        return op->Fail(Status::IoError(what + ": received " + std::to_string(r.received) +
                                        " bytes, expected " + std::to_string(end - start)));
      }
      if (--op->parts_pending == 0) {
        op->finished = true;
        Buffer out = std::move(op->buffer);
        op->done(std::move(out));
      }
    });
  }
}

Result<std::vector<ObjectInfo>> ObjectStorage::List(const std::string& pattern, int page_size) {
  if (backend_ != Backend::kS3) {
    return Status::InvalidArgument("listing is only supported for s3:// URIs: " +
                                   QuoteForMessage(pattern));
  }
  HR_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(pattern));
  page_size = std::clamp(page_size, 1, 1000);
  const size_t glob_at = loc.key.find_first_of("*?[");
  const bool glob = glob_at != std::string::npos;
  const std::string prefix = loc.key.substr(0, glob ? glob_at : std::string::npos);
  const std::string bucket_uri = "s3://" + loc.bucket;
  std::vector<ObjectInfo> out;
  std::string token;
  for (int page = 0;; ++page) {
    std::vector<std::pair<std::string, std::string>> query = {
        {"list-type", "2"}, {"prefix", prefix}, {"max-keys", std::to_string(page_size)}};
    if (!token.empty()) query.emplace_back("continuation-token", token);
    auto make = [this, bucket_uri, query]() {
      return MakeRequest("GET", bucket_uri, query, {}, Buffer());
    };
    const std::string what = "LIST " + QuoteForMessage(pattern);
    HR_ASSIGN_OR_RETURN(HttpResponse r, ExecuteBlocking(std::move(make), what));
    if (!Is2xx(r)) return ErrorOf(r, what, bucket_uri);
    const std::string_view xml(reinterpret_cast<const char*>(r.body.data()), r.body.size());
    size_t at = 0;
    while (true) {
      size_t block = at;
      std::string contents = XmlValue(xml, "Contents", &block);
      if (block == at) break;
      at = block;
      const std::string key = XmlValue(contents, "Key");
      const std::string size = XmlValue(contents, "Size");
      if (glob && fnmatch(loc.key.c_str(), key.c_str(), FNM_PATHNAME) != 0) continue;
      out.push_back(ObjectInfo{bucket_uri + "/" + key, std::atoll(size.c_str())});
    }
    if (XmlValue(xml, "IsTruncated") != "true") break;
    token = XmlValue(xml, "NextContinuationToken");
    if (token.empty()) {
      return Status::IoError("LIST " + QuoteForMessage(pattern) +
                             ": a truncated page without a continuation token");
    }
  }
  return out;
}

void ObjectStorage::WriteAsync(std::string uri, Buffer bytes, std::function<void(Status)> done) {
  auto make = [this, uri, bytes]() { return MakeRequest("PUT", uri, {}, {}, bytes); };
  Execute(std::move(make), "PUT " + QuoteForMessage(uri),
          [this, uri, done = std::move(done)](Result<HttpResponse> r) {
            if (!r.ok()) return done(r.status());
            if (!Is2xx(*r)) return done(ErrorOf(*r, "PUT " + QuoteForMessage(uri), uri));
            done(Status::Ok());
          });
}

Status ObjectStorage::CreateBucket(const std::string& bucket_uri) {
  if (backend_ != Backend::kS3) {
    return Status::InvalidArgument("not an s3:// URI: " + QuoteForMessage(bucket_uri));
  }
  HR_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(bucket_uri));
  Buffer body;
  if (settings_.region != "us-east-1") {
    const std::string xml =
        "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<LocationConstraint>" +
        settings_.region +
        "</LocationConstraint>"
        "</CreateBucketConfiguration>";
    HR_ASSIGN_OR_RETURN(body, Buffer::CopyOf(xml.data(), xml.size()));
  }
  const std::string uri = "s3://" + loc.bucket;
  auto make = [this, uri, body]() { return MakeRequest("PUT", uri, {}, {}, body); };
  HR_ASSIGN_OR_RETURN(HttpResponse r, ExecuteBlocking(std::move(make), "CREATE BUCKET " + uri));
  if (Is2xx(r) || XmlValue(r.error_body, "Code") == "BucketAlreadyOwnedByYou") return Status::Ok();
  return ErrorOf(r, "CREATE BUCKET " + uri, uri);
}

CurlLoopOptions LoopOptions(const StorageSpec& spec, const EnvLookup& env) {
  CurlLoopOptions o;
  o.ca_bundle = spec.ca_bundle;
  if (o.ca_bundle.empty()) o.ca_bundle = env("AWS_CA_BUNDLE").value_or("");
  o.connect_timeout_ms = spec.connect_timeout_ms;
  o.first_byte_timeout_ms = spec.first_byte_timeout_ms;
  o.low_speed_limit = spec.low_speed_limit;
  o.low_speed_time_s = spec.low_speed_time_s;
  o.max_host_connections = spec.max_connections;
  return o;
}

// Routes each URI to its backend, creating backends on first use.
class RouterStorage final : public Storage {
 public:
  // The storage spec's rules apply to local files too.
  RouterStorage(const StorageSpec& spec, LocalStorageOptions local)
      : spec_(spec), local_options_(std::move(local)) {
    local_options_.max_object_bytes = spec.max_object_bytes;
    local_options_.follow_symlinks = spec.follow_symlinks;
  }

  void ReadAsync(std::string uri, ReadCallback done) override {
    ReadAsyncGated(std::move(uri), std::move(done), nullptr);
  }

  void ReadAsyncGated(std::string uri, ReadCallback done, ReadGate gate) override {
    Result<Storage*> backend = Route(uri);
    if (!backend.ok()) return done(backend.status());
    (*backend)->ReadAsyncGated(std::move(uri), std::move(done), std::move(gate));
  }

  void ReadRangeAsyncGated(std::string uri, int64_t offset, int64_t length, ReadCallback done,
                           ReadGate gate) override {
    Result<Storage*> backend = Route(uri);
    if (!backend.ok()) return done(backend.status());
    (*backend)->ReadRangeAsyncGated(std::move(uri), offset, length, std::move(done),
                                    std::move(gate));
  }

  void SizeAsync(std::string uri, SizeCallback done, ReadGate wanted) override {
    Result<Storage*> backend = Route(uri);
    if (!backend.ok()) return done(backend.status());
    (*backend)->SizeAsync(std::move(uri), std::move(done), std::move(wanted));
  }

  std::string_view name() const override { return "router"; }

  std::vector<StorageStats> Stats() const override {
    std::lock_guard lock(mu_);
    std::vector<StorageStats> out;
    for (const Slot& slot : slots_) {
      if (!slot.storage) continue;
      for (StorageStats& s : slot.storage->Stats()) out.push_back(std::move(s));
    }
    return out;
  }

 private:
  struct Slot {
    bool tried = false;
    Status error;
    std::unique_ptr<Storage> storage;
  };

  // The backend of `uri`'s scheme (made on first use); a file:// URI loses its scheme.
  Result<Storage*> Route(std::string& uri) {
    const UriScheme scheme = SchemeOf(uri);
    if (scheme == UriScheme::kLocal && uri.rfind("file://", 0) == 0) uri.erase(0, 7);
    return Get(scheme);
  }

  Result<Storage*> Get(UriScheme scheme) {
    std::lock_guard lock(mu_);
    Slot& slot = slots_[static_cast<int>(scheme)];
    if (!slot.tried) {
      slot.tried = true;
      switch (scheme) {
        case UriScheme::kLocal: slot.storage = MakeLocalStorage(local_options_); break;
        case UriScheme::kS3: {
          auto s3 = MakeS3Storage(spec_);
          if (s3.ok()) {
            slot.storage = std::move(s3).value();
          } else {
            slot.error = s3.status().WithContext("opening S3 storage");
          }
          break;
        }
        case UriScheme::kHttp: {
          auto http = MakeHttpStorage(spec_);
          if (http.ok()) {
            slot.storage = std::move(http).value();
          } else {
            slot.error = http.status().WithContext("opening HTTP storage");
          }
          break;
        }
      }
    }
    if (!slot.storage) return slot.error;
    return slot.storage.get();
  }

  const StorageSpec spec_;
  LocalStorageOptions local_options_;  // fixed in the constructor
  mutable std::mutex mu_;
  Slot slots_[3];  // guarded by mu_; by UriScheme
};

}  // namespace

Result<std::unique_ptr<ObjectStore>> MakeS3Storage(const StorageSpec& spec, const EnvLookup& env) {
  HR_ASSIGN_OR_RETURN(S3Settings settings, ResolveS3Settings(spec, env));
  HR_ASSIGN_OR_RETURN(std::unique_ptr<CurlLoop> loop, CurlLoop::Start(LoopOptions(spec, env)));
  return std::unique_ptr<ObjectStore>(
      new ObjectStorage(Backend::kS3, std::move(settings), spec, std::move(loop)));
}

Result<std::unique_ptr<ObjectStore>> MakeHttpStorage(const StorageSpec& spec) {
  HR_ASSIGN_OR_RETURN(std::unique_ptr<CurlLoop> loop,
                      CurlLoop::Start(LoopOptions(spec, ProcessEnv())));
  S3Settings none;
  none.anonymous = true;
  return std::unique_ptr<ObjectStore>(
      new ObjectStorage(Backend::kHttp, std::move(none), spec, std::move(loop)));
}

std::shared_ptr<Storage> OpenStorage(const StorageSpec& spec, const LocalStorageOptions& local) {
  return std::make_shared<RouterStorage>(spec, local);
}

}  // namespace headrace
