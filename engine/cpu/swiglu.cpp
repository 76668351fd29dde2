// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"), Llama's MLP
// activation: out = silu(gate) * up, each row of the input being [gate | up]
// from one fused gate/up matmul. silu(x) = x * sigmoid(x) (Elfwing et al.
// 2018), and silu'(x) = sigmoid(x) * (1 + x * (1 - sigmoid(x))).
#include <cmath>
#include <cstdint>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/dtype_dispatch.h"

namespace engine::cpu {
namespace {

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

}  // namespace

void swiglu_forward(const Tensor& out, const Tensor& inp) {
  expect_dtypes("swiglu_forward", out.dtype(), {&inp});
  dispatch_float(out.dtype(), "swiglu_forward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t F = out.dim(-1), N = out.numel() / F;
    T* o = out.data_as<T>();              // (N, F)
    const T* x = inp.data_as<const T>();  // (N, 2F): [gate | up]
#pragma omp parallel for schedule(static) if (N * F >= kParallelMinElements)
    for (std::int64_t n = 0; n < N; ++n) {
      const T* gate = x + n * 2 * F;  // (F)
      const T* up = gate + F;         // (F)
      for (std::int64_t f = 0; f < F; ++f) o[n * F + f] = gate[f] * sigmoid(gate[f]) * up[f];
    }
  });
}

void swiglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  expect_dtypes("swiglu_backward", dinp.dtype(), {&dout, &inp});
  dispatch_float(dinp.dtype(), "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t F = dout.dim(-1), N = dout.numel() / F;
    T* dx = dinp.data_as<T>();            // (N, 2F): [dgate | dup], written
    const T* g = dout.data_as<const T>(); // (N, F)
    const T* x = inp.data_as<const T>();  // (N, 2F)
#pragma omp parallel for schedule(static) if (N * F >= kParallelMinElements)
    for (std::int64_t n = 0; n < N; ++n) {
      const T* gate = x + n * 2 * F;
      const T* up = gate + F;
      T* dgate = dx + n * 2 * F;
      T* dup = dgate + F;
      for (std::int64_t f = 0; f < F; ++f) {
        const T s = sigmoid(gate[f]), d = g[n * F + f];
        dup[f] = d * gate[f] * s;
        dgate[f] = d * up[f] * s * (T(1) + gate[f] * (T(1) - s));
      }
    }
  });
}

}  // namespace engine::cpu
