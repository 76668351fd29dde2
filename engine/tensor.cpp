#include "engine/tensor.h"

#include <sstream>

namespace engine {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
  }
  ENGINE_FAIL("unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
  }
  return "?";
}

const char* device_name(DeviceType device) { return device == DeviceType::kCpu ? "cpu" : "cuda"; }

Shape::Shape(std::initializer_list<std::int64_t> dims) {
  ENGINE_CHECK(dims.size() <= kMaxDims, "a shape has at most ", kMaxDims, " dims, got ", dims.size());
  for (std::int64_t d : dims) {
    ENGINE_CHECK(d >= 0, "shape dims must be non-negative, got ", d);
    dims_[ndim_++] = d;
  }
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (ndim_ != other.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != other.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream out;
  out << "(";
  for (int i = 0; i < ndim_; ++i) out << (i ? ", " : "") << dims_[i];
  out << ")";
  return out.str();
}

Tensor Tensor::view(Shape shape) const {
  ENGINE_CHECK(shape.numel() == numel(), "cannot view ", describe(), " as ", shape.str(),
               ": element counts differ");
  return Tensor(data_, shape, dtype_, device_);
}

Tensor Tensor::flat_slice(std::int64_t offset, std::int64_t count) const {
  ENGINE_CHECK(offset >= 0 && count >= 0 && offset + count <= numel(), "flat slice [", offset, ", ",
               offset + count, ") is outside ", describe());
  char* base = static_cast<char*>(data_) + offset * static_cast<std::int64_t>(dtype_size(dtype_));
  return Tensor(base, Shape{count}, dtype_, device_);
}

Tensor Tensor::rows(std::int64_t first, std::int64_t count) const {
  ENGINE_CHECK(ndim() >= 1 && first >= 0 && count >= 0 && first + count <= dim(0), "rows [", first,
               ", ", first + count, ") are outside ", describe());
  const std::int64_t row = numel() / (dim(0) == 0 ? 1 : dim(0));
  Shape shape;
  switch (ndim()) {
    case 1: shape = Shape{count}; break;
    case 2: shape = Shape{count, dim(1)}; break;
    case 3: shape = Shape{count, dim(1), dim(2)}; break;
    default: shape = Shape{count, dim(1), dim(2), dim(3)}; break;
  }
  char* base = static_cast<char*>(data_) + first * row * static_cast<std::int64_t>(dtype_size(dtype_));
  return Tensor(base, shape, dtype_, device_);
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype_)) + shape_.str() + "@" + device_name(device_);
}

void expect_shape(const Tensor& t, const Shape& expected, const char* what) {
  ENGINE_CHECK(t.shape() == expected, what, " has shape ", t.shape().str(), ", expected ",
               expected.str());
}

void expect_dtype(const Tensor& t, DType expected, const char* what) {
  ENGINE_CHECK(t.dtype() == expected, what, " has dtype ", dtype_name(t.dtype()), ", expected ",
               dtype_name(expected));
}

void expect_same_device(const Tensor& a, const Tensor& b, const char* what) {
  ENGINE_CHECK(a.device() == b.device(), what, ": tensors on different devices (", a.describe(),
               " vs ", b.describe(), ")");
}

}  // namespace engine
