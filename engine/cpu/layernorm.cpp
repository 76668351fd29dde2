// Layer normalisation (Ba, Kiros & Hinton 2016) over the last dim, biased
// variance plus eps (GPT-2's 1e-5, or a config.json's layer_norm_epsilon). Forward and backward follow llm.c's
// layernorm_forward/_backward; statistics are accumulated in double so the
// f32 path loses nothing to long rows.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/dtype_dispatch.h"

namespace engine::cpu {
namespace {

// Channels per task of the weight/bias gradient reduction.
constexpr std::int64_t kChannelBlock = 64;

template <typename T>
void layernorm_forward_impl(const Tensor& out_t, const Tensor& mean_t, const Tensor& rstd_t, const Tensor& inp_t,
                            const Tensor& weight_t, const Tensor& bias_t, double eps) {
  const std::int64_t C = inp_t.dim(-1), N = inp_t.numel() / C;
  T* out = out_t.data_as<T>();                   // (N, C)
  T* mean = mean_t.data_as<T>();                 // (N)
  T* rstd = rstd_t.data_as<T>();                 // (N)
  const T* inp = inp_t.data_as<const T>();       // (N, C)
  const T* weight = weight_t.data_as<const T>(); // (C)
  const T* bias = bias_t.data_as<const T>();     // (C)
#pragma omp parallel for schedule(static) if (N * C >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;  // (C)
    T* o = out + n * C;        // (C)
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t c = 0; c < C; ++c) sum += x[c];
    const double m = sum / static_cast<double>(C);
    double sq = 0.0;  // two-pass variance: no cancellation when |mean| >> std
#pragma omp simd reduction(+ : sq)
    for (std::int64_t c = 0; c < C; ++c) {
      const double d = x[c] - m;
      sq += d * d;
    }
    const double s = 1.0 / std::sqrt(sq / static_cast<double>(C) + eps);
    const T m_t = static_cast<T>(m), s_t = static_cast<T>(s);
    for (std::int64_t c = 0; c < C; ++c) o[c] = (x[c] - m_t) * s_t * weight[c] + bias[c];
    mean[n] = m_t;
    rstd[n] = s_t;
  }
}

// With norm = (x - mean) * rstd and g = weight * dout (per llm.c):
//   dinp += rstd * (g - mean_c(g) - norm * mean_c(g * norm))
//   dweight += sum_n dout * norm,  dbias += sum_n dout
template <typename T>
void layernorm_backward_impl(const Tensor& dinp_t, const Tensor& dweight_t, const Tensor& dbias_t,
                             const Tensor& dout_t, const Tensor& inp_t, const Tensor& weight_t,
                             const Tensor& mean_t, const Tensor& rstd_t) {
  const std::int64_t C = inp_t.dim(-1), N = inp_t.numel() / C;
  T* dinp = dinp_t.data_as<T>();                 // (N, C), accumulated
  T* dweight = dweight_t.data_as<T>();           // (C), accumulated
  T* dbias = dbias_t.data_as<T>();               // (C), accumulated
  const T* dout = dout_t.data_as<const T>();     // (N, C)
  const T* inp = inp_t.data_as<const T>();       // (N, C)
  const T* weight = weight_t.data_as<const T>(); // (C)
  const T* mean = mean_t.data_as<const T>();     // (N)
  const T* rstd = rstd_t.data_as<const T>();     // (N)
  const bool parallel = N * C >= kParallelMinElements;

  // Input gradient: rows are independent.
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;   // (C)
    const T* g = dout + n * C;  // (C)
    T* dx = dinp + n * C;       // (C)
    const T m = mean[n], s = rstd[n];
    double g_sum = 0.0, g_norm_sum = 0.0;
#pragma omp simd reduction(+ : g_sum, g_norm_sum)
    for (std::int64_t c = 0; c < C; ++c) {
      const T wg = weight[c] * g[c];
      g_sum += wg;
      g_norm_sum += wg * ((x[c] - m) * s);
    }
    const T g_mean = static_cast<T>(g_sum / static_cast<double>(C));
    const T g_norm_mean = static_cast<T>(g_norm_sum / static_cast<double>(C));
    for (std::int64_t c = 0; c < C; ++c) {
      const T norm = (x[c] - m) * s;
      dx[c] += s * (weight[c] * g[c] - g_mean - norm * g_norm_mean);
    }
  }

  // Parameter gradients reduce over all N rows. Each task owns a block of
  // channels and sums the rows in order: deterministic for any thread count,
  // no atomics, and partial sums in double.
  const std::int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t c0 = blk * kChannelBlock, width = std::min(C, c0 + kChannelBlock) - c0;
    double w_acc[kChannelBlock] = {}, b_acc[kChannelBlock] = {};
    for (std::int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C + c0;   // (width)
      const T* g = dout + n * C + c0;  // (width)
      const T m = mean[n], s = rstd[n];
#pragma omp simd
      for (std::int64_t c = 0; c < width; ++c) {
        w_acc[c] += g[c] * ((x[c] - m) * s);
        b_acc[c] += g[c];
      }
    }
    for (std::int64_t c = 0; c < width; ++c) {
      dweight[c0 + c] += static_cast<T>(w_acc[c]);
      dbias[c0 + c] += static_cast<T>(b_acc[c]);
    }
  }
}

}  // namespace

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, double eps, const Tensor& out_amax) {
  expect_dtypes("layernorm_forward", inp.dtype(), {&out, &mean, &rstd, &weight, &bias});
  dispatch_float(inp.dtype(), "layernorm_forward", [&](auto tag) {
    layernorm_forward_impl<decltype(tag)>(out, mean, rstd, inp, weight, bias, eps);
  });
  // A pass of its own here: the CPU is the reference, CUDA fuses it into the rows' loop.
  write_amax(out_amax, out, "layernorm_forward: out");
}

void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  expect_dtypes("layernorm_backward", inp.dtype(), {&dinp, &dweight, &dbias, &dout, &weight, &mean, &rstd});
  dispatch_float(inp.dtype(), "layernorm_backward", [&](auto tag) {
    layernorm_backward_impl<decltype(tag)>(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  });
}

}  // namespace engine::cpu
