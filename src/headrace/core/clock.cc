#include "headrace/core/clock.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace headrace {
namespace {

int64_t ReadProcStatusKb(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  int64_t kb = 0;
  const size_t key_len = std::strlen(key);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, key, key_len) == 0 && line[key_len] == ':') {
      kb = std::strtoll(line + key_len + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kb;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerAllocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizerAllocator = true;
#else
constexpr bool kSanitizerAllocator = false;
#endif
#else
constexpr bool kSanitizerAllocator = false;
#endif

// glibc's struct mallinfo2 (malloc.h, glibc 2.33+), declared here because the function
// is looked up at run time: ten size_t fields in this order.
struct MallInfo2 {
  size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks,
      keepcost;
};
using MallInfo2Fn = MallInfo2 (*)();

}  // namespace

MallocHeap MallocHeapBytes() {
  if constexpr (kSanitizerAllocator) return {};
  static const auto mallinfo2 = reinterpret_cast<MallInfo2Fn>(dlsym(RTLD_DEFAULT, "mallinfo2"));
  if (mallinfo2 == nullptr) return {};
  const MallInfo2 m = mallinfo2();
  return {static_cast<int64_t>(m.arena + m.hblkhd), static_cast<int64_t>(m.uordblks + m.hblkhd)};
}

int64_t CurrentRssBytes() { return ReadProcStatusKb("VmRSS") * 1024; }
int64_t PeakRssBytes() { return ReadProcStatusKb("VmHWM") * 1024; }

}  // namespace headrace
