// Standalone GELU forward and backward (the formulas live in gelu.h, shared
// with matmul.cpp's fused epilogue and dgrad).
#include <cstdint>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/dtype_dispatch.h"
#include "engine/cpu/gelu.h"

namespace engine::cpu {

void gelu_forward(const Tensor& out, const Tensor& inp) {
  expect_dtypes("gelu_forward", out.dtype(), {&inp});
  dispatch_float(out.dtype(), "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data_as<T>();              // (n)
    const T* x = inp.data_as<const T>();  // (n)
    const std::int64_t n = out.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (std::int64_t i = 0; i < n; ++i) o[i] = gelu(x[i]);
  });
}

void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  expect_dtypes("gelu_backward", dinp.dtype(), {&inp, &dout});
  dispatch_float(dinp.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    T* dx = dinp.data_as<T>();            // (n)
    const T* x = inp.data_as<const T>();  // (n)
    const T* g = dout.data_as<const T>(); // (n)
    const std::int64_t n = dinp.numel();
    // dinp may alias dout (in-place backward), which is safe elementwise.
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (std::int64_t i = 0; i < n; ++i) dx[i] = g[i] * gelu_grad(x[i]);
  });
}

}  // namespace engine::cpu
