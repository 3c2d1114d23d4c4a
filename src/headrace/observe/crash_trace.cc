#include "headrace/observe/crash_trace.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>

namespace headrace {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr int kMaxFrames = 64;

struct sigaction g_previous[std::size(kSignals)];
std::atomic<bool> g_installed{false};

// A line assembled on the handler's stack and written in one write(2).
class Line {
 public:
  Line& Text(const char* s) {
    while (*s != '\0' && used_ < sizeof(buf_)) buf_[used_++] = *s++;
    return *this;
  }
  Line& Number(uint64_t v, int base) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v % static_cast<uint64_t>(base)];
      v /= static_cast<uint64_t>(base);
    } while (v != 0);
    if (base == 16) Text("0x");
    while (n > 0 && used_ < sizeof(buf_)) buf_[used_++] = digits[--n];
    return *this;
  }
  void Write() {
    if (used_ < sizeof(buf_)) buf_[used_++] = '\n';
    for (size_t done = 0; done < used_;) {
      const ssize_t w = write(STDERR_FILENO, buf_ + done, used_ - done);
      if (w <= 0) return;
      done += static_cast<size_t>(w);
    }
  }

 private:
  char buf_[512];
  size_t used_ = 0;
};

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
  }
  return "?";
}

void OnFatalSignal(int sig, siginfo_t* info, void* /*context*/) {
  const int saved_errno = errno;
  Line()
      .Text("headrace: fatal signal ")
      .Number(static_cast<uint64_t>(sig), 10)
      .Text(" (")
      .Text(SignalName(sig))
      .Text(") in thread ")
      .Number(static_cast<uint64_t>(syscall(SYS_gettid)), 10)
      .Text(" at address ")
      .Number(reinterpret_cast<uintptr_t>(info != nullptr ? info->si_addr : nullptr), 16)
      .Text("; native stack:")
      .Write();
  void* frames[kMaxFrames];
  const int n = backtrace(frames, kMaxFrames);
  for (int i = 0; i < n; ++i) {
    Line line;
    line.Text("  #").Number(static_cast<uint64_t>(i), 10).Text(" ");
    Dl_info where{};
    if (dladdr(frames[i], &where) != 0 && where.dli_fname != nullptr) {
      line.Text(where.dli_fname)
          .Text("+")
          .Number(reinterpret_cast<uintptr_t>(frames[i]) -
                      reinterpret_cast<uintptr_t>(where.dli_fbase),
                  16);
      if (where.dli_sname != nullptr) {
        line.Text(" (")
            .Text(where.dli_sname)
            .Text("+")
            .Number(reinterpret_cast<uintptr_t>(frames[i]) -
                        reinterpret_cast<uintptr_t>(where.dli_saddr),
                    16)
            .Text(")");
      }
    } else {
      line.Number(reinterpret_cast<uintptr_t>(frames[i]), 16);
    }
    line.Write();
  }
  // The handler that was there before takes the signal from here: a fault returns and
  // faults again under it (with its real siginfo); a sent signal is sent again.
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    if (kSignals[i] == sig) sigaction(sig, &g_previous[i], nullptr);
  }
  errno = saved_errno;
  if (info == nullptr || info->si_code <= 0) raise(sig);
}

}  // namespace

void InstallCrashTrace() {
  if (g_installed.exchange(true)) return;
  void* warm[1];
  (void)backtrace(warm, 1);  // loads libgcc_s now, not inside the handler
  struct sigaction action {};
  action.sa_sigaction = OnFatalSignal;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    sigaction(kSignals[i], &action, &g_previous[i]);
  }
}

}  // namespace headrace
