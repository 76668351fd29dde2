// Linear layer: out = inp @ weight^T + bias, with GELU optionally fused into
// the forward epilogue and GELU's backward fused into the input gradient
// (llm.c's matmul_forward/_backward, with the GEMMs done by BLAS).
#include <algorithm>
#include <cstdint>

#include "engine/cpu/blas.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/dtype_dispatch.h"
#include "engine/cpu/gelu.h"

namespace engine::cpu {
namespace {

// Output channels per task of the bias-gradient reduction.
constexpr std::int64_t kChannelBlock = 64;

template <typename T>
void matmul_forward_impl(const Tensor& out_t, const Tensor& inp_t, const Tensor& weight_t, const Tensor& bias_t,
                         const Tensor& pre_gelu_t) {
  const std::int64_t OC = weight_t.dim(0), C = weight_t.dim(1), N = inp_t.numel() / C;
  T* out = out_t.data_as<T>();                                         // (N, OC)
  const T* inp = inp_t.data_as<const T>();                             // (N, C)
  const T* weight = weight_t.data_as<const T>();                       // (OC, C)
  const T* bias = bias_t.empty() ? nullptr : bias_t.data_as<const T>();  // (OC) or none
  T* pre = pre_gelu_t.empty() ? nullptr : pre_gelu_t.data_as<T>();     // (N, OC) or none

  // The GEMM writes where the pre-activation belongs; the epilogue adds the
  // bias there and, with GELU, writes gelu(pre) to out in the same pass.
  T* gemm_out = pre ? pre : out;  // (N, OC)
  gemm(Trans::kNo, Trans::kYes, N, OC, C, T(1), inp, C, weight, C, T(0), gemm_out, OC);
  if (!bias && !pre) return;

#pragma omp parallel for schedule(static) if (N * OC >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    T* row = gemm_out + n * OC;  // (OC)
    if (bias)
      for (std::int64_t o = 0; o < OC; ++o) row[o] += bias[o];
    if (pre) {
      T* out_row = out + n * OC;  // (OC)
      for (std::int64_t o = 0; o < OC; ++o) out_row[o] = gelu(row[o]);
    }
  }
}

template <typename T>
void matmul_backward_impl(const Tensor& dinp_t, const Tensor& dweight_t, const Tensor& dbias_t,
                          const Tensor& dout_t, const Tensor& inp_t, const Tensor& weight_t,
                          const Tensor& gelu_pre_t) {
  const std::int64_t OC = weight_t.dim(0), C = weight_t.dim(1), N = dout_t.numel() / OC;
  const T* dout = dout_t.data_as<const T>();      // (N, OC)
  const T* inp = inp_t.data_as<const T>();        // (N, C)
  const T* weight = weight_t.data_as<const T>();  // (OC, C)

  if (!dinp_t.empty()) {
    T* dinp = dinp_t.data_as<T>();  // (N, C)
    gemm(Trans::kNo, Trans::kNo, N, C, OC, T(1), dout, OC, weight, C, T(0), dinp, C);
    if (!gelu_pre_t.empty()) {
      const T* pre = gelu_pre_t.data_as<const T>();  // (N, C)
      const std::int64_t n_elem = N * C;
#pragma omp parallel for schedule(static) if (n_elem >= kParallelMinElements)
      for (std::int64_t i = 0; i < n_elem; ++i) dinp[i] *= gelu_grad(pre[i]);
    }
  }

  if (!dweight_t.empty()) {
    T* dweight = dweight_t.data_as<T>();  // (OC, C), accumulated: beta = 1
    gemm(Trans::kYes, Trans::kNo, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  }

  if (!dbias_t.empty()) {
    T* dbias = dbias_t.data_as<T>();  // (OC), accumulated
    // Column sums of dout: each task owns a block of output channels and adds
    // the rows in order (deterministic for any thread count), in double.
    const std::int64_t blocks = (OC + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (N * OC >= kParallelMinElements)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      const std::int64_t o0 = blk * kChannelBlock, width = std::min(OC, o0 + kChannelBlock) - o0;
      double acc[kChannelBlock] = {};
      for (std::int64_t n = 0; n < N; ++n) {
        const T* g = dout + n * OC + o0;  // (width)
#pragma omp simd
        for (std::int64_t o = 0; o < width; ++o) acc[o] += g[o];
      }
      for (std::int64_t o = 0; o < width; ++o) dbias[o0 + o] += static_cast<T>(acc[o]);
    }
  }
}

}  // namespace

void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    const Tensor& pre_gelu) {
  expect_dtypes("matmul_forward", out.dtype(), {&inp, &weight, &bias, &pre_gelu});
  dispatch_float(out.dtype(), "matmul_forward", [&](auto tag) {
    matmul_forward_impl<decltype(tag)>(out, inp, weight, bias, pre_gelu);
  });
}

void matmul_forward_add(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                        const Tensor& residual) {
  // The branch, then residual + branch: the same roundings, in the same
  // order, as a matmul_forward followed by add(out, residual, branch).
  matmul_forward(out, inp, weight, bias, Tensor{});
  add(out, residual, out);
}

void matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, const Tensor& gelu_pre) {
  expect_dtypes("matmul_backward", dout.dtype(), {&dinp, &dweight, &dbias, &inp, &weight, &gelu_pre});
  dispatch_float(dout.dtype(), "matmul_backward", [&](auto tag) {
    matmul_backward_impl<decltype(tag)>(dinp, dweight, dbias, dout, inp, weight, gelu_pre);
  });
}

}  // namespace engine::cpu
