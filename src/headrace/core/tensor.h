// Tensor: a dtype, a shape and a Buffer holding the elements densely, row-major.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/buffer.h"

namespace headrace {

// Element types of batch tensors.
enum class DType {
  kU8,    // uint8: raw pixels
  kI32,   // int32
  kI64,   // int64: token ids, masks, labels, indices (what PyTorch expects)
  kF16,   // IEEE half
  kBF16,  // bfloat16: top 16 bits of an f32
  kF32,   // float
};

size_t DTypeSize(DType dtype);
std::string_view DTypeName(DType dtype);  // "u8", "i32", "i64", "f16", "bf16", "f32"
// Parses a name from DTypeName.
Result<DType> ParseDType(std::string_view name);

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> shape, Buffer buffer);

  // Allocates an uninitialized tensor.
  static Result<Tensor> Allocate(DType dtype, std::vector<int64_t> shape,
                                 Allocator* allocator = DefaultAllocator());
  // From an allocator the tensor's buffer keeps alive (see Buffer::Allocate).
  static Result<Tensor> Allocate(DType dtype, std::vector<int64_t> shape,
                                 std::shared_ptr<Allocator> allocator);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  const Buffer& buffer() const { return buffer_; }

  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(buffer_.data());
  }
  template <typename T>
  T* mutable_data() const {
    return reinterpret_cast<T*>(buffer_.mutable_data());
  }

  // "f32[32, 3, 224, 224]"
  std::string ToString() const;

 private:
  DType dtype_ = DType::kU8;
  std::vector<int64_t> shape_;
  Buffer buffer_;
};

}  // namespace headrace
