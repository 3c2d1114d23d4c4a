#include "commands.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

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

}  // namespace headrace::tools
