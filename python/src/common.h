// Shared by the binding files: the error channel into Python and the conversions of
// batches and tensors.
//
// Threading: every function here is called with the GIL held unless it says otherwise.
#pragma once

#include <chrono>
#include <nanobind/nanobind.h>

#include <stdexcept>

#include "headrace/core/batch.h"
#include "headrace/core/buffer.h"
#include "headrace/core/status.h"

namespace headrace {
class PreparedPipeline;
}  // namespace headrace

namespace headrace::python {

// How often a call waiting without the GIL (a batch, a doctor run) looks for signals
// (Ctrl-C): well under the ~100 ms a person notices, and rare enough to cost nothing.
inline constexpr std::chrono::milliseconds kSignalPoll{20};

namespace nb = nanobind;

// A non-ok Status on its way to Python. The translator registered by RegisterErrors is
// the one place where statuses become Python exceptions: kInvalidArgument raises
// headrace.ConfigError (a ValueError), kCancelled headrace.CancelledError, every other
// code headrace.Error; the exception's `code` attribute is the snake_case code name.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(Status status);
  const Status& status() const { return status_; }

 private:
  Status status_;
};

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}
template <typename T>
T ValueOrThrow(Result<T> result) {
  ThrowIfError(result.status());
  return std::move(result).value();
}

// A Python object shared by copies of a spec (a user function). Copies of the spec,
// made by the engine without the GIL, copy only the shared_ptr; the last one drops the
// reference with the GIL held (never from a thread that holds it).
struct PyCallable {
  nb::object fn;
  ~PyCallable() {
    if (!Py_IsInitialized()) {
      fn.release();  // the interpreter is gone: nothing to decrement
      return;
    }
    nb::gil_scoped_acquire gil;
    fn.reset();
  }
};

// The numpy module, imported at first use and never released. Call with the GIL held.
// Not a function-local static: its initialization guard would be held across the
// import, which releases the GIL, and an engine thread holding the GIL and waiting on
// the guard would then deadlock with the importing one.
nb::handle Numpy();

// numpy's name of `dtype` ("float32"); null for bf16, which numpy does not have.
const char* NumpyName(DType dtype);

// A writable numpy view of `tensor` (no copy) that keeps its Buffer alive. bf16 is
// viewed as uint16 (its bit patterns). For the batch ops, before a batch is delivered.
nb::object TensorToNumpy(const Tensor& tensor);

// A headrace.Tensor: a zero-copy view of `tensor` implementing __dlpack__, __dlpack_device__ and
// the buffer protocol (by nanobind's nb_ndarray, which it wraps), with `shape`, `dtype` (numpy's
// name, "bfloat16" for bf16), len() and __array__. The view owns a handle of the
// tensor's Buffer, so the memory lives as long as the view or anything made from it (a
// torch tensor, a numpy array) does.
nb::object TensorToPython(const Tensor& tensor);

// (fields: dict[str, tensor view], epoch, index_in_epoch, global_index, errors: list[str],
//  data_ptrs: dict[str, int])
nb::tuple BatchToPython(const Batch& batch);

// The one allocator for pinned host memory, or null where no CUDA runtime is usable.
Allocator* PinnedAllocator();

void RegisterErrors(nb::module_& m);
void RegisterSpec(nb::module_& m);
void RegisterBatch(nb::module_& m);
void RegisterLoader(nb::module_& m);
void RegisterRunRules(nb::module_& m);
void RegisterDoctor(nb::module_& m);
void RegisterFormers(nb::module_& m);
void RegisterUserOps(nb::module_& m);
void RegisterBatchOps(nb::module_& m);
void RegisterPinned(nb::module_& m);
void RegisterTools(nb::module_& m);
void RegisterText(nb::module_& m);
void RegisterRunPosition(nb::module_& m);
void RegisterSizeIndex(nb::module_& m);

// Checks a Loader state dict (`state`) against `prepared`'s sizes (run_position.cc,
// pipeline/run_position.h): headrace.ConfigError naming the key. For _Prepared.check_state.
void CheckStateFor(const PreparedPipeline& prepared, const nb::handle& state);

}  // namespace headrace::python
