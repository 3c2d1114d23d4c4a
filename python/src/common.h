// Shared by the binding files: the error channel into Python and the conversions of
// batches and tensors.
//
// Threading: every function here is called with the GIL held unless it says otherwise.
#pragma once

#include <nanobind/nanobind.h>

#include <stdexcept>

#include "headrace/core/batch.h"
#include "headrace/core/buffer.h"
#include "headrace/core/status.h"

namespace headrace::python {

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

// A zero-copy view of `tensor` implementing __dlpack__, __dlpack_device__ and the buffer
// protocol (nanobind's nb_ndarray). The view owns a handle of the tensor's Buffer, so
// the memory lives as long as the view or anything made from it (a torch tensor, a
// numpy array) does.
nb::object TensorToPython(const Tensor& tensor);

// (fields: dict[str, tensor view], epoch, index_in_epoch, global_index, errors: list[str])
nb::tuple BatchToPython(const Batch& batch);

// The one allocator for pinned host memory, or null where no CUDA runtime is usable.
Allocator* PinnedAllocator();

void RegisterErrors(nb::module_& m);
void RegisterSpec(nb::module_& m);
void RegisterBatch(nb::module_& m);
void RegisterLoader(nb::module_& m);
void RegisterUserOps(nb::module_& m);
void RegisterPinned(nb::module_& m);
void RegisterTools(nb::module_& m);

}  // namespace headrace::python
