#include "headrace/io/uri.h"

#include <charconv>

namespace headrace {
namespace {

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

UriScheme SchemeOf(std::string_view uri) {
  if (StartsWith(uri, "s3://")) return UriScheme::kS3;
  if (StartsWith(uri, "http://") || StartsWith(uri, "https://")) return UriScheme::kHttp;
  return UriScheme::kLocal;
}

Result<S3Location> ParseS3Uri(std::string_view uri) {
  if (!StartsWith(uri, "s3://")) {
    return Status::InvalidArgument("not an S3 URI (expected s3://bucket/key): '" +
                                   std::string(uri) + "'");
  }
  std::string_view rest = uri.substr(5);
  const size_t slash = rest.find('/');
  S3Location loc;
  loc.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) loc.key = std::string(rest.substr(slash + 1));
  const std::string& b = loc.bucket;
  bool valid = b.size() >= 3 && b.size() <= 63 && IsLowerAlnum(b.front()) && IsLowerAlnum(b.back());
  for (char c : b) valid = valid && (IsLowerAlnum(c) || c == '.' || c == '-');
  if (!valid) {
    return Status::InvalidArgument(
        "invalid S3 bucket name '" + b + "' in '" + std::string(uri) +
        "' (3-63 characters: a-z, 0-9, '.', '-', starting and ending with a letter or digit)");
  }
  return loc;
}

std::string Endpoint::HostHeader(std::string_view host_override) const {
  std::string out(host_override.empty() ? std::string_view(host) : host_override);
  const bool default_port =
      port == 0 || (scheme == "http" && port == 80) || (scheme == "https" && port == 443);
  if (!default_port) out += ":" + std::to_string(port);
  return out;
}

std::string Endpoint::Origin(std::string_view host_override) const {
  return scheme + "://" + HostHeader(host_override);
}

Result<Endpoint> ParseEndpoint(std::string_view url) {
  const auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("invalid endpoint URL '" + std::string(url) +
                                   "': " + std::string(why) + " (expected http[s]://host[:port])");
  };
  Endpoint ep;
  std::string_view rest;
  if (StartsWith(url, "http://")) {
    ep.scheme = "http";
    rest = url.substr(7);
  } else if (StartsWith(url, "https://")) {
    ep.scheme = "https";
    rest = url.substr(8);
  } else {
    return bad("the scheme must be http or https");
  }
  const size_t path_at = rest.find('/');
  std::string_view authority = rest.substr(0, path_at);
  if (path_at != std::string_view::npos) {
    std::string_view path = rest.substr(path_at);
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    ep.base_path = std::string(path);
  }
  if (authority.find('@') != std::string_view::npos) return bad("user info is not allowed");
  size_t colon = std::string_view::npos;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated IPv6 literal");
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return bad("junk after the IPv6 literal");
      colon = close + 1;
    }
  } else {
    colon = authority.rfind(':');
  }
  ep.host = std::string(authority.substr(0, colon));
  if (ep.host.empty()) return bad("no host");
  if (colon != std::string_view::npos) {
    const std::string_view port = authority.substr(colon + 1);
    int value = 0;
    const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || ptr != port.data() + port.size() || value < 1 || value > 65535) {
      return bad("the port must be 1-65535");
    }
    ep.port = value;
  }
  return ep;
}

std::string UriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string UriDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = HexValue(s[i + 1]);
      const int lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

bool IsVirtualHostableBucket(std::string_view bucket) {
  return bucket.find('.') == std::string_view::npos;
}

}  // namespace headrace
