#include "headrace/formats/arrow_bridge.h"

#include <arrow/util/config.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace headrace::arrow_bridge_test {
namespace {

namespace fs = std::filesystem;

// The pyarrow the tests link (.venv's) is the one the build's bridge was compiled for.
constexpr int kBuildArrow = ARROW_VERSION_MAJOR * 100 + ARROW_VERSION_MINOR;

fs::path TempDir(const std::string& name) {
  const char* tmp = std::getenv("HEADRACE_TEST_TMP");
  fs::path dir = fs::path(tmp != nullptr ? tmp : "/tmp") /
                ("arrow_bridge_test." + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void Touch(const fs::path& file, const std::string& content = "") {
  std::ofstream(file) << content;
}

TEST(ArrowBridge, LoadsTheBridgeOfTheInstalledPyarrow) {
  Result<const HrArrowBridge*> bridge = LoadArrowBridge();
  ASSERT_TRUE(bridge.ok()) << bridge.status().ToString();
  EXPECT_EQ((*bridge)->abi_version, static_cast<uint32_t>(HR_ARROW_BRIDGE_ABI));
  EXPECT_EQ((*bridge)->arrow_so_version, kBuildArrow);
  EXPECT_EQ(std::string((*bridge)->arrow_version), ARROW_VERSION_STRING);
  // Loaded once: a second call gives the same bridge.
  EXPECT_EQ(*LoadArrowBridge(), *bridge);
}

// The bridge is opened RTLD_LOCAL (as are pyarrow's libarrow and libparquet): nothing it
// exports joins the process's global scope, and it exports its entry point only.
TEST(ArrowBridge, IsLoadedLocallyAndExportsOnlyItsEntryPoint) {
  ASSERT_TRUE(LoadArrowBridge().ok());
  Dl_info info{};
  const HrArrowBridge* loaded = *LoadArrowBridge();
  ASSERT_NE(dladdr(reinterpret_cast<const void*>(loaded->parse_footer), &info), 0);
  const std::string file = info.dli_fname;
  EXPECT_NE(file.find("headrace_arrow_" + std::to_string(kBuildArrow) + ".so"), std::string::npos)
      << file;
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr);
  EXPECT_NE(dlsym(handle, HR_ARROW_BRIDGE_ENTRY), nullptr);
  // An inline Arrow function the bridge instantiates (arrow::TypedChunkLocation<int8_t>'s
  // constructor): Arrow's headers give it default visibility, bridge.map hides it. A
  // lookup through the bridge's handle may still find libarrow's own copy, never the
  // bridge's.
  if (void* symbol = dlsym(handle, "_ZN5arrow18TypedChunkLocationIaEC1Eaa")) {
    Dl_info where{};
    ASSERT_NE(dladdr(symbol, &where), 0);
    EXPECT_EQ(std::string(where.dli_fname).find("headrace_arrow_"), std::string::npos)
        << "the bridge exports an Arrow symbol (bridge.map)";
  }
  // Not in the global scope: only the loader's handle finds the entry point.
  EXPECT_EQ(dlsym(RTLD_DEFAULT, HR_ARROW_BRIDGE_ENTRY), nullptr);
  dlclose(handle);
}

TEST(ArrowBridge, APyarrowWithoutABridgeIsRefusedNamingTheVersionsThatHaveOne) {
  const fs::path pyarrow = TempDir("old_pyarrow");
  Touch(pyarrow / "libarrow.so.1400");
  ArrowBridgeSearch search = DefaultArrowBridgeSearch();
  search.pyarrow_folders = {pyarrow};
  Result<const HrArrowBridge*> bridge = LoadArrowBridgeFrom(search);
  ASSERT_FALSE(bridge.ok());
  EXPECT_EQ(bridge.status().code(), StatusCode::kUnsupportedFormat);
  const std::string message = bridge.status().message();
  EXPECT_NE(message.find("is 14.0 (libarrow.so.1400)"), std::string::npos) << message;
  const std::string build = std::to_string(kBuildArrow / 100) + "." +
                            std::to_string(kBuildArrow % 100);
  const size_t listed = message.find("reads Parquet through pyarrow ");
  ASSERT_NE(listed, std::string::npos) << message;
  EXPECT_NE(message.find(build, listed), std::string::npos) << message;
  EXPECT_NE(message.find("pip install 'pyarrow>="), std::string::npos) << message;
}

TEST(ArrowBridge, NoPyarrowIsRefusedWithWhereItLookedAndTheInstallHint) {
  const fs::path empty = TempDir("no_pyarrow");
  ArrowBridgeSearch search = DefaultArrowBridgeSearch();
  search.pyarrow_folders = {empty / "a", empty / "b"};
  Result<const HrArrowBridge*> bridge = LoadArrowBridgeFrom(search);
  ASSERT_FALSE(bridge.ok());
  EXPECT_EQ(bridge.status().code(), StatusCode::kUnsupportedFormat);
  const std::string message = bridge.status().message();
  EXPECT_NE(message.find("no pyarrow found (looked in " + (empty / "a").string() + ", " +
                         (empty / "b").string()),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("pip install 'pyarrow>="), std::string::npos) << message;
}

// This binary links .venv's libarrow (to write test files): its symbols would serve another
// release's bridge, so another release is refused before anything is opened.
TEST(ArrowBridge, AnotherReleaseThanTheLibarrowInTheGlobalScopeIsRefused) {
  const int other = kBuildArrow == 1500 ? 1600 : 1500;
  const fs::path pyarrow = TempDir("other_pyarrow");
  const fs::path bridges = TempDir("other_bridges");
  Touch(pyarrow / ("libarrow.so." + std::to_string(other)));
  Touch(bridges / ("headrace_arrow_" + std::to_string(other) + ".so"));
  Result<const HrArrowBridge*> bridge = LoadArrowBridgeFrom({{pyarrow}, {bridges}});
  ASSERT_FALSE(bridge.ok());
  EXPECT_NE(bridge.status().message().find("already has libarrow.so." +
                                           std::to_string(kBuildArrow) + " loaded globally"),
            std::string::npos)
      << bridge.status().message();
}

TEST(ArrowBridge, ABridgeThatDoesNotLoadIsAnErrorNamingIt) {
  const fs::path bridges = TempDir("broken_bridge");
  const fs::path file = bridges / ("headrace_arrow_" + std::to_string(kBuildArrow) + ".so");
  Touch(file, "not an ELF file");
  ArrowBridgeSearch search = DefaultArrowBridgeSearch();
  search.bridge_folders = {bridges};
  Result<const HrArrowBridge*> bridge = LoadArrowBridgeFrom(search);
  ASSERT_FALSE(bridge.ok());
  EXPECT_NE(bridge.status().message().find("cannot load " + file.string()), std::string::npos)
      << bridge.status().message();
}

}  // namespace
}  // namespace headrace::arrow_bridge_test
