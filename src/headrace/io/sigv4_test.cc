#include "headrace/io/sigv4.h"

#include <gtest/gtest.h>

namespace headrace {
namespace {

// AWS's documented S3 example (Signature Version 4, header-based auth: "GET Object",
// the first 10 bytes of examplebucket/test.txt).
TEST(SigV4, MatchesAwsS3GetObjectExample) {
  Credentials c;
  c.access_key_id = "AKIAIOSFODNN7EXAMPLE";
  c.secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  SigningRequest r;
  r.method = "GET";
  r.canonical_uri = "/test.txt";
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"Range", "bytes=0-9"},
               {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)},
               {"x-amz-date", "20130524T000000Z"}};
  r.amz_date = "20130524T000000Z";
  r.region = "us-east-1";
  const SigningResult s = SignV4(c, r);
  EXPECT_EQ(Sha256Hex(s.canonical_request),
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
            "aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

// AWS's SigV4 test suite, "get-vanilla-query-order-key-case": query parameters are
// sorted by name.
TEST(SigV4, MatchesAwsTestSuiteQueryOrder) {
  Credentials c;
  c.access_key_id = "AKIDEXAMPLE";
  c.secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
  SigningRequest r;
  r.method = "GET";
  r.canonical_uri = "/";
  r.query = {{"Param2", "value2"}, {"Param1", "value1"}};
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}};
  r.amz_date = "20150830T123600Z";
  r.region = "us-east-1";
  r.service = "service";
  const SigningResult s = SignV4(c, r);
  EXPECT_EQ(s.signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST(SigV4, CanonicalQueryEncodesAndSorts) {
  EXPECT_EQ(CanonicalQuery({{"prefix", "a b/c"}, {"list-type", "2"}}),
            "list-type=2&prefix=a%20b%2Fc");
}

TEST(SigV4, Sha256OfEmptyIsTheDocumentedConstant) { EXPECT_EQ(Sha256Hex(""), kEmptyPayloadSha256); }

TEST(SigV4, AmzDateIsUtcBasicFormat) {
  EXPECT_EQ(AmzDate(std::chrono::system_clock::time_point(std::chrono::seconds(1369353600))),
            "20130524T000000Z");
}

TEST(SigV4, AuthorizationNeverContainsTheSecret) {
  Credentials c{"AKIDEXAMPLE", "supersecretvalue123", "", ""};
  SigningRequest r;
  r.method = "GET";
  r.canonical_uri = "/";
  r.headers = {{"host", "h"}};
  r.amz_date = "20150830T123600Z";
  r.region = "us-east-1";
  const SigningResult s = SignV4(c, r);
  EXPECT_EQ(s.authorization.find("supersecret"), std::string::npos);
  EXPECT_EQ(s.canonical_request.find("supersecret"), std::string::npos);
}

}  // namespace
}  // namespace headrace
