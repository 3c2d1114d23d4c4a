#include "commands.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace headrace::tools {

bool ArgReader::Value(const std::string& name, std::string* out) {
  if (i + 1 >= args.size()) {
    std::fprintf(stderr, "headrace: %s needs a value\n", name.c_str());
    return false;
  }
  *out = args[i + 1];
  i += 2;
  return true;
}

bool WriteTextFile(const std::string& path, const std::string& text) {
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) {
    std::fprintf(stderr, "headrace: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

bool ReadSmallFile(const char* command, const char* what, const std::string& path,
                   std::string* out) {
  constexpr std::streamoff kMaxFileBytes = 16 << 20;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "%s: %s %s: cannot read\n", command, what, path.c_str());
    return false;
  }
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || size > kMaxFileBytes) {
    std::fprintf(stderr, "%s: %s %s: not a regular file of at most 16 MiB\n", command, what,
                 path.c_str());
    return false;
  }
  in.seekg(0);
  std::ostringstream text;
  text << in.rdbuf();
  *out = text.str();
  return true;
}

bool CheckWritable(const char* command, const char* flag, const std::string& path) {
  const auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "%s: %s %s: cannot write: %s\n", command, flag, path.c_str(),
                 why.c_str());
    return false;
  };
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::filesystem::create_directories(parent, ec);
    if (ec) return fail(ec.message());
  }
  const bool existed = std::filesystem::exists(path, ec);
  // O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of waiting for one.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) return fail(std::strerror(errno));
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
  return true;
}

}  // namespace headrace::tools
