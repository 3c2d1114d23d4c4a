#include "headrace/core/tensor.h"

namespace headrace {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF32: return 4;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF32: return "f32";
  }
  return "?";
}

Result<DType> ParseDType(std::string_view name) {
  for (DType d : {DType::kU8, DType::kI32, DType::kI64, DType::kF16, DType::kBF16, DType::kF32}) {
    if (DTypeName(d) == name) return d;
  }
  return Status::InvalidArgument("unknown dtype '" + std::string(name) +
                                 "' (allowed: u8, i32, i64, f16, bf16, f32)");
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape, Buffer buffer)
    : dtype_(dtype), shape_(std::move(shape)), buffer_(std::move(buffer)) {}

Result<Tensor> Tensor::Allocate(DType dtype, std::vector<int64_t> shape, Allocator* allocator) {
  Tensor t(dtype, std::move(shape), Buffer());
  HR_ASSIGN_OR_RETURN(t.buffer_, Buffer::Allocate(t.nbytes(), allocator));
  return t;
}

Result<Tensor> Tensor::Allocate(DType dtype, std::vector<int64_t> shape,
                                std::shared_ptr<Allocator> allocator) {
  Tensor t(dtype, std::move(shape), Buffer());
  HR_ASSIGN_OR_RETURN(t.buffer_, Buffer::Allocate(t.nbytes(), std::move(allocator)));
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

std::string Tensor::ToString() const {
  std::string out(DTypeName(dtype_));
  out += "[";
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape_[i]);
  }
  return out + "]";
}

}  // namespace headrace
