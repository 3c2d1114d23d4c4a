// URIs of object storage: which backend a path belongs to, S3 bucket/key parsing,
// endpoint URLs, and the percent-encoding SigV4 and request URLs share.
#pragma once

#include <string>
#include <string_view>

#include "headrace/core/status.h"

namespace headrace {

// Which backend serves a path. Anything without a known "scheme://" is a local path.
enum class UriScheme {
  kLocal,  // "/data/x.jpg", "data/x.jpg", "file:///data/x.jpg"
  kS3,     // "s3://bucket/key"
  kHttp,   // "http://host/path", "https://host/path"
};
UriScheme SchemeOf(std::string_view uri);

struct S3Location {
  std::string bucket;
  std::string key;  // may be empty: the bucket itself, or a prefix
};

// Parses "s3://bucket/key". The bucket must follow S3's naming rules (3-63 characters
// of a-z, 0-9, '.', '-', starting and ending with a letter or digit); the key is kept
// byte for byte (percent signs are part of the key, never decoded).
Result<S3Location> ParseS3Uri(std::string_view uri);

// An endpoint URL: "http://127.0.0.1:9000", "https://s3.eu-west-1.amazonaws.com/base".
struct Endpoint {
  std::string scheme;     // "http" or "https"
  std::string host;       // without port; IPv6 literals keep their brackets
  int port = 0;           // 0: the scheme's default
  std::string base_path;  // "" or "/base" (no trailing slash)

  // "host" or "host:port" as sent in the Host header (default ports omitted).
  std::string HostHeader(std::string_view host_override = {}) const;
  // "scheme://host[:port]"
  std::string Origin(std::string_view host_override = {}) const;
};
Result<Endpoint> ParseEndpoint(std::string_view url);

// RFC 3986 percent-encoding as SigV4 wants it: unreserved characters
// (A-Z a-z 0-9 - _ . ~) stay, every other byte becomes %XX (upper-case hex); '/' stays
// when `keep_slash` (object keys in paths).
std::string UriEncode(std::string_view s, bool keep_slash);
// Reverses UriEncode (and any %XX); '+' is kept. Invalid escapes are kept as they are.
std::string UriDecode(std::string_view s);

// Whether a bucket can be a DNS label of a virtual-hosted URL over TLS (no dots).
bool IsVirtualHostableBucket(std::string_view bucket);

}  // namespace headrace
