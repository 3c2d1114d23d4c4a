// Linked into every binary that scripts/build_wheel_manylinux.sh links with
// -static-libstdc++ (our extension and CLI, SentencePiece, OpenH264).
//
// Why: that libstdc++.a is this machine's (GCC 12, built against Debian 12's glibc 2.36)
// and refers to two symbols that glibc 2.31, the sysroot the wheel is linked against,
// does not have (and a third that glibc 2.28 lacks, below). Each is defined here, hidden (local to the binary that links it):
// - __libc_single_threaded (glibc 2.32): libstdc++ skips atomic reference counting
//   while it is nonzero. Zero here: always atomic, which is what GCC 10's libstdc++ did
//   on glibc 2.31, and correct with any number of threads.
// - arc4random (glibc 2.36): one of std::random_device's sources, reached only where
//   the CPU has neither RDSEED nor RDRAND or when asked for by name. Here the same
//   kernel randomness glibc's own arc4random reads, through getrandom (glibc 2.25).
// For glibc 2.28 (manylinux_2_28), one more: GCC 12's <condition_variable> (its headers,
// in our code) calls pthread_cond_clockwait (glibc 2.30) for a wait on the steady clock.
// - pthread_cond_clockwait: the deadline on `clock` turned into one on CLOCK_REALTIME
//   (what a default condition variable waits on) and pthread_cond_timedwait. A wall
//   clock step during the wait makes it end early or late; libstdc++'s callers read the
//   steady clock again after every wake and wait again if it is not yet time.
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/random.h>
#include <time.h>

__attribute__((visibility("hidden"))) int pthread_cond_clockwait(pthread_cond_t* cond,
                                                                 pthread_mutex_t* mutex,
                                                                 clockid_t clock,
                                                                 const struct timespec* deadline) {
  if (clock == CLOCK_REALTIME) return pthread_cond_timedwait(cond, mutex, deadline);
  if (clock != CLOCK_MONOTONIC) return EINVAL;
  struct timespec now_clock, now_real;
  clock_gettime(clock, &now_clock);
  clock_gettime(CLOCK_REALTIME, &now_real);
  long long ns = (long long)(deadline->tv_sec - now_clock.tv_sec) * 1000000000LL +
                 (deadline->tv_nsec - now_clock.tv_nsec) + now_real.tv_nsec;
  struct timespec real = {now_real.tv_sec + ns / 1000000000LL, ns % 1000000000LL};
  if (real.tv_nsec < 0) {
    real.tv_nsec += 1000000000LL;
    real.tv_sec -= 1;
  }
  return pthread_cond_timedwait(cond, mutex, &real);
}

__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;

__attribute__((visibility("hidden"))) unsigned int arc4random(void) {
  unsigned int value;
  while (getrandom(&value, sizeof value, 0) != (ssize_t)sizeof value) {
  }
  return value;
}
