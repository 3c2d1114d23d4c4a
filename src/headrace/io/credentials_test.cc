#include "headrace/io/credentials.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

namespace headrace {
namespace {

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

std::string TempFile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("HEADRACE_TEST_TMP");
  std::string base = dir ? dir : "/tmp";
  std::string cmd = "mkdir -p " + base;
  [[maybe_unused]] int rc = std::system(cmd.c_str());
  const std::string path = base + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Ini, ParsesSectionsKeysAndComments) {
  auto ini = ParseIni("# c\n[default]\naws_access_key_id = AK\r\n; x\n[dev]\nk=v=w\n\n", "f");
  ASSERT_TRUE(ini.ok()) << ini.status().ToString();
  EXPECT_EQ((*ini)["default"]["aws_access_key_id"], "AK");
  EXPECT_EQ((*ini)["dev"]["k"], "v=w");
}

TEST(Ini, MalformedLineNamesTheLineNotItsText) {
  auto ini = ParseIni("[default]\nthis-is-my-secret-value\n", "creds");
  ASSERT_FALSE(ini.ok());
  EXPECT_NE(ini.status().message().find("creds: line 2"), std::string::npos);
  EXPECT_EQ(ini.status().message().find("secret-value"), std::string::npos);
  EXPECT_FALSE(ParseIni("k = v\n", "f").ok());
  EXPECT_FALSE(ParseIni("[open\n", "f").ok());
}

TEST(Credentials, EnvironmentWins) {
  StorageSpec spec;
  auto s = ResolveS3Settings(spec, FakeEnv({{"AWS_ACCESS_KEY_ID", "AKIAENV"},
                                            {"AWS_SECRET_ACCESS_KEY", "envsecret"},
                                            {"AWS_SESSION_TOKEN", "tok"},
                                            {"AWS_REGION", "eu-west-1"},
                                            {"HOME", "/nonexistent"}}));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->credentials.access_key_id, "AKIAENV");
  EXPECT_EQ(s->credentials.session_token, "tok");
  EXPECT_EQ(s->region, "eu-west-1");
  EXPECT_FALSE(s->custom_endpoint);
  EXPECT_EQ(s->endpoint.host, "s3.eu-west-1.amazonaws.com");
  EXPECT_EQ(s->credentials.RedactedKeyId(), "AKIA…");
}

TEST(Credentials, SharedFileProfileAndEndpointFromEnvironment) {
  const std::string file = TempFile("creds_test_credentials",
                                    "[default]\naws_access_key_id = AKIADEF\n"
                                    "aws_secret_access_key = defsecret\n"
                                    "[dev]\naws_access_key_id = AKIADEV\n"
                                    "aws_secret_access_key = devsecret\n");
  const std::string config = TempFile("creds_test_config", "[profile dev]\nregion = ap-south-1\n");
  StorageSpec spec;
  auto s = ResolveS3Settings(spec, FakeEnv({{"AWS_SHARED_CREDENTIALS_FILE", file},
                                            {"AWS_CONFIG_FILE", config},
                                            {"AWS_PROFILE", "dev"},
                                            {"AWS_ENDPOINT_URL", "http://127.0.0.1:1"},
                                            {"AWS_ENDPOINT_URL_S3", "http://127.0.0.1:2"}}));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->credentials.access_key_id, "AKIADEV");
  EXPECT_EQ(s->credentials.secret_access_key, "devsecret");
  EXPECT_EQ(s->region, "ap-south-1");
  EXPECT_TRUE(s->custom_endpoint);
  EXPECT_EQ(s->endpoint.port, 2);
  EXPECT_NE(s->credentials.source.find("profile 'dev'"), std::string::npos);

  spec.profile = "default";
  spec.region = "us-west-2";
  spec.endpoint = "http://127.0.0.1:3";
  auto d = ResolveS3Settings(
      spec, FakeEnv({{"AWS_SHARED_CREDENTIALS_FILE", file}, {"AWS_CONFIG_FILE", config}}));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->credentials.access_key_id, "AKIADEF");
  EXPECT_EQ(d->region, "us-west-2");
  EXPECT_EQ(d->endpoint.port, 3);

  spec.profile = "missing";
  auto m = ResolveS3Settings(spec, FakeEnv({{"AWS_SHARED_CREDENTIALS_FILE", file}}));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("profile 'missing' not found"), std::string::npos);
}

TEST(Credentials, NoneFoundSaysWhereItLookedAndOffersAnonymous) {
  StorageSpec spec;
  auto s = ResolveS3Settings(spec, FakeEnv({{"HOME", "/nonexistent"}}));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
  EXPECT_NE(s.status().message().find("storage.anonymous"), std::string::npos);
  spec.anonymous = true;
  auto anon = ResolveS3Settings(spec, FakeEnv({{"HOME", "/nonexistent"}}));
  ASSERT_TRUE(anon.ok());
  EXPECT_TRUE(anon->credentials.empty());
}

TEST(Credentials, RedactRemovesSecretAndToken) {
  Credentials c{"AKIAX", "s3cr3tvalue", "tokenvalue", ""};
  EXPECT_EQ(Redact("a s3cr3tvalue b tokenvalue", c), "a <redacted> b <redacted>");
}

}  // namespace
}  // namespace headrace
