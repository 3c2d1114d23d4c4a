// Batches and tensors as zero-copy views.
//
// A batch tensor is a `headrace.Tensor`: it wraps a nanobind ndarray (DLPack + buffer
// protocol) whose owner is a capsule holding one handle of the tensor's ref-counted
// Buffer, and adds `shape`, `dtype`, len() and __array__. torch.from_dlpack and
// numpy.asarray keep that owner alive, so the engine's memory is freed only when the
// last view of it goes, whether or not the loader still exists.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <string>
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

// A capsule owning one handle of `buffer`: the owner of every view made here.
nb::capsule BufferOwner(const Buffer& buffer) {
  auto handle = std::make_unique<Buffer>(buffer);
  nb::capsule owner(handle.get(), [](void* p) noexcept { delete static_cast<Buffer*>(p); });
  handle.release();  // the capsule owns it now
  return owner;
}

// What Python sees of a batch tensor. DLPack and the buffer protocol are the wrapped
// nb_ndarray's (`array`); the attributes are computed from the engine's Tensor, so
// none of them touches the data.
struct PyTensor {
  nb::object array;
  std::vector<int64_t> shape;
  DType dtype;
};

// The buffer protocol, forwarded: the exported view's `obj` is the wrapped array, so
// releasing it goes to the array's own releasebuffer.
int PyTensorGetBuffer(PyObject* self, Py_buffer* view, int flags) {
  return PyObject_GetBuffer(nb::inst_ptr<PyTensor>(self)->array.ptr(), view, flags);
}

PyType_Slot g_tensor_slots[] = {{Py_bf_getbuffer, reinterpret_cast<void*>(PyTensorGetBuffer)},
                                {0, nullptr}};

const char* PyDTypeName(DType dtype) {
  const char* name = NumpyName(dtype);
  return name != nullptr ? name : "bfloat16";
}

}  // namespace

nb::handle Numpy() {
  static PyObject* numpy = nullptr;  // constant-initialized (no guard); guarded by the GIL
  if (numpy == nullptr) {
    // A concurrent first call may import too (the GIL is released inside the import):
    // both get the same module, and one reference is kept twice, harmlessly.
    numpy = nb::module_::import_("numpy").release().ptr();
  }
  return numpy;
}

const char* NumpyName(DType dtype) {
  switch (dtype) {
    case DType::kU8: return "uint8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kF16: return "float16";
    case DType::kF32: return "float32";
    case DType::kBF16: break;
  }
  return nullptr;
}

nb::object TensorToNumpy(const Tensor& tensor) {
  std::vector<size_t> shape(tensor.shape().begin(), tensor.shape().end());
  const nb::dlpack::dtype dtype =
      tensor.dtype() == DType::kBF16 ? nb::dtype<uint16_t>() : DLType(tensor.dtype());
  nb::ndarray<nb::numpy> view(tensor.buffer().mutable_data(), shape.size(), shape.data(),
                              BufferOwner(tensor.buffer()), /*strides=*/nullptr, dtype,
                              nb::device::cpu::value);
  return nb::cast(view, nb::rv_policy::reference);
}

nb::object TensorToPython(const Tensor& tensor) {
  std::vector<size_t> shape(tensor.shape().begin(), tensor.shape().end());
  nb::ndarray<nb::array_api> view(tensor.buffer().mutable_data(), shape.size(), shape.data(),
                                  BufferOwner(tensor.buffer()), /*strides=*/nullptr,
                                  DLType(tensor.dtype()), nb::device::cpu::value);
  // `reference`: wrap, never copy (the owner keeps the memory alive).
  return nb::cast(
      PyTensor{nb::cast(view, nb::rv_policy::reference), tensor.shape(), tensor.dtype()});
}

nb::tuple BatchToPython(const Batch& batch) {
  nb::dict fields;
  nb::dict pointers;
  for (const auto& [name, tensor] : batch.fields) {
    fields[name.c_str()] = TensorToPython(tensor);
    pointers[name.c_str()] = reinterpret_cast<uintptr_t>(tensor.buffer().data());
  }
  // Strings (the ids, the source's text fields): a list per batch, of str (None where a
  // record lacks the field) or, for a list field, of lists.
  for (const Batch::Strings& column : batch.strings) {
    nb::list rows;
    for (const std::vector<std::string>& row : column.rows) {
      if (column.list) {
        nb::list items;
        for (const std::string& s : row) items.append(nb::str(s.data(), s.size()));
        rows.append(items);
      } else if (row.empty()) {
        rows.append(nb::none());
      } else {
        rows.append(nb::str(row.front().data(), row.front().size()));
      }
    }
    fields[column.name.c_str()] = rows;
  }
  nb::list errors;
  for (const SampleError& e : batch.errors) errors.append(e.ToString());
  return nb::make_tuple(fields, batch.epoch, batch.index_in_epoch, batch.global_index, errors,
                        pointers);
}

void RegisterBatch(nb::module_& m) {
  nb::class_<PyTensor>(m, "Tensor", nb::type_slots(g_tensor_slots),
                       "A batch tensor: a zero-copy view of the engine's memory "
                       "(__dlpack__, buffer protocol), with shape and dtype.")
      .def("__dlpack__",
           [](const PyTensor& t, nb::args args, nb::kwargs kwargs) {
             return t.array.attr("__dlpack__")(*args, **kwargs);
           })
      .def("__dlpack_device__",
           [](const PyTensor& t) { return t.array.attr("__dlpack_device__")(); })
      .def_prop_ro("shape",
                   [](const PyTensor& t) {
                     nb::list dims;
                     for (int64_t d : t.shape) dims.append(d);
                     return nb::tuple(dims);
                   })
      .def_prop_ro(
          "dtype", [](const PyTensor& t) { return PyDTypeName(t.dtype); },
          "numpy's name of the element type ('float32', ...; 'bfloat16')")
      .def_prop_ro("ndim", [](const PyTensor& t) { return t.shape.size(); })
      .def("__len__",
           [](const PyTensor& t) {
             if (t.shape.empty()) throw nb::type_error("len() of a 0-d tensor");
             return t.shape[0];
           })
      .def(
          "__array__",
          [](const PyTensor& t, nb::object dtype, nb::object copy) {
            // Through the buffer protocol: a view unless a copy or another dtype is asked.
            const nb::handle numpy = Numpy();
            if (copy.is_valid() && !copy.is_none() && nb::cast<bool>(copy)) {
              return numpy.attr("array")(t.array, dtype, nb::arg("copy") = true);
            }
            return numpy.attr("asarray")(t.array, dtype);
          },
          nb::arg("dtype") = nb::none(), nb::arg("copy") = nb::none())
      .def("__repr__", [](const PyTensor& t) {
        std::string dims;
        for (int64_t d : t.shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
        if (t.shape.size() == 1) dims += ",";
        return "headrace.Tensor(shape=(" + dims + "), dtype=" + PyDTypeName(t.dtype) + ")";
      });

  // For tests: a tensor of `n` bytes 0..n-1 made by the engine's allocator, and its address.
  m.def("_test_tensor", [](int64_t n) {
    Tensor t = ValueOrThrow(Tensor::Allocate(DType::kU8, {n}));
    for (int64_t i = 0; i < n; ++i) t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(i);
    return nb::make_tuple(TensorToPython(t), reinterpret_cast<uintptr_t>(t.buffer().data()));
  });
}

}  // namespace headrace::python
