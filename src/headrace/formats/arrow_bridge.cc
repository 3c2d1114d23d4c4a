#include "headrace/formats/arrow_bridge.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string_view>
#include <vector>

namespace headrace {
namespace {

namespace fs = std::filesystem;

// A source build's defaults (CMakeLists.txt defines them for the build tree only; a
// wheel's binaries find both beside themselves).
#ifndef HEADRACE_BUILD_PYARROW_DIR
#define HEADRACE_BUILD_PYARROW_DIR ""
#endif
#ifndef HEADRACE_BUILD_ARROW_BRIDGE_DIR
#define HEADRACE_BUILD_ARROW_BRIDGE_DIR ""
#endif

constexpr std::string_view kBridgePrefix = "headrace_arrow_";
constexpr std::string_view kBridgeSuffix = ".so";
// arrow::Status::ToString() const, which every libarrow since 1.0 exports: finds an Arrow
// in the global scope.
constexpr const char* kArrowProbe = "_ZNK5arrow6Status8ToStringB5cxx11Ev";

// The folder of the binary this code is linked into: the extension module, the CLI, a
// test. dladdr, because the extension is not the process's executable; for the
// executable itself, /proc/self/exe: the loader names it by argv[0], which the `headrace`
// console script sets to its own path (python/headrace/_cli.py), not the program's.
std::optional<fs::path> OwnFolder() {
  Dl_info info{};
  link_map* map = nullptr;
  if (dladdr1(reinterpret_cast<const void*>(&OwnFolder), &info, reinterpret_cast<void**>(&map),
              RTLD_DL_LINKMAP) == 0) {
    return std::nullopt;
  }
  const bool executable = map == nullptr || map->l_name == nullptr || map->l_name[0] == '\0';
  std::error_code ec;
  const fs::path self = fs::canonical(executable ? "/proc/self/exe" : map->l_name, ec);
  if (ec) return std::nullopt;
  return self.parent_path();
}

std::vector<fs::path> Candidates(const char* env, std::initializer_list<const char*> relative,
                                 const char* build_default) {
  std::vector<fs::path> out;
  if (const char* dir = std::getenv(env); dir != nullptr && *dir != '\0') {
    out.emplace_back(dir);
    return out;  // set: the only place looked at, so a wrong value is an error, not a fallback
  }
  if (std::optional<fs::path> own = OwnFolder()) {
    for (const char* r : relative) out.push_back(*own / r);
  }
  if (*build_default != '\0') out.emplace_back(build_default);
  return out;
}

// NNNN of the `prefix` + NNNN files in `dir` (libarrow.so.2600, headrace_arrow_2600.so).
std::vector<int> SoVersions(const fs::path& dir, std::string_view prefix, std::string_view suffix) {
  std::vector<int> out;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix) || !name.ends_with(suffix)) continue;
    const std::string digits =
        name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.empty() || digits.size() > 6 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    out.push_back(std::stoi(digits));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string PyarrowVersion(int so_version) {
  return std::to_string(so_version / 100) + "." + std::to_string(so_version % 100);
}

// The first bridge folder that holds any bridge, and its versions.
std::pair<fs::path, std::vector<int>> Bridges(const std::vector<fs::path>& folders) {
  for (const fs::path& dir : folders) {
    std::vector<int> versions = SoVersions(dir, kBridgePrefix, kBridgeSuffix);
    if (!versions.empty()) return {dir, std::move(versions)};
  }
  return {};
}

std::string Describe(const std::vector<int>& versions) {
  if (versions.empty()) return "none";
  std::string out;
  for (int v : versions) {
    if (!out.empty()) out += ", ";
    out += PyarrowVersion(v);
  }
  return out;
}

// "pip install 'pyarrow>=15'": the oldest pyarrow with a bridge.
std::string InstallHint(const std::vector<int>& versions) {
  if (versions.empty()) return "this build has no bridge (see formats/arrow_bridge/README.md)";
  return "pip install 'pyarrow>=" + std::to_string(versions.front() / 100) + "'";
}

Status Unusable(std::string why) {
  return Status::UnsupportedFormat("Parquet needs pyarrow's Arrow C++ library: " + std::move(why));
}

Result<void*> Open(const fs::path& file) {
  // RTLD_LOCAL: libparquet's OpenSSL and simdjson stay out of the process's global scope
  // (arrow_bridge.h). RTLD_NODELETE: Arrow keeps static state; nothing here is unloaded.
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* error = dlerror();
    return Unusable("cannot load " + file.string() + ": " + (error != nullptr ? error : "?"));
  }
  return handle;
}

}  // namespace

ArrowBridgeSearch DefaultArrowBridgeSearch() {
  return {Candidates("HEADRACE_PYARROW_DIR", {"../pyarrow", "../../pyarrow"},
                     HEADRACE_BUILD_PYARROW_DIR),
          Candidates("HEADRACE_ARROW_BRIDGE_DIR", {"arrow", "../arrow"},
                     HEADRACE_BUILD_ARROW_BRIDGE_DIR)};
}

Result<const HrArrowBridge*> LoadArrowBridgeFrom(const ArrowBridgeSearch& search) {
  const auto [bridge_dir, bridges] = Bridges(search.bridge_folders);
  std::string looked;
  for (const fs::path& dir : search.pyarrow_folders) {
    const std::vector<int> arrows = SoVersions(dir, "libarrow.so.", "");
    if (arrows.empty()) {
      looked += (looked.empty() ? "" : ", ") + dir.string();
      continue;
    }
    // A pyarrow ships one libarrow.so.NNNN; take the newest if a folder holds several.
    const int so_version = arrows.back();
    if (bridges.empty()) {
      return Unusable("this build has no Arrow bridge (looked in the folders of "
                      "HEADRACE_ARROW_BRIDGE_DIR, the package's arrow/, the build's arrow/; "
                      "see formats/arrow_bridge/README.md)");
    }
    if (!std::binary_search(bridges.begin(), bridges.end(), so_version)) {
      return Unusable("the pyarrow in " + dir.string() + " is " + PyarrowVersion(so_version) +
                      " (libarrow.so." + std::to_string(so_version) +
                      "), and this Headrace reads Parquet through pyarrow " + Describe(bridges) +
                      " only: install one of those (" + InstallHint(bridges) + ")");
    }
    const std::string suffix = std::to_string(so_version);
    // A libarrow already in the process's global scope (a binary linked against one, a
    // library opened RTLD_GLOBAL) would serve the bridge's Arrow symbols before its own
    // libarrow does (the dynamic loader searches the global scope first): only the same
    // release can work. (The test binaries link .venv's; the CLI and the extension none.)
    if (void* symbol = dlsym(RTLD_DEFAULT, kArrowProbe); symbol != nullptr) {
      Dl_info info{};
      const std::string global = dladdr(symbol, &info) != 0 && info.dli_fname != nullptr
                                     ? fs::path(info.dli_fname).filename().string()
                                     : std::string("a libarrow");
      if (global != "libarrow.so." + suffix) {
        return Unusable("this process already has " + global + " loaded globally, and the "
                        "pyarrow in " + dir.string() + " is " + PyarrowVersion(so_version) +
                        ": point HEADRACE_PYARROW_DIR at the pyarrow of " + global);
      }
    }
    HR_RETURN_IF_ERROR(Open(dir / ("libarrow.so." + suffix)).status());
    HR_RETURN_IF_ERROR(Open(dir / ("libparquet.so." + suffix)).status());
    const fs::path bridge_file =
        bridge_dir / (std::string(kBridgePrefix) + suffix + std::string(kBridgeSuffix));
    HR_ASSIGN_OR_RETURN(void* bridge_handle, Open(bridge_file));
    auto entry = reinterpret_cast<HrArrowBridgeEntry>(dlsym(bridge_handle, HR_ARROW_BRIDGE_ENTRY));
    const HrArrowBridge* bridge = entry != nullptr ? entry() : nullptr;
    if (bridge == nullptr || bridge->abi_version != HR_ARROW_BRIDGE_ABI ||
        bridge->struct_size < sizeof(HrArrowBridge) || bridge->arrow_so_version != so_version) {
      return Unusable(bridge_file.string() + " is not a bridge of ABI " +
                      std::to_string(HR_ARROW_BRIDGE_ABI) + " for libarrow.so." + suffix);
    }
    return bridge;
  }
  return Unusable("no pyarrow found (looked in " + (looked.empty() ? "nothing" : looked) +
                  "; HEADRACE_PYARROW_DIR names the folder): " + InstallHint(bridges) +
                  " (this Headrace reads Parquet through pyarrow " + Describe(bridges) + ")");
}

Result<const HrArrowBridge*> LoadArrowBridge() {
  static const Result<const HrArrowBridge*> loaded =
      LoadArrowBridgeFrom(DefaultArrowBridgeSearch());
  return loaded;
}

}  // namespace headrace
