// Tensor: a non-owning view of memory (pointer, shape, dtype, device).
//
// Views are cheap to copy and never free anything; memory is owned by
// engine::Buffer or engine::Arena (buffer.h). Shapes are row-major and
// contiguous: the engine has no strides, which keeps every kernel simple.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "engine/check.h"

namespace engine {

enum class DType : std::uint8_t { kF32, kF64, kBF16, kI32 };
enum class DeviceType : std::uint8_t { kCpu, kCuda };

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
const char* device_name(DeviceType device);

// Up to four dims, stored inline (views are created in hot paths).
class Shape {
 public:
  static constexpr int kMaxDims = 4;
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);

  int ndim() const { return ndim_; }
  std::int64_t operator[](int i) const { return dims_[i]; }
  std::int64_t numel() const;
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }
  std::string str() const;  // "(4, 64, 768)"

 private:
  std::array<std::int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, Shape shape, DType dtype, DeviceType device)
      : data_(data), shape_(shape), dtype_(dtype), device_(device) {}

  bool empty() const { return data_ == nullptr; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }

  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  std::int64_t dim(int i) const { return shape_[i < 0 ? shape_.ndim() + i : i]; }
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  DeviceType device() const { return device_; }

  // Same memory, another shape of the same element count.
  Tensor view(Shape shape) const;
  // Elements [offset, offset + count) of the flattened tensor, as a 1-D view.
  Tensor flat_slice(std::int64_t offset, std::int64_t count) const;
  // Rows [first, first + count) along dim 0 (contiguous in row-major order).
  Tensor rows(std::int64_t first, std::int64_t count) const;

  std::string describe() const;  // "f32(4, 64, 768)@cpu"

 private:
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::kF32;
  DeviceType device_ = DeviceType::kCpu;
};

// A view of host memory (the common case in set-up, checkpoints and tests).
inline Tensor host_tensor(void* data, Shape shape, DType dtype) {
  return Tensor(data, shape, dtype, DeviceType::kCpu);
}
// n host floats as a flat f32 tensor (whole-model host copies).
inline Tensor host_f32(float* data, std::int64_t n) { return host_tensor(data, Shape{n}, DType::kF32); }

// Shape checks used by every op; they throw engine::Error naming the tensor.
void expect_shape(const Tensor& t, const Shape& expected, const char* what);
void expect_dtype(const Tensor& t, DType expected, const char* what);
void expect_same_device(const Tensor& a, const Tensor& b, const char* what);

}  // namespace engine
