// RMSNorm (Zhang & Sennrich 2019) over the last dim, as Llama and Qwen2 use
// it: out = inp * rstd * weight with rstd = 1 / sqrt(mean(inp^2) + eps), no
// mean subtracted, no bias. The sum of squares is accumulated in double, as
// layernorm.cpp's statistics are.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/dtype_dispatch.h"

namespace engine::cpu {
namespace {

// Channels per task of the weight gradient reduction.
constexpr std::int64_t kChannelBlock = 64;

template <typename T>
void rmsnorm_forward_impl(const Tensor& out_t, const Tensor& rstd_t, const Tensor& inp_t, const Tensor& weight_t,
                          double eps) {
  const std::int64_t C = inp_t.dim(-1), N = inp_t.numel() / C;
  T* out = out_t.data_as<T>();                   // (N, C)
  T* rstd = rstd_t.data_as<T>();                 // (N)
  const T* inp = inp_t.data_as<const T>();       // (N, C)
  const T* weight = weight_t.data_as<const T>(); // (C)
#pragma omp parallel for schedule(static) if (N * C >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;  // (C)
    T* o = out + n * C;        // (C)
    double sq = 0.0;
#pragma omp simd reduction(+ : sq)
    for (std::int64_t c = 0; c < C; ++c) sq += static_cast<double>(x[c]) * x[c];
    const T s = static_cast<T>(1.0 / std::sqrt(sq / static_cast<double>(C) + eps));
    // (x * rstd) * weight, in Hugging Face's order of rounding.
    for (std::int64_t c = 0; c < C; ++c) o[c] = (x[c] * s) * weight[c];
    rstd[n] = s;
  }
}

// With norm = x * rstd and g = weight * dout:
//   dinp += rstd * (g - norm * mean_c(g * norm))
//   dweight += sum_n dout * norm
template <typename T>
void rmsnorm_backward_impl(const Tensor& dinp_t, const Tensor& dweight_t, const Tensor& dout_t,
                           const Tensor& inp_t, const Tensor& weight_t, const Tensor& rstd_t) {
  const std::int64_t C = inp_t.dim(-1), N = inp_t.numel() / C;
  T* dinp = dinp_t.data_as<T>();                 // (N, C), accumulated
  T* dweight = dweight_t.data_as<T>();           // (C), accumulated
  const T* dout = dout_t.data_as<const T>();     // (N, C)
  const T* inp = inp_t.data_as<const T>();       // (N, C)
  const T* weight = weight_t.data_as<const T>(); // (C)
  const T* rstd = rstd_t.data_as<const T>();     // (N)
  const bool parallel = N * C >= kParallelMinElements;

#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;   // (C)
    const T* g = dout + n * C;  // (C)
    T* dx = dinp + n * C;       // (C)
    const T s = rstd[n];
    double g_norm_sum = 0.0;
#pragma omp simd reduction(+ : g_norm_sum)
    for (std::int64_t c = 0; c < C; ++c) g_norm_sum += static_cast<double>(weight[c] * g[c]) * (x[c] * s);
    const T g_norm_mean = static_cast<T>(g_norm_sum / static_cast<double>(C));
    for (std::int64_t c = 0; c < C; ++c) dx[c] += s * (weight[c] * g[c] - (x[c] * s) * g_norm_mean);
  }

  // Each task owns a block of channels and sums the rows in order:
  // deterministic for any thread count (as layernorm.cpp).
  const std::int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t c0 = blk * kChannelBlock, width = std::min(C, c0 + kChannelBlock) - c0;
    double w_acc[kChannelBlock] = {};
    for (std::int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C + c0;   // (width)
      const T* g = dout + n * C + c0;  // (width)
      const T s = rstd[n];
#pragma omp simd
      for (std::int64_t c = 0; c < width; ++c) w_acc[c] += g[c] * (x[c] * s);
    }
    for (std::int64_t c = 0; c < width; ++c) dweight[c0 + c] += static_cast<T>(w_acc[c]);
  }
}

}  // namespace

void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, double eps,
                     const Tensor& out_amax) {
  expect_dtypes("rmsnorm_forward", inp.dtype(), {&out, &rstd, &weight});
  dispatch_float(inp.dtype(), "rmsnorm_forward", [&](auto tag) {
    rmsnorm_forward_impl<decltype(tag)>(out, rstd, inp, weight, eps);
  });
  write_amax(out_amax, out, "rmsnorm_forward: out");  // as layernorm_forward's
}

void rmsnorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd) {
  expect_dtypes("rmsnorm_backward", inp.dtype(), {&dinp, &dweight, &dout, &weight, &rstd});
  dispatch_float(inp.dtype(), "rmsnorm_backward", [&](auto tag) {
    rmsnorm_backward_impl<decltype(tag)>(dinp, dweight, dout, inp, weight, rstd);
  });
}

}  // namespace engine::cpu
