#include "headrace/io/credentials.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "headrace/core/strings.h"

namespace headrace {
namespace {

// Reads a whole small file; nullopt when it does not exist or cannot be read.
std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string HomeFile(const EnvLookup& env, const char* override_var, const char* leaf) {
  if (auto v = env(override_var)) return *v;
  const auto home = env("HOME");
  return (home ? *home : std::string()) + "/.aws/" + leaf;
}

}  // namespace

std::string Credentials::RedactedKeyId() const { return access_key_id.substr(0, 4) + "…"; }

Result<IniFile> ParseIni(std::string_view text, std::string_view file_name) {
  IniFile out;
  std::string section;
  bool in_section = false;
  int64_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t nl = text.find('\n');
    std::string_view line = TrimWhitespace(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    const auto bad = [&](std::string_view why) {
      return Status::InvalidArgument(std::string(file_name) + ": line " +
                                     std::to_string(line_number) + ": " + std::string(why));
    };
    if (line.front() == '[') {
      if (line.back() != ']') return bad("a section header must end with ']'");
      section = std::string(TrimWhitespace(line.substr(1, line.size() - 2)));
      if (section.empty()) return bad("empty section name");
      out[section];
      in_section = true;
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) return bad("expected 'key = value'");
    if (!in_section) return bad("a key before any [section]");
    const std::string key(TrimWhitespace(line.substr(0, eq)));
    if (key.empty()) return bad("empty key");
    out[section][key] = std::string(TrimWhitespace(line.substr(eq + 1)));
  }
  return out;
}

EnvLookup ProcessEnv() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
}

Result<S3Settings> ResolveS3Settings(const StorageSpec& spec, const EnvLookup& env) {
  S3Settings out;
  out.anonymous = spec.anonymous;

  std::string profile = spec.profile;
  bool profile_named = !profile.empty();
  if (profile.empty()) {
    if (auto p = env("AWS_PROFILE")) {
      profile = *p;
      profile_named = true;
    } else {
      profile = "default";
    }
  }

  // The config file: only `region` is read from it.
  const std::string config_path = HomeFile(env, "AWS_CONFIG_FILE", "config");
  std::string config_region;
  if (auto text = ReadSmallFile(config_path)) {
    HR_ASSIGN_OR_RETURN(IniFile ini, ParseIni(*text, config_path));
    const std::string section = profile == "default" ? "default" : "profile " + profile;
    if (auto it = ini.find(section); it != ini.end()) {
      if (auto r = it->second.find("region"); r != it->second.end()) config_region = r->second;
    }
  }

  if (!spec.region.empty()) {
    out.region = spec.region;
  } else if (auto r = env("AWS_REGION")) {
    out.region = *r;
  } else if (auto r2 = env("AWS_DEFAULT_REGION")) {
    out.region = *r2;
  } else if (!config_region.empty()) {
    out.region = config_region;
  } else {
    out.region = "us-east-1";
  }

  std::string endpoint_url = spec.endpoint;
  if (endpoint_url.empty()) {
    if (auto e = env("AWS_ENDPOINT_URL_S3")) {
      endpoint_url = *e;
    } else if (auto e2 = env("AWS_ENDPOINT_URL")) {
      endpoint_url = *e2;
    }
  }
  out.custom_endpoint = !endpoint_url.empty();
  if (endpoint_url.empty()) endpoint_url = "https://s3." + out.region + ".amazonaws.com";
  HR_ASSIGN_OR_RETURN(out.endpoint, ParseEndpoint(endpoint_url));

  if (spec.anonymous) return out;

  auto key = env("AWS_ACCESS_KEY_ID");
  auto secret = env("AWS_SECRET_ACCESS_KEY");
  if (key && secret) {
    out.credentials.access_key_id = *key;
    out.credentials.secret_access_key = *secret;
    if (auto token = env("AWS_SESSION_TOKEN")) out.credentials.session_token = *token;
    out.credentials.source = "environment (AWS_ACCESS_KEY_ID)";
    return out;
  }

  const std::string credentials_path = HomeFile(env, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
  std::optional<std::string> text = ReadSmallFile(credentials_path);
  if (text) {
    HR_ASSIGN_OR_RETURN(IniFile ini, ParseIni(*text, credentials_path));
    auto it = ini.find(profile);
    if (it == ini.end() && profile_named) {
      return Status::InvalidArgument("AWS profile '" + profile + "' not found in " +
                                     credentials_path);
    }
    if (it != ini.end()) {
      const auto& s = it->second;
      const auto get = [&](const char* k) {
        auto f = s.find(k);
        return f == s.end() ? std::string() : f->second;
      };
      out.credentials.access_key_id = get("aws_access_key_id");
      out.credentials.secret_access_key = get("aws_secret_access_key");
      out.credentials.session_token = get("aws_session_token");
      out.credentials.source = "profile '" + profile + "' of " + credentials_path;
      if (out.credentials.access_key_id.empty() || out.credentials.secret_access_key.empty()) {
        return Status::InvalidArgument(out.credentials.source +
                                       " lacks aws_access_key_id or aws_secret_access_key");
      }
      return out;
    }
  } else if (profile_named) {
    return Status::InvalidArgument("AWS profile '" + profile + "' requested but " +
                                   credentials_path + " cannot be read");
  }
  return Status::InvalidArgument(
      "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or add "
      "profile '" +
      profile + "' to " + credentials_path +
      " (AWS_SHARED_CREDENTIALS_FILE, AWS_PROFILE), or set storage.anonymous: true for a "
      "public bucket");
}

std::string Redact(std::string text, const Credentials& credentials) {
  for (const std::string* secret : {&credentials.secret_access_key, &credentials.session_token}) {
    if (secret->size() < 4) continue;  // too short to be a real secret; avoid mangling
    for (size_t at = text.find(*secret); at != std::string::npos; at = text.find(*secret, at)) {
      text.replace(at, secret->size(), "<redacted>");
    }
  }
  return text;
}

}  // namespace headrace
