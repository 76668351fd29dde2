// Memory and elementwise ops: fill, copy (with dtype conversion), scale, add,
// accumulate, sum_of_squares.
//
// All loops are `omp parallel for schedule(static)` over elements, so every
// element is computed the same way whatever the thread count. The one
// reduction, sum_of_squares, sums fixed-size chunks and then the chunk sums
// in order, which makes it bitwise reproducible for any thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/cpu/bf16.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/dtype_dispatch.h"

namespace engine::cpu {
namespace {

template <typename T>
void fill_with(T* t, std::int64_t n, T value) {  // t (n)
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) t[i] = value;
}

// dst[i] = convert(src[i]) for i < n.
template <typename Dst, typename Src, typename Convert>
void convert_all(Dst* dst, const Src* src, std::int64_t n, Convert convert) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) dst[i] = convert(src[i]);
}

void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  // One memcpy per thread: large parameter copies are memory-bound and a
  // second core's bandwidth helps.
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  const std::int64_t chunks = static_cast<std::int64_t>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t begin = static_cast<std::size_t>(c) * kChunk;
    const std::size_t count = std::min(kChunk, bytes - begin);
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, count);
  }
}

// Elements per chunk of the sum-of-squares reduction; fixed so the result
// does not depend on the thread count.
constexpr std::int64_t kSumChunk = 1 << 13;

template <typename T, typename ToDouble>
double chunked_sum_of_squares(const T* x, std::int64_t n, ToDouble to_double) {  // x (n)
  const std::int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks));  // (chunks)
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kSumChunk, end = std::min(n, begin + kSumChunk);
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t i = begin; i < end; ++i) {
      const double v = to_double(x[i]);
      sum += v * v;
    }
    partial[static_cast<std::size_t>(c)] = sum;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace

void fill(const Tensor& t, double value) {
  const std::int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kF32: return fill_with(t.data_as<float>(), n, static_cast<float>(value));
    case DType::kF64: return fill_with(t.data_as<double>(), n, value);
    case DType::kBF16: return fill_with(t.data_as<bf16_bits>(), n, double_to_bf16(value));
    case DType::kI32:
      ENGINE_CHECK(value == std::trunc(value) && std::fabs(value) <= 2147483647.0,
                   "fill: value ", value, " is not representable in i32 tensor ", t.describe());
      return fill_with(t.data_as<std::int32_t>(), n, static_cast<std::int32_t>(value));
  }
  ENGINE_FAIL("fill: unsupported dtype of ", t.describe());
}

void copy(const Tensor& dst, const Tensor& src) {
  const std::int64_t n = dst.numel();
  const DType to = dst.dtype(), from = src.dtype();
  if (to == from) return copy_bytes(dst.data(), src.data(), dst.bytes());
  using D = DType;
  if (from == D::kF32 && to == D::kF64)
    return convert_all(dst.data_as<double>(), src.data_as<float>(), n, [](float x) { return double{x}; });
  if (from == D::kF32 && to == D::kBF16)
    return convert_all(dst.data_as<bf16_bits>(), src.data_as<float>(), n, float_to_bf16);
  if (from == D::kF64 && to == D::kF32)
    return convert_all(dst.data_as<float>(), src.data_as<double>(), n,
                       [](double x) { return static_cast<float>(x); });
  if (from == D::kF64 && to == D::kBF16)
    return convert_all(dst.data_as<bf16_bits>(), src.data_as<double>(), n, double_to_bf16);
  if (from == D::kBF16 && to == D::kF32)
    return convert_all(dst.data_as<float>(), src.data_as<bf16_bits>(), n, bf16_to_float);
  if (from == D::kBF16 && to == D::kF64)
    return convert_all(dst.data_as<double>(), src.data_as<bf16_bits>(), n,
                       [](bf16_bits x) { return double{bf16_to_float(x)}; });
  ENGINE_FAIL("copy: cannot convert ", src.describe(), " to ", dst.describe(),
              " (conversions exist between f32, f64 and bf16; i32 copies only to i32)");
}

void scale(const Tensor& t, double factor) {
  dispatch_float(t.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    T* x = t.data_as<T>();  // (n)
    const T f = static_cast<T>(factor);
    const std::int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (std::int64_t i = 0; i < n; ++i) x[i] *= f;
  });
}

void add(const Tensor& out, const Tensor& a, const Tensor& b) {
  expect_dtypes("add", out.dtype(), {&a, &b});
  dispatch_float(out.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    // No __restrict: out may alias a or b, which is safe elementwise.
    T* o = out.data_as<T>();          // (n)
    const T* x = a.data_as<const T>();  // (n)
    const T* y = b.data_as<const T>();  // (n)
    const std::int64_t n = out.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (std::int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  });
}

void accumulate(const Tensor& dst, const Tensor& src) {
  expect_dtypes("accumulate", dst.dtype(), {&src});
  dispatch_float(dst.dtype(), "accumulate", [&](auto tag) {
    using T = decltype(tag);
    T* d = dst.data_as<T>();              // (n)
    const T* s = src.data_as<const T>();  // (n)
    const std::int64_t n = dst.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (std::int64_t i = 0; i < n; ++i) d[i] += s[i];
  });
}

double sum_of_squares(const Tensor& t) {
  const std::int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kF32:
      return chunked_sum_of_squares(t.data_as<const float>(), n, [](float x) { return double{x}; });
    case DType::kF64: return chunked_sum_of_squares(t.data_as<const double>(), n, [](double x) { return x; });
    case DType::kBF16:
      return chunked_sum_of_squares(t.data_as<const bf16_bits>(), n,
                                    [](bf16_bits x) { return double{bf16_to_float(x)}; });
    case DType::kI32: break;
  }
  ENGINE_FAIL("sum_of_squares: expected a floating-point tensor, got ", t.describe());
}

}  // namespace engine::cpu
