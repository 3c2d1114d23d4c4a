#include "make_sample/make_sample_speech.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "make_sample/make_sample_ocr.h"

extern char** environ;

namespace headrace {
namespace {

// Closes a file descriptor once.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Close(); }
  void Close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct FileActions {
  posix_spawn_file_actions_t actions;
  FileActions() { posix_spawn_file_actions_init(&actions); }
  ~FileActions() { posix_spawn_file_actions_destroy(&actions); }
  FileActions(const FileActions&) = delete;
  FileActions& operator=(const FileActions&) = delete;
};

// What espeak-ng said on stderr, enough of it to explain a failure.
constexpr size_t kMaxStderr = 2048;

}  // namespace

std::string SpeechText(int64_t i) {
  std::string text;
  for (const std::string& line : OcrLines(i)) text += (text.empty() ? "" : " ") + line;
  // The last word is the sample number: drop it, a transcript of digits would say
  // "zero" where the text says "0".
  return text.substr(0, text.rfind(' '));
}

std::string FindOnPath(std::string_view name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr || name.empty() || name.find('/') != std::string_view::npos) return "";
  std::string_view dirs(path);
  while (true) {
    const size_t colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    if (!dir.empty()) {  // an empty entry means ".": not searched, on purpose
      std::string candidate = std::string(dir) + "/" + std::string(name);
      struct stat st {};
      if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          ::access(candidate.c_str(), X_OK) == 0) {
        return candidate;
      }
    }
    if (colon == std::string_view::npos) return "";
    dirs.remove_prefix(colon + 1);
  }
}

Result<int64_t> WriteSpeech(const std::string& espeak, const std::string& text,
                            const std::filesystem::path& path) {
  // stderr comes back through a pipe; O_CLOEXEC so that children spawned at the same
  // time by other threads do not hold its write end open.
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return Status::IoError(std::string("espeak-ng: pipe: ") + std::strerror(errno));
  }
  Fd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  FileActions fa;
  posix_spawn_file_actions_addopen(&fa.actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa.actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa.actions, write_end.fd, 2);
  const std::string out = path.string();
  // -v en-us: one fixed voice, whatever the system default; -w: to the file, not a
  // sound device. The text is a single argument: no shell sees it.
  std::vector<std::string> args = {espeak, "-v", "en-us", "-w", out, text};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, espeak.c_str(), &fa.actions, nullptr, argv.data(), environ);
  write_end.Close();
  if (spawned != 0) {
    return Status::IoError("cannot run " + espeak + ": " + std::strerror(spawned));
  }
  std::string said;
  char buf[512];
  while (true) {
    const ssize_t n = ::read(read_end.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (said.size() < kMaxStderr)
      said.append(buf, std::min(static_cast<size_t>(n), kMaxStderr - said.size()));
  }
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) {
      return Status::IoError(std::string("espeak-ng: waitpid: ") + std::strerror(errno));
    }
  }
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    const std::string how = WIFEXITED(wstatus)
                                ? "exited with status " + std::to_string(WEXITSTATUS(wstatus))
                                : "was killed by signal " + std::to_string(WTERMSIG(wstatus));
    return Status::IoError(espeak + " " + how + " writing " + out +
                           (said.empty() ? "" : ": " + said));
  }
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size == 0) {
    return Status::IoError(espeak + " wrote no audio to " + out +
                           (said.empty() ? "" : ": " + said));
  }
  return static_cast<int64_t>(size);
}

}  // namespace headrace
