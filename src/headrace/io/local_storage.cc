#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "headrace/core/strings.h"
#include "headrace/io/storage.h"

// glibc before 2.32 (2.31: the manylinux wheel's, scripts/build_wheel_manylinux.sh) names
// no SYS_openat2; the kernel's headers number it all the same.
#ifndef SYS_openat2
#define SYS_openat2 __NR_openat2
#endif

namespace headrace {
namespace {

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens `relative` (no leading '/') below the directory `root_fd` without following any
// symbolic link: openat2 where the kernel has it, else one openat(O_NOFOLLOW) per
// component. Returns the fd or -errno.
int OpenBeneath(int root_fd, const std::string& relative) {
  open_how how{};
  how.flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  for (int attempt = 0; attempt < 8; ++attempt) {
    const long fd = ::syscall(SYS_openat2, root_fd, relative.c_str(), &how, sizeof(how));
    if (fd >= 0) return static_cast<int>(fd);
    if (errno == EAGAIN) continue;  // a concurrent rename below the root: try again
    if (errno != ENOSYS) return -errno;
    break;
  }
  // Kernels before 5.6. The path is normalized (no "." or ".."); refuse them anyway.
  FdCloser dir{-1};
  size_t at = 0;
  while (true) {
    const size_t slash = relative.find('/', at);
    const std::string part = relative.substr(at, slash - at);
    if (part.empty() || part == "." || part == "..") return -EXDEV;
    const bool last = slash == std::string::npos;
    const int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW | (last ? 0 : O_DIRECTORY);
    const int fd = ::openat(dir.fd >= 0 ? dir.fd : root_fd, part.c_str(), flags);
    if (fd < 0) return -errno;
    if (last) return fd;
    FdCloser next{fd};
    std::swap(dir.fd, next.fd);
    at = slash + 1;
  }
}

// What every read obeys, fixed at construction.
struct ReadRules {
  int64_t max_object_bytes = 0;
  int root_fd = -1;  // >= 0: paths under `root` are opened beneath it, links refused
  std::string root;  // with a trailing '/'
};

Result<int> OpenFile(const std::string& path, const ReadRules& rules) {
  const bool beneath = rules.root_fd >= 0 && path.size() > rules.root.size() &&
                       path.compare(0, rules.root.size(), rules.root) == 0;
  int fd = -1;
  int err = 0;
  if (beneath) {
    fd = OpenBeneath(rules.root_fd, path.substr(rules.root.size()));
    err = fd < 0 ? -fd : 0;
  } else {
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below); reads
    // of a regular file ignore the flag.
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    err = fd < 0 ? errno : 0;
  }
  if (fd >= 0) return fd;
  if (err == ENOENT || err == ENOTDIR) {
    return Status::NotFound("no such file: " + QuoteForMessage(path));
  }
  if (beneath && (err == ELOOP || err == EXDEV)) {
    return Status::PathEscape(QuoteForMessage(path) +
                              " goes through a symbolic link below the dataset root: refused "
                              "(storage.follow_symlinks: false)");
  }
  return Status::IoError("cannot open " + QuoteForMessage(path) + ": " + std::strerror(err));
}

// `path` opened (the caller closes the descriptor) with its size, if it is a regular
// file: a directory, FIFO or device where a file should be is a wrong path, kNotFound like
// a missing file (so that a manifest or model path naming one is a config error).
Result<std::pair<int, int64_t>> OpenRegularFile(const std::string& path, const ReadRules& rules) {
  HR_ASSIGN_OR_RETURN(const int fd, OpenFile(path, rules));
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status::IoError("cannot stat " + QuoteForMessage(path) + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::NotFound("not a regular file (" +
                            std::string(S_ISDIR(st.st_mode) ? "a directory" : "a special file") +
                            "): " + QuoteForMessage(path));
  }
  closer.fd = -1;
  return std::pair<int, int64_t>{fd, static_cast<int64_t>(st.st_size)};
}

// The size of the regular file at `path`, under the same rules as a read of it.
Result<int64_t> FileSize(const std::string& path, const ReadRules& rules) {
  HR_ASSIGN_OR_RETURN(const auto opened, OpenRegularFile(path, rules));
  FdCloser closer{opened.first};
  return opened.second;
}

// Reads bytes [offset, offset + length) of `path` (length < 0: to its end; a range that
// runs past the end is cut short, one that starts past it is kInvalidArgument). The size
// limit and the gate see the bytes the read allocates: the range's, not the file's, so
// that a member of a large shard is read like a small file.
Result<Buffer> ReadFile(const std::string& path, const ReadRules& rules, const ReadGate& gate,
                        int64_t offset = 0, int64_t length = -1) {
  HR_ASSIGN_OR_RETURN(const auto opened, OpenRegularFile(path, rules));
  const int fd = opened.first;
  FdCloser closer{fd};
  const int64_t file_size = opened.second;
  if (offset < 0 || offset > file_size) {
    return Status::InvalidArgument("byte range of " + QuoteForMessage(path) + " starts at " +
                                   std::to_string(offset) + ", past its " +
                                   std::to_string(file_size) + " bytes");
  }
  const int64_t want = length < 0 ? file_size - offset : std::min(length, file_size - offset);
  if (rules.max_object_bytes > 0 && want > rules.max_object_bytes) {
    return Status::ResourceExhausted(QuoteForMessage(path) + (length >= 0 ? ": the range is " : " is ") +
                                     std::to_string(want) + " bytes, over the limit of " +
                                     std::to_string(rules.max_object_bytes) +
                                     " bytes (storage.max_object_bytes; by default the larger of "
                                     "memory.budget_bytes and 1 GiB)");
  }
  if (gate && !gate(want)) {
    return Status::Cancelled("reading " + QuoteForMessage(path) +
                             ": its size was refused by the reader");
  }
  const size_t size = static_cast<size_t>(want);
  HR_ASSIGN_OR_RETURN(Buffer buffer, Buffer::Allocate(size));
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, buffer.mutable_data() + done, size - done,
                              static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("cannot read " + QuoteForMessage(path) + ": " + std::strerror(errno));
    }
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  return buffer.Slice(0, done);
}

// A fixed set of reader threads over one FIFO of pending reads. Local reads are
// blocking system calls, so asynchrony here means "not on the caller's thread".
class LocalStorage final : public Storage {
 public:
  explicit LocalStorage(const LocalStorageOptions& options) {
    rules_.max_object_bytes = options.max_object_bytes;
    if (!options.follow_symlinks && !options.root.empty()) {
      rules_.root = options.root;
      if (rules_.root.back() != '/') rules_.root += '/';
      // The root itself is trusted configuration: it may be reached through links.
      rules_.root_fd = ::open(options.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (rules_.root_fd < 0) {
        root_error_ = Status::IoError("cannot open the dataset root " +
                                      QuoteForMessage(options.root) + ": " + std::strerror(errno));
      }
    }
    for (int i = 0; i < std::max(1, options.threads); ++i) {
      threads_.emplace_back([this] { Loop(); });
    }
  }

  ~LocalStorage() override {
    std::deque<Request> abandoned;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      abandoned.swap(queue_);
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    for (auto& r : abandoned) r.Fail(Status::Cancelled("storage shut down"));
    if (rules_.root_fd >= 0) ::close(rules_.root_fd);
  }

  void ReadAsync(std::string uri, ReadCallback done) override {
    ReadAsyncGated(std::move(uri), std::move(done), nullptr);
  }

  void ReadAsyncGated(std::string uri, ReadCallback done, ReadGate gate) override {
    ReadRangeAsyncGated(std::move(uri), 0, -1, std::move(done), std::move(gate));
  }

  // One pread of the range: the rules (links below the root, the size limit) and the gate
  // apply exactly as to a whole file, to the range's bytes.
  void ReadRangeAsyncGated(std::string uri, int64_t offset, int64_t length, ReadCallback done,
                           ReadGate gate) override {
    {
      std::lock_guard lock(mu_);
      if (!stopping_) {
        queue_.push_back(
            Request{std::move(uri), std::move(done), std::move(gate), offset, length});
        cv_.notify_one();
        return;
      }
    }
    done(Status::Cancelled("storage shut down"));
  }

  void SizeAsync(std::string uri, SizeCallback done, ReadGate wanted) override {
    {
      std::lock_guard lock(mu_);
      if (!stopping_) {
        Request request{std::move(uri), nullptr, std::move(wanted)};
        request.size_done = std::move(done);
        queue_.push_back(std::move(request));
        cv_.notify_one();
        return;
      }
    }
    done(Status::Cancelled("storage shut down"));
  }

  std::string_view name() const override { return "local"; }

  std::vector<StorageStats> Stats() const override {
    StorageStats s;
    s.backend = "local";
    s.requests = reads_.load(std::memory_order_relaxed);
    s.bytes = bytes_.load(std::memory_order_relaxed);
    s.errors = errors_.load(std::memory_order_relaxed);
    return {s};
  }

 private:
  struct Request {
    std::string uri;
    ReadCallback done;
    ReadGate gate;
    int64_t offset = 0;
    int64_t length = -1;  // -1: to the end
    SizeCallback size_done = nullptr;  // set: the file's size is asked, not its bytes
    void Fail(Status status) {
      if (size_done) {
        size_done(std::move(status));
      } else {
        done(std::move(status));
      }
    }
  };

  void Loop() {
    while (true) {
      Request request;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping
        request = std::move(queue_.front());
        queue_.pop_front();
      }
      if (request.size_done) {
        if (request.gate && !request.gate(kReadStillWanted)) {
          request.size_done(Status::Cancelled("the reader gave the request up"));
          continue;
        }
        Result<int64_t> size = root_error_.ok() ? FileSize(request.uri, rules_)
                                                : Result<int64_t>(root_error_);
        request.size_done(std::move(size));
        continue;
      }
      // A read queued behind others whose reader has stopped since: not started.
      if (request.gate && !request.gate(kReadStillWanted)) {
        request.done(Status::Cancelled("the reader gave the read up"));
        continue;
      }
      Result<Buffer> bytes = root_error_.ok() ? ReadFile(request.uri, rules_, request.gate, request.offset,
                                                       request.length)
                                              : Result<Buffer>(root_error_);
      // A read its gate gave up (kCancelled) read nothing: not counted.
      if (bytes.ok() || bytes.status().code() != StatusCode::kCancelled) {
        reads_.fetch_add(1, std::memory_order_relaxed);
      }
      if (bytes.ok()) {
        bytes_.fetch_add(static_cast<int64_t>(bytes->size()), std::memory_order_relaxed);
      } else if (bytes.status().code() != StatusCode::kCancelled) {
        errors_.fetch_add(1, std::memory_order_relaxed);
      }
      request.done(std::move(bytes));
    }
  }

  ReadRules rules_;    // fixed before the threads start
  Status root_error_;  // why the root could not be opened (follow_symlinks: false)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;  // guarded by mu_
  bool stopping_ = false;      // guarded by mu_
  std::vector<std::thread> threads_;
  std::atomic<int64_t> reads_{0};
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> errors_{0};
};

}  // namespace

std::unique_ptr<Storage> MakeLocalStorage(const LocalStorageOptions& options) {
  return std::make_unique<LocalStorage>(options);
}

}  // namespace headrace
