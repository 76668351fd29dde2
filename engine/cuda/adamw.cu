// Fused AdamW (Loshchilov & Hutter 2019, Algorithm 2; bias correction from
// Kingma & Ba 2015) over flat f32 ranges, one pass:
//   g = grad_scale * grad
//   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
//   p -= lr * ( m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p )
// and, when given, the working copy (bf16 or f32) receives the new p.
//
// Like the CPU backend, the arithmetic is done in double and stored as f32:
// the update is memory-bound (16 bytes read, 12-14 written per element), so
// fp64 costs nothing measurable on a data-centre GPU and the two backends
// agree to the last f32 bit (up to libm-vs-CUDA sqrt, both correctly rounded).
#include <cmath>
#include <cstdint>

#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"

namespace engine::cuda {
namespace {

struct AdamWArgs {
  double lr, beta1, beta2, eps, weight_decay, grad_scale;
  double bias1, bias2;  // 1 - beta^step
};

template <typename W>
__global__ void adamw_kernel(float* __restrict__ params, const float* __restrict__ grads, float* __restrict__ m,
                             float* __restrict__ v, W* __restrict__ working, std::int64_t n, AdamWArgs a) {
  // params, grads, m, v, working: (n); working may be null
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const double g = a.grad_scale * static_cast<double>(grads[i]);
    const double mi = a.beta1 * static_cast<double>(m[i]) + (1.0 - a.beta1) * g;
    const double vi = a.beta2 * static_cast<double>(v[i]) + (1.0 - a.beta2) * g * g;
    const double m_hat = mi / a.bias1, v_hat = vi / a.bias2;
    const double p = static_cast<double>(params[i]);
    const float updated = static_cast<float>(p - a.lr * (m_hat / (sqrt(v_hat) + a.eps) + a.weight_decay * p));
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    params[i] = updated;
    if (working != nullptr) working[i] = from_float<W>(updated);
  }
}

}  // namespace

void adamw_update(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                  const AdamWHyper& hyper, const Tensor& working) {
  for (const Tensor* t : {&params, &grads, &m, &v}) {
    expect_cuda(*t, "adamw_update: params/grads/m/v");
    expect_f32(*t, "adamw_update: params/grads/m/v (master weights and optimizer state are f32)");
  }
  const std::int64_t n = params.numel();
  AdamWArgs a{};
  a.lr = hyper.lr, a.beta1 = hyper.beta1, a.beta2 = hyper.beta2, a.eps = hyper.eps;
  a.weight_decay = hyper.weight_decay, a.grad_scale = hyper.grad_scale;
  a.bias1 = 1.0 - std::pow(hyper.beta1, static_cast<double>(hyper.step));
  a.bias2 = 1.0 - std::pow(hyper.beta2, static_cast<double>(hyper.step));
  // A null working pointer is passed with the f32 instantiation.
  const DType working_dtype = working.empty() ? DType::kF32 : working.dtype();
  if (!working.empty()) expect_cuda(working, "adamw_update: working");
  dispatch_float(working_dtype, "adamw_update: working", [&](auto tag) {
    using W = decltype(tag);
    adamw_kernel<<<grid_for(n, kThreads, 65536), kThreads, 0, current_stream()>>>(
        params.data_as<float>(), grads.data_as<const float>(), m.data_as<float>(), v.data_as<float>(),
        working.empty() ? nullptr : working.data_as<W>(), n, a);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace engine::cuda
