// What the CPU running us offers, for kernels that pick a SIMD path at run time (the
// image resamplers). Checked once per process.
#pragma once

namespace headrace {

// Whether AVX2 is there (x86-64; false elsewhere).
inline bool HasAvx2() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace headrace
