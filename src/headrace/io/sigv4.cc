#include "headrace/io/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <ctime>

#include "headrace/io/uri.h"

namespace headrace {
namespace {

using Digest = std::array<unsigned char, SHA256_DIGEST_LENGTH>;

std::string Hex(const unsigned char* data, size_t size) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(size * 2, '0');
  for (size_t i = 0; i < size; ++i) {
    out[2 * i] = kHex[data[i] >> 4];
    out[2 * i + 1] = kHex[data[i] & 15];
  }
  return out;
}

Digest Hmac(std::string_view key, std::string_view data) {
  Digest out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len);
  return out;
}

std::string_view AsView(const Digest& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Trims and collapses runs of spaces inside a header value.
std::string CanonicalValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  Digest d{};
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), d.data());
  return Hex(d.data(), d.size());
}

std::string AmzDate(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string CanonicalQuery(std::vector<std::pair<std::string, std::string>> query) {
  for (auto& [k, v] : query) {
    k = UriEncode(k, false);
    v = UriEncode(v, false);
  }
  std::sort(query.begin(), query.end());
  std::string out;
  for (const auto& [k, v] : query) {
    if (!out.empty()) out += '&';
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

SigningResult SignV4(const Credentials& credentials, const SigningRequest& request) {
  std::vector<std::pair<std::string, std::string>> headers;
  headers.reserve(request.headers.size());
  for (const auto& [name, value] : request.headers) {
    headers.emplace_back(Lower(name), CanonicalValue(value));
  }
  std::sort(headers.begin(), headers.end());

  std::string canonical_headers;
  std::string signed_headers;
  for (const auto& [name, value] : headers) {
    canonical_headers += name + ":" + value + "\n";
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += name;
  }

  SigningResult out;
  out.canonical_request = std::string(request.method) + "\n" + std::string(request.canonical_uri) +
                          "\n" + CanonicalQuery(request.query) + "\n" + canonical_headers + "\n" +
                          signed_headers + "\n" + std::string(request.payload_sha256);

  const std::string_view date = request.amz_date.substr(0, 8);
  const std::string scope = std::string(date) + "/" + std::string(request.region) + "/" +
                            std::string(request.service) + "/aws4_request";
  out.string_to_sign = "AWS4-HMAC-SHA256\n" + std::string(request.amz_date) + "\n" + scope + "\n" +
                       Sha256Hex(out.canonical_request);

  const Digest k_date = Hmac("AWS4" + credentials.secret_access_key, date);
  const Digest k_region = Hmac(AsView(k_date), request.region);
  const Digest k_service = Hmac(AsView(k_region), request.service);
  const Digest k_signing = Hmac(AsView(k_service), "aws4_request");
  const Digest sig = Hmac(AsView(k_signing), out.string_to_sign);
  out.signature = Hex(sig.data(), sig.size());
  out.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
                      ",SignedHeaders=" + signed_headers + ",Signature=" + out.signature;
  return out;
}

}  // namespace headrace
