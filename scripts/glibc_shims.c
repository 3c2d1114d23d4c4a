// Linked into every binary that scripts/build_wheel_manylinux.sh links with
// -static-libstdc++ (our extension and CLI, SentencePiece, OpenH264).
//
// Why: that libstdc++.a is this machine's (GCC 12, built against Debian 12's glibc 2.36)
// and refers to two symbols that glibc 2.31, the sysroot the wheel is linked against,
// does not have. Each is defined here, hidden (local to the binary that links it):
// - __libc_single_threaded (glibc 2.32): libstdc++ skips atomic reference counting
//   while it is nonzero. Zero here: always atomic, which is what GCC 10's libstdc++ did
//   on glibc 2.31, and correct with any number of threads.
// - arc4random (glibc 2.36): one of std::random_device's sources, reached only where
//   the CPU has neither RDSEED nor RDRAND or when asked for by name. Here the same
//   kernel randomness glibc's own arc4random reads, through getrandom (glibc 2.25).
#include <stddef.h>
#include <sys/random.h>

__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;

__attribute__((visibility("hidden"))) unsigned int arc4random(void) {
  unsigned int value;
  while (getrandom(&value, sizeof value, 0) != (ssize_t)sizeof value) {
  }
  return value;
}
