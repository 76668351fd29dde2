// AdamW (Loshchilov & Hutter 2019, Algorithm 2; Adam's bias correction from
// Kingma & Ba 2015, Algorithm 1) over flat parameter ranges:
//   g = grad_scale * grad
//   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
//   p -= lr * ( m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p )
// The arithmetic is done in double whatever the storage (f32 or f64): the
// update is memory-bound, so this costs nothing and makes the f32 path the
// correctly rounded f64 result. Elementwise, hence deterministic.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/cpu/bf16.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/dtype_dispatch.h"

namespace engine::cpu {
namespace {

// Writes the updated parameter into the working copy's dtype.
template <typename W>
W to_working(double p);
template <>
float to_working<float>(double p) { return static_cast<float>(p); }
template <>
double to_working<double>(double p) { return p; }
template <>
bf16_bits to_working<bf16_bits>(double p) { return double_to_bf16(p); }

// W = void means "no working copy".
template <typename T, typename W>
void adamw_impl(T* params, const T* grads, T* m, T* v, W* working, std::int64_t n, const AdamWHyper& hp) {
  // params, grads, m, v, working: (n)
  const double b1 = hp.beta1, b2 = hp.beta2;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(hp.step));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(hp.step));
  const double lr = hp.lr, eps = hp.eps, wd = hp.weight_decay, gs = hp.grad_scale;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = gs * static_cast<double>(grads[i]);
    const double mi = b1 * static_cast<double>(m[i]) + (1.0 - b1) * g;
    const double vi = b2 * static_cast<double>(v[i]) + (1.0 - b2) * g * g;
    const double m_hat = mi / bias1, v_hat = vi / bias2;
    const double p = static_cast<double>(params[i]);
    const double updated = p - lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * p);
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    params[i] = static_cast<T>(updated);
    if constexpr (!std::is_void_v<W>) working[i] = to_working<W>(static_cast<double>(params[i]));
  }
}

}  // namespace

void adamw_update(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                  const AdamWHyper& hyper, const Tensor& working) {
  expect_dtypes("adamw_update", params.dtype(), {&grads, &m, &v});
  dispatch_float(params.dtype(), "adamw_update", [&](auto tag) {
    using T = decltype(tag);
    T* p = params.data_as<T>();
    const T* g = grads.data_as<const T>();
    T* m_ = m.data_as<T>();
    T* v_ = v.data_as<T>();
    const std::int64_t n = params.numel();
    if (working.empty()) return adamw_impl<T, void>(p, g, m_, v_, nullptr, n, hyper);
    switch (working.dtype()) {
      case DType::kF32: return adamw_impl(p, g, m_, v_, working.data_as<float>(), n, hyper);
      case DType::kF64: return adamw_impl(p, g, m_, v_, working.data_as<double>(), n, hyper);
      case DType::kBF16: return adamw_impl(p, g, m_, v_, working.data_as<bf16_bits>(), n, hyper);
      case DType::kI32: break;
    }
    ENGINE_FAIL("adamw_update: working copy ", working.describe(), " must be f32, f64 or bf16");
  });
}

}  // namespace engine::cpu
