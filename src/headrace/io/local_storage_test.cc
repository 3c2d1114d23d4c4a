#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <latch>
#include <mutex>
#include <set>

#include "headrace/io/storage.h"

namespace headrace {
namespace {

std::filesystem::path TestDir() {
  const char* tmp = std::getenv("HEADRACE_TEST_TMP");
  // One folder per process: ctest runs each test in its own process, in parallel.
  auto dir = std::filesystem::path(tmp ? tmp : "/tmp") /
             ("local_storage_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(LocalStorage, ReadsWholeFilesIntoOneBuffer) {
  const auto path = (TestDir() / "hello.bin").string();
  std::ofstream(path, std::ios::binary) << "hello, storage";
  auto storage = MakeLocalStorage();
  auto bytes = storage->Read(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()),
            "hello, storage");
  EXPECT_EQ(storage->name(), "local");
}

TEST(LocalStorage, NamesMissingFilesAndDirectories) {
  auto storage = MakeLocalStorage();
  auto missing = storage->Read((TestDir() / "nope.jpg").string());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.jpg"), std::string::npos);
  // A directory where a file should be is a wrong path too (a config error when it is
  // the manifest or the tokenizer model).
  auto directory = storage->Read(TestDir().string());
  EXPECT_EQ(directory.status().code(), StatusCode::kNotFound);
  EXPECT_NE(directory.status().message().find("not a regular file (a directory)"),
            std::string::npos);
}

TEST(LocalStorage, RefusesAFifoWithoutWaitingForAWriter) {
  const auto path = (TestDir() / "fifo").string();
  std::filesystem::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto storage = MakeLocalStorage();
  auto fifo = storage->Read(path);  // used to block in open() forever
  EXPECT_EQ(fifo.status().code(), StatusCode::kNotFound);
  EXPECT_NE(fifo.status().message().find("a special file"), std::string::npos);
}

TEST(LocalStorage, CountsReadsBytesAndErrors) {
  const auto path = (TestDir() / "count.bin").string();
  std::ofstream(path, std::ios::binary) << "12345";
  auto storage = MakeLocalStorage();
  ASSERT_TRUE(storage->Read(path).ok());
  ASSERT_TRUE(storage->Read(path).ok());
  ASSERT_FALSE(storage->Read((TestDir() / "nope.bin").string()).ok());
  const std::vector<StorageStats> stats = storage->Stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].backend, "local");
  EXPECT_EQ(stats[0].requests, 3);
  EXPECT_EQ(stats[0].bytes, 10);
  EXPECT_EQ(stats[0].errors, 1);
  EXPECT_EQ(stats[0].retries, 0);
}

TEST(LocalStorage, ReadsZeroByteFiles) {
  const auto path = (TestDir() / "empty.bin").string();
  std::ofstream(path, std::ios::binary).flush();
  auto bytes = MakeLocalStorage()->Read(path);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->size(), 0u);
}

TEST(LocalStorage, CompletesEveryConcurrentReadExactlyOnce) {
  constexpr int kFiles = 64;
  for (int i = 0; i < kFiles; ++i) {
    std::ofstream(TestDir() / ("c" + std::to_string(i)), std::ios::binary)
        << std::string(i + 1, 'x');
  }
  auto storage = MakeLocalStorage({.threads = 4});
  std::latch done(kFiles);
  std::mutex mu;
  std::multiset<size_t> sizes;
  for (int i = 0; i < kFiles; ++i) {
    storage->ReadAsync((TestDir() / ("c" + std::to_string(i))).string(), [&](Result<Buffer> r) {
      {
        std::lock_guard lock(mu);
        sizes.insert(r.ok() ? r->size() : 0);
      }
      done.count_down();
    });
  }
  done.wait();
  ASSERT_EQ(sizes.size(), static_cast<size_t>(kFiles));
  for (int i = 0; i < kFiles; ++i) EXPECT_EQ(sizes.count(i + 1), 1u);
}

TEST(LocalStorage, ShutdownCompletesPendingReads) {
  const auto path = (TestDir() / "pending.bin").string();
  std::ofstream(path, std::ios::binary) << "x";
  std::atomic<int> completed{0};
  {
    auto storage = MakeLocalStorage({.threads = 1});
    for (int i = 0; i < 200; ++i) {
      storage->ReadAsync(path, [&](Result<Buffer>) { ++completed; });
    }
  }  // destroyed with reads still queued: each callback runs exactly once
  EXPECT_EQ(completed.load(), 200);
}

}  // namespace
}  // namespace headrace
