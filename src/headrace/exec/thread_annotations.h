// Clang's thread-safety annotations, checked by `make tsa` (the engine compiled with
// clang's -Wthread-safety -Werror), empty for other compilers: a member HR_GUARDED_BY(mu_)
// may only be touched with mu_ held, a method HR_REQUIRES(mu_) only called with it held.
//
// libstdc++'s std::mutex carries no capability attribute, so the engine's locks are the
// annotated Mutex and MutexLock below (a std::mutex and a std::unique_lock underneath;
// MutexLock is what std::condition_variable_any waits with). A wait predicate is a lambda
// the analysis cannot see the lock in: it calls an HR_REQUIRES method through
// HR_LOCKED_LAMBDA, which turns the analysis off for that one lambda body only.
#pragma once

#include <mutex>

#if defined(__clang__)
#define HR_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define HR_THREAD_ANNOTATION(x)
#endif

#define HR_CAPABILITY(x) HR_THREAD_ANNOTATION(capability(x))
#define HR_SCOPED_CAPABILITY HR_THREAD_ANNOTATION(scoped_lockable)
#define HR_GUARDED_BY(x) HR_THREAD_ANNOTATION(guarded_by(x))
#define HR_REQUIRES(...) HR_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define HR_EXCLUDES(...) HR_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define HR_ACQUIRE(...) HR_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define HR_RELEASE(...) HR_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define HR_LOCKED_LAMBDA HR_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace headrace {

class HR_CAPABILITY("mutex") Mutex {
 public:
  void lock() HR_ACQUIRE() { mu_.lock(); }
  void unlock() HR_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds `mu` for its scope; lock()/unlock() let a condition variable release it while
// waiting (std::condition_variable_any).
class HR_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) HR_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() HR_RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  void lock() HR_ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  void unlock() HR_RELEASE() {
    held_ = false;
    mu_.unlock();
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

}  // namespace headrace
