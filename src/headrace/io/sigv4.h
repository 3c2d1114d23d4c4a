// AWS Signature Version 4 (header-based), with OpenSSL's libcrypto for SHA-256 and HMAC.
//
//   canonical request = METHOD \n URI \n QUERY \n HEADERS \n SIGNED_HEADERS \n PAYLOAD_HASH
//   string to sign    = "AWS4-HMAC-SHA256" \n DATE \n SCOPE \n hex(sha256(canonical request))
//   signing key       = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, yyyymmdd), region), service),
//                            "aws4_request")
//   signature         = hex(HMAC(signing key, string to sign))
//
// S3 flavour: the canonical URI is the path as sent (already URI-encoded once, see
// UriEncode), not encoded again and not normalized.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/io/credentials.h"

namespace headrace {

inline constexpr std::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct SigningRequest {
  std::string_view method;         // "GET"
  std::string_view canonical_uri;  // "/bucket/key%20x", as sent
  // Query parameters, not encoded ("list-type", "2"); sorted and encoded when signing.
  std::vector<std::pair<std::string, std::string>> query;
  // Headers to sign, any case ("Host", "x-amz-date", ...); each is signed.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string_view payload_sha256 = kEmptyPayloadSha256;  // hex
  std::string_view amz_date;                              // "20130524T000000Z"
  std::string_view region;                                // "us-east-1"
  std::string_view service = "s3";
};

struct SigningResult {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // hex
  std::string authorization;  // the Authorization header's value
};

SigningResult SignV4(const Credentials& credentials, const SigningRequest& request);

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);
// "20130524T000000Z" (UTC) of `t`.
std::string AmzDate(std::chrono::system_clock::time_point t);
// The sorted, encoded canonical query string ("a=1&b=%20").
std::string CanonicalQuery(std::vector<std::pair<std::string, std::string>> query);

}  // namespace headrace
