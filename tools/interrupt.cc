#include "interrupt.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace headrace::tools {
namespace {

// The pipe's write end, for the handler: a plain int, set before the handlers are
// installed and reset after they are removed.
int g_signal_pipe = -1;
struct sigaction g_previous[2];
constexpr int kSignals[2] = {SIGINT, SIGTERM};

void OnSignal(int signal) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signal);
  // Non-blocking: a full pipe (a storm of signals) drops the extra ones.
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe, &byte, 1);
  errno = saved;
}

}  // namespace

const char* SignalName(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

InterruptWatcher::InterruptWatcher() {
  if (::pipe2(pipe_, O_CLOEXEC) != 0) {
    std::perror("headrace: pipe");
    std::abort();  // out of file descriptors at startup: nothing sensible to do
  }
  ::fcntl(pipe_[1], F_SETFL, O_NONBLOCK);
  g_signal_pipe = pipe_[1];
  thread_ = std::thread([this] { Loop(); });
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 2; ++i) {
    ::sigaction(kSignals[i], nullptr, &g_previous[i]);
    // A signal the parent ignores stays ignored (a shell's background job).
    if (g_previous[i].sa_handler != SIG_IGN) ::sigaction(kSignals[i], &action, nullptr);
  }
}

InterruptWatcher::~InterruptWatcher() {
  for (int i = 0; i < 2; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  const unsigned char quit = 0;  // not a signal number: tells Loop to return
  while (::write(pipe_[1], &quit, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  g_signal_pipe = -1;
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

void InterruptWatcher::SetStop(std::function<void()> stop) {
  std::lock_guard lock(mu_);
  stop_ = std::move(stop);
  if (stop_ && signal_.load() != 0) stop_();
}

bool InterruptWatcher::WaitFor(Clock::duration duration) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, duration, [this] { return signal_.load() != 0; });
}

void InterruptWatcher::Loop() {
  while (true) {
    unsigned char byte = 0;
    const ssize_t n = ::read(pipe_[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == 0) return;
    const int signal = byte;
    if (signal_.load() != 0) {
      std::fprintf(stderr, "headrace: %s again: exiting now\n", SignalName(signal));
      std::_Exit(128 + signal);
    }
    std::lock_guard lock(mu_);
    signal_.store(signal);
    std::fprintf(stderr, "headrace: %s: stopping (again to exit at once)\n", SignalName(signal));
    if (stop_) stop_();
    cv_.notify_all();
  }
}

}  // namespace headrace::tools
