#include <fcntl.h>
#include <sys/stat.h>
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

#include "headrace/io/storage.h"

namespace headrace {
namespace {

Result<Buffer> ReadFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below); reads
  // of a regular file ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return Status::NotFound("no such file: " + path);
    return Status::IoError("cannot open " + path + ": " + std::strerror(err));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status::IoError("cannot stat " + path + ": " + std::strerror(errno));
  }
  // A directory, FIFO or device where a file should be is a wrong path: kNotFound, like
  // a missing file (so that a manifest or model path naming one is a config error).
  if (!S_ISREG(st.st_mode)) {
    return Status::NotFound("not a regular file (" +
                            std::string(S_ISDIR(st.st_mode) ? "a directory" : "a special file") +
                            "): " + path);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  HR_ASSIGN_OR_RETURN(Buffer buffer, Buffer::Allocate(size));
  size_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pread(fd, buffer.mutable_data() + done, size - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("cannot read " + path + ": " + std::strerror(errno));
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
  explicit LocalStorage(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) {
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
    for (auto& r : abandoned) r.done(Status::Cancelled("storage shut down"));
  }

  void ReadAsync(std::string uri, ReadCallback done) override {
    {
      std::lock_guard lock(mu_);
      if (!stopping_) {
        queue_.push_back(Request{std::move(uri), std::move(done)});
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
      Result<Buffer> bytes = ReadFile(request.uri);
      reads_.fetch_add(1, std::memory_order_relaxed);
      if (bytes.ok()) {
        bytes_.fetch_add(static_cast<int64_t>(bytes->size()), std::memory_order_relaxed);
      } else {
        errors_.fetch_add(1, std::memory_order_relaxed);
      }
      request.done(std::move(bytes));
    }
  }

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
  return std::make_unique<LocalStorage>(options.threads);
}

}  // namespace headrace
