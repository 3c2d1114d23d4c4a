// Pinned (page-locked) host memory for batches, so that a trainer's
// `tensor.to("cuda", non_blocking=True)` is a true asynchronous DMA.
//
// The CUDA runtime is loaded at run time (dlopen) so that the package neither links nor
// needs CUDA: on a machine without a usable CUDA device PinnedAllocator() is null and
// `pin_memory=True` falls back to the heap (documented no-op).
#include <dlfcn.h>

#include <atomic>
#include <mutex>

#include "common.h"

namespace headrace::python {
namespace {

using HostAllocFn = int (*)(void**, size_t, unsigned int);
using FreeHostFn = int (*)(void*);
using DeviceCountFn = int (*)(int*);

class CudaHostAllocator : public Allocator {
 public:
  CudaHostAllocator(HostAllocFn alloc, FreeHostFn free) : alloc_(alloc), free_(free) {}
  void* Allocate(size_t bytes, size_t /*alignment: pages are aligned*/) override {
    void* p = nullptr;
    if (alloc_(&p, bytes == 0 ? 1 : bytes, /*cudaHostAllocPortable*/ 1) != 0) return nullptr;
    allocs_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    return p;
  }
  void Free(void* ptr, size_t bytes) override {
    free_(ptr);
    frees_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  }
  const char* name() const override { return "cuda-pinned"; }

  // cudaHostAlloc and cudaFreeHost calls so far, and the bytes held: the engine pools
  // pinned blocks, so a steady-state run makes none per batch (tests/gpu checks this).
  int64_t allocs() const { return allocs_.load(std::memory_order_relaxed); }
  int64_t frees() const { return frees_.load(std::memory_order_relaxed); }
  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  HostAllocFn alloc_;
  FreeHostFn free_;
  std::atomic<int64_t> allocs_{0}, frees_{0}, bytes_{0};
};

CudaHostAllocator* LoadPinned() {
  for (const char* lib :
       {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}) {
    void* handle = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);  // never closed: buffers outlive us
    if (handle == nullptr) continue;
    auto alloc = reinterpret_cast<HostAllocFn>(dlsym(handle, "cudaHostAlloc"));
    auto free = reinterpret_cast<FreeHostFn>(dlsym(handle, "cudaFreeHost"));
    auto count = reinterpret_cast<DeviceCountFn>(dlsym(handle, "cudaGetDeviceCount"));
    int devices = 0;
    if (alloc && free && count && count(&devices) == 0 && devices > 0) {
      // Never freed: it must outlive every buffer it allocated.
      return new CudaHostAllocator(alloc, free);
    }
  }
  return nullptr;
}

// The one instance (null without CUDA), typed for its counters.
CudaHostAllocator* Pinned() {
  static CudaHostAllocator* const allocator = LoadPinned();
  return allocator;
}

}  // namespace

Allocator* PinnedAllocator() { return Pinned(); }

void RegisterPinned(nb::module_& m) {
  m.def(
      "_pinned_available", [] { return PinnedAllocator() != nullptr; },
      "Whether batches can be allocated in pinned host memory (a CUDA device is usable).");
  m.def(
      "_pinned_stats",
      [] {
        nb::dict out;
        const CudaHostAllocator* pinned = Pinned();
        out["host_allocs"] = pinned ? pinned->allocs() : 0;
        out["host_frees"] = pinned ? pinned->frees() : 0;
        out["bytes"] = pinned ? pinned->bytes() : 0;
        return out;
      },
      "cudaHostAlloc and cudaFreeHost calls made for batches so far, and the pinned bytes "
      "held (all 0 without CUDA).");
}

}  // namespace headrace::python
