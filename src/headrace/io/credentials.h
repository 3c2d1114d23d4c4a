// Credentials and endpoint resolution for S3, from the places a user already has them.
//
// Order (the first that is set wins), as the AWS CLI and SDKs do:
// - credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); then the
//   profile's section of the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default
//   ~/.aws/credentials). The profile is StorageSpec::profile, then AWS_PROFILE, then
//   "default". StorageSpec::anonymous skips all of this (unsigned requests).
// - region: StorageSpec::region, AWS_REGION, AWS_DEFAULT_REGION, the profile's `region` in
//   the config file (AWS_CONFIG_FILE, default ~/.aws/config), then us-east-1.
// - endpoint: StorageSpec::endpoint, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, then AWS's
//   regional endpoint.
//
// Secrets (the secret key, the session token) are held here and in the signer only: no
// message, log line or report prints them. Messages name where credentials came from and
// at most the first characters of the access key id.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/io/storage_spec.h"
#include "headrace/io/uri.h"

namespace headrace {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty unless temporary credentials
  // Where they came from, for messages: "environment (AWS_ACCESS_KEY_ID)",
  // "profile 'dev' of /root/.aws/credentials". Never holds a secret.
  std::string source;

  bool empty() const { return access_key_id.empty(); }
  // "AKIA…" (the first 4 characters), for messages.
  std::string RedactedKeyId() const;
};

// An INI file as the AWS CLI writes it: "[section]" headers, "key = value" lines,
// '#' and ';' comments. Section and key names are trimmed; keys are case-sensitive.
// Malformed lines are kInvalidArgument naming the file and line number, never the
// line's text (it may hold a secret).
using IniFile = std::map<std::string, std::map<std::string, std::string>>;
Result<IniFile> ParseIni(std::string_view text, std::string_view file_name);

// Looks up an environment variable; nullopt when unset or empty.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
EnvLookup ProcessEnv();

struct S3Settings {
  Endpoint endpoint;
  bool custom_endpoint = false;  // from the spec or the environment, not AWS's default
  std::string region;
  Credentials credentials;  // empty when anonymous
  bool anonymous = false;
};

// Resolves endpoint, region and credentials. Fails (kInvalidArgument) when no credentials
// are found and the spec is not anonymous, naming every place that was looked at and the
// `storage.anonymous: true` alternative; or when a named profile does not exist.
Result<S3Settings> ResolveS3Settings(const StorageSpec& spec, const EnvLookup& env = ProcessEnv());

// Replaces every occurrence of the credentials' secret key and session token in `text`
// with "<redacted>" (defence in depth for messages that quote a server's reply).
std::string Redact(std::string text, const Credentials& credentials);

}  // namespace headrace
