#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <latch>
#include <mutex>
#include <set>

#include "headrace/io/storage.h"

// Its own namespace: the folder's tests compile as one unity file (CMakeLists.txt).
namespace headrace::local_storage_test {
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

TEST(LocalStorage, FileOverMaxObjectBytesFailsNamingTheKey) {
  const auto path = (TestDir() / "big.bin").string();
  std::ofstream(path, std::ios::binary) << std::string(5000, 'x');
  auto storage = MakeLocalStorage({.max_object_bytes = 4096});
  auto bytes = storage->Read(path);
  EXPECT_EQ(bytes.status().code(), StatusCode::kResourceExhausted);
  for (const char* part : {"storage.max_object_bytes", "5000", "4096", "big.bin"}) {
    EXPECT_NE(bytes.status().message().find(part), std::string::npos) << bytes.status().ToString();
  }
  EXPECT_TRUE(MakeLocalStorage({.max_object_bytes = 5000})->Read(path).ok());
}

TEST(LocalStorage, SizeGateSeesTheFileSizeBeforeItIsReadAndMayRefuse) {
  const auto path = (TestDir() / "gated.bin").string();
  std::ofstream(path, std::ios::binary) << std::string(1234, 'g');
  auto storage = MakeLocalStorage();
  for (const bool admit : {true, false}) {
    std::promise<Result<Buffer>> promise;
    int64_t asked = -1;
    storage->ReadAsyncGated(
        path, [&promise](Result<Buffer> r) { promise.set_value(std::move(r)); },
        [&asked, admit](int64_t bytes) {
          if (bytes == kReadStillWanted) return true;  // not a size: still wanted
          asked = bytes;
          return admit;
        });
    Result<Buffer> r = promise.get_future().get();
    EXPECT_EQ(asked, 1234);
    if (admit) {
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->size(), 1234u);
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
      // Given up by the reader: neither a file read nor a failure.
      EXPECT_EQ(storage->Stats()[0].errors, 0);
      EXPECT_EQ(storage->Stats()[0].requests, 1);
    }
  }
}

TEST(LocalStorage, SymlinksBelowTheRootAreRefusedUnlessFollowed) {
  namespace fs = std::filesystem;
  const fs::path base = TestDir() / "links";
  fs::remove_all(base);
  fs::create_directories(base / "root" / "images");
  fs::create_directories(base / "outside");
  std::ofstream(base / "root" / "images" / "real.jpg") << "real";
  std::ofstream(base / "outside" / "secret.jpg") << "secret";
  fs::create_symlink(base / "outside" / "secret.jpg", base / "root" / "images" / "link.jpg");
  fs::create_directory_symlink(base / "outside", base / "root" / "dirlink");
  fs::create_symlink("real.jpg", base / "root" / "images" / "inner.jpg");  // stays inside
  fs::create_directory_symlink(base / "root", base / "rootlink");
  const std::string root = (base / "root").string();

  auto follow = MakeLocalStorage({.root = root});
  EXPECT_TRUE(follow->Read(root + "/images/link.jpg").ok());  // today's default

  auto strict = MakeLocalStorage({.follow_symlinks = false, .root = root});
  EXPECT_TRUE(strict->Read(root + "/images/real.jpg").ok());
  for (const char* refused : {"/images/link.jpg", "/dirlink/secret.jpg", "/images/inner.jpg"}) {
    Result<Buffer> r = strict->Read(root + refused);
    EXPECT_EQ(r.status().code(), StatusCode::kPathEscape) << refused << ": "
                                                           << r.status().ToString();
    EXPECT_NE(r.status().message().find("storage.follow_symlinks"), std::string::npos);
  }
  EXPECT_EQ(strict->Read(root + "/images/none.jpg").status().code(), StatusCode::kNotFound);
  // Files outside the root (a manifest, a tokenizer model) are opened as usual.
  EXPECT_TRUE(strict->Read((base / "outside" / "secret.jpg").string()).ok());
  // The root itself may be reached through a link.
  const std::string via = (base / "rootlink").string();
  auto linked_root = MakeLocalStorage({.follow_symlinks = false, .root = via});
  EXPECT_TRUE(linked_root->Read(via + "/images/real.jpg").ok());
  EXPECT_EQ(linked_root->Read(via + "/images/link.jpg").status().code(), StatusCode::kPathEscape);
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

Result<Buffer> ReadLocalRange(Storage& storage, const std::string& path, int64_t offset,
                              int64_t length, int64_t* gated = nullptr) {
  std::promise<Result<Buffer>> promise;
  storage.ReadRangeAsyncGated(
      path, offset, length, [&promise](Result<Buffer> r) { promise.set_value(std::move(r)); },
      [gated](int64_t bytes) {
        if (bytes == kReadStillWanted) return true;
        if (gated != nullptr) *gated = bytes;
        return true;
      });
  return promise.get_future().get();
}

std::string Text(const Buffer& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

TEST(LocalStorage, RangedReadPreadsTheRangeAndGatesItsSize) {
  const auto path = (TestDir() / "shard.bin").string();
  std::ofstream(path, std::ios::binary) << "0123456789abcdefghij";
  auto storage = MakeLocalStorage({.max_object_bytes = 8});  // the file is 20 bytes
  int64_t gated = -1;
  auto r = ReadLocalRange(*storage, path, 5, 6, &gated);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Text(*r), "56789a");
  EXPECT_EQ(gated, 6);
  // The limit applies to the range: a range over it fails, naming the key.
  auto big = ReadLocalRange(*storage, path, 0, 9);
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("storage.max_object_bytes"), std::string::npos);
  // Cut short at the end; past the end is kInvalidArgument.
  auto tail = ReadLocalRange(*storage, path, 16, 8);
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  EXPECT_EQ(Text(*tail), "ghij");
  EXPECT_EQ(ReadLocalRange(*storage, path, 21, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadLocalRange(*storage, path + ".none", 0, 1).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(storage->Stats()[0].requests, 5);
}

TEST(LocalStorage, SizeIsTheFilesWithoutReadingItUnderTheSameRules) {
  const auto path = (TestDir() / "sized.bin").string();
  std::ofstream(path, std::ios::binary) << "0123456789abcdefghij";
  auto storage = MakeLocalStorage({.max_object_bytes = 8});  // sizes are not reads: no limit
  auto size = storage->Size(path);
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, 20);
  EXPECT_EQ(storage->Size(path + ".none").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(storage->Size(TestDir().string()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(storage->Stats()[0].requests, 0);  // nothing was read
  EXPECT_EQ(storage->Stats()[0].bytes, 0);

  const auto root = TestDir() / "size_root";
  std::filesystem::create_directories(root);
  std::ofstream(root / "real.bin", std::ios::binary) << "abc";
  std::filesystem::remove(root / "link.bin");
  std::filesystem::create_symlink(root / "real.bin", root / "link.bin");
  auto strict = MakeLocalStorage({.follow_symlinks = false, .root = root.string()});
  EXPECT_EQ(*strict->Size((root / "real.bin").string()), 3);
  EXPECT_EQ(strict->Size((root / "link.bin").string()).status().code(), StatusCode::kPathEscape);
}

TEST(LocalStorage, RangedReadRefusesALinkBelowTheRoot) {
  const auto root = TestDir() / "range_root";
  std::filesystem::create_directories(root);
  std::ofstream(root / "real.tar", std::ios::binary) << "tarbytes";
  std::filesystem::remove(root / "link.tar");
  std::filesystem::create_symlink(root / "real.tar", root / "link.tar");
  auto storage = MakeLocalStorage({.follow_symlinks = false, .root = root.string()});
  auto ok = ReadLocalRange(*storage, (root / "real.tar").string(), 3, 5);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(Text(*ok), "bytes");
  EXPECT_EQ(ReadLocalRange(*storage, (root / "link.tar").string(), 0, 3).status().code(),
            StatusCode::kPathEscape);
}

}  // namespace
}  // namespace headrace::local_storage_test
