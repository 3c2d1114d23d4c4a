#include "headrace/io/uri.h"

#include <gtest/gtest.h>

namespace headrace {
namespace {

TEST(Uri, SchemeOfRoutesByPrefix) {
  EXPECT_EQ(SchemeOf("s3://b/k"), UriScheme::kS3);
  EXPECT_EQ(SchemeOf("http://h/p"), UriScheme::kHttp);
  EXPECT_EQ(SchemeOf("https://h/p"), UriScheme::kHttp);
  EXPECT_EQ(SchemeOf("/data/x.jpg"), UriScheme::kLocal);
  EXPECT_EQ(SchemeOf("data/s3://x"), UriScheme::kLocal);
}

TEST(Uri, ParsesBucketAndKey) {
  auto loc = ParseS3Uri("s3://my-bucket/images/a b.jpg");
  ASSERT_TRUE(loc.ok()) << loc.status().ToString();
  EXPECT_EQ(loc->bucket, "my-bucket");
  EXPECT_EQ(loc->key, "images/a b.jpg");
  auto root = ParseS3Uri("s3://my-bucket");
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->key, "");
}

TEST(Uri, KeepsPercentSignsInKeys) {
  auto loc = ParseS3Uri("s3://bkt/%2e%2e/x");
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->key, "%2e%2e/x");
  EXPECT_EQ(UriEncode(loc->key, true), "%252e%252e/x");
}

TEST(Uri, RejectsBadBucketNames) {
  for (const char* uri : {"s3://", "s3:///key", "s3://ab/k", "s3://Upper/k", "s3://-x-/k",
                          "s3://under_score/k", "http://b/k"}) {
    auto loc = ParseS3Uri(uri);
    EXPECT_FALSE(loc.ok()) << uri;
    if (!loc.ok()) {
      EXPECT_EQ(loc.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(Uri, ParsesEndpoints) {
  auto ep = ParseEndpoint("http://127.0.0.1:9000");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->scheme, "http");
  EXPECT_EQ(ep->host, "127.0.0.1");
  EXPECT_EQ(ep->port, 9000);
  EXPECT_EQ(ep->HostHeader(), "127.0.0.1:9000");
  EXPECT_EQ(ep->Origin("b.localhost"), "http://b.localhost:9000");
  auto aws = ParseEndpoint("https://s3.eu-west-1.amazonaws.com/");
  ASSERT_TRUE(aws.ok());
  EXPECT_EQ(aws->HostHeader(), "s3.eu-west-1.amazonaws.com");
  EXPECT_EQ(aws->base_path, "");
  auto based = ParseEndpoint("https://h:443/base/");
  ASSERT_TRUE(based.ok());
  EXPECT_EQ(based->HostHeader(), "h");
  EXPECT_EQ(based->base_path, "/base");
  auto v6 = ParseEndpoint("http://[::1]:8080");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "[::1]");
  EXPECT_EQ(v6->port, 8080);
}

TEST(Uri, RejectsBadEndpoints) {
  for (const char* url : {"ftp://h", "127.0.0.1:9000", "http://", "http://h:0", "http://h:99999",
                          "http://h:x", "http://user:pw@h"}) {
    EXPECT_FALSE(ParseEndpoint(url).ok()) << url;
  }
}

TEST(Uri, EncodesLikeSigV4) {
  EXPECT_EQ(UriEncode("a b+c/d~e_f.g-h", false), "a%20b%2Bc%2Fd~e_f.g-h");
  EXPECT_EQ(UriEncode("a b/c", true), "a%20b/c");
  EXPECT_EQ(UriEncode("\xc3\xa9", true), "%C3%A9");
  EXPECT_EQ(UriDecode("a%20b%2Fc%zz%4"), "a b/c%zz%4");
}

TEST(Uri, VirtualHostingNeedsADotlessBucket) {
  EXPECT_TRUE(IsVirtualHostableBucket("my-bucket"));
  EXPECT_FALSE(IsVirtualHostableBucket("my.bucket"));
}

}  // namespace
}  // namespace headrace
