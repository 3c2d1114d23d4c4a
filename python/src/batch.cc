// Batches and tensors as zero-copy views.
//
// A tensor view is a nanobind ndarray (DLPack + buffer protocol) whose owner is a
// capsule holding one handle of the tensor's ref-counted Buffer: torch.from_dlpack and
// numpy.asarray keep that owner alive, so the engine's memory is freed only when the
// last view of it goes, whether or not the loader still exists.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <vector>

#include "common.h"

namespace headrace::python {
namespace {

nb::dlpack::dtype DLType(DType dtype) {
  using Code = nb::dlpack::dtype_code;
  const auto make = [](Code code, int bits) {
    return nb::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  };
  switch (dtype) {
    case DType::kU8: return make(Code::UInt, 8);
    case DType::kI32: return make(Code::Int, 32);
    case DType::kI64: return make(Code::Int, 64);
    case DType::kF16: return make(Code::Float, 16);
    case DType::kBF16: return make(Code::Bfloat, 16);
    case DType::kF32: return make(Code::Float, 32);
  }
  return make(Code::UInt, 8);
}

}  // namespace

nb::object TensorToPython(const Tensor& tensor) {
  auto handle = std::make_unique<Buffer>(tensor.buffer());
  nb::capsule owner(handle.get(), [](void* p) noexcept { delete static_cast<Buffer*>(p); });
  handle.release();  // the capsule owns it now
  std::vector<size_t> shape(tensor.shape().begin(), tensor.shape().end());
  nb::ndarray<nb::array_api> view(const_cast<uint8_t*>(tensor.buffer().data()), shape.size(),
                                 shape.data(),
                     owner, /*strides=*/nullptr, DLType(tensor.dtype()), nb::device::cpu::value);
  // `reference`: wrap, never copy (the owner keeps the memory alive).
  return nb::cast(view, nb::rv_policy::reference);
}

nb::tuple BatchToPython(const Batch& batch) {
  nb::dict fields;
  nb::dict pointers;
  for (const auto& [name, tensor] : batch.fields) {
    fields[name.c_str()] = TensorToPython(tensor);
    pointers[name.c_str()] = reinterpret_cast<uintptr_t>(tensor.buffer().data());
  }
  nb::list errors;
  for (const SampleError& e : batch.errors) errors.append(e.ToString());
  return nb::make_tuple(fields, batch.epoch, batch.index_in_epoch, batch.global_index, errors,
                        pointers);
}

void RegisterBatch(nb::module_& m) {
  // For tests: a tensor of `n` bytes 0..n-1 made by the engine's allocator, and its address.
  m.def("_test_tensor", [](int64_t n) {
    Tensor t = ValueOrThrow(Tensor::Allocate(DType::kU8, {n}));
    for (int64_t i = 0; i < n; ++i) t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(i);
    return nb::make_tuple(TensorToPython(t), reinterpret_cast<uintptr_t>(t.buffer().data()));
  });
}

}  // namespace headrace::python
