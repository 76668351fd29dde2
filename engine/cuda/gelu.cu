// GELU, tanh approximation (Hendrycks & Gimpel 2016), forward and backward.
// The matmul normally fuses these into cuBLASLt's epilogue (matmul.cu); these
// kernels are its fallback and the fp32 mode's exact path.
#include <cstdint>

#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"

namespace engine::cuda {
namespace {

template <typename O, typename I>
__global__ void gelu_forward_kernel(O* out, const I* inp, std::int64_t n) {  // out (n), inp (n)
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    out[i] = from_float<O>(gelu(to_float(inp[i])));
}

// dinp = dout * gelu'(inp). No __restrict__: matmul.cu calls it in place
// (dinp == dout) after an unfused dgrad.
template <typename DI, typename I, typename DO>
__global__ void gelu_backward_kernel(DI* dinp, const I* inp, const DO* dout, std::int64_t n) {  // (n) each
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    dinp[i] = from_float<DI>(to_float(dout[i]) * gelu_grad(to_float(inp[i])));
}

}  // namespace

void gelu_forward(const Tensor& out, const Tensor& inp) {
  expect_cuda(out, "gelu_forward: out");
  expect_cuda(inp, "gelu_forward: inp");
  const std::int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float(out.dtype(), "gelu_forward: out", [&](auto o_tag) {
    dispatch_float(inp.dtype(), "gelu_forward: inp", [&](auto i_tag) {
      using O = decltype(o_tag);
      using I = decltype(i_tag);
      gelu_forward_kernel<<<grid_for(n), kThreads, 0, current_stream()>>>(out.data_as<O>(), inp.data_as<const I>(), n);
      CUDA_CHECK_LAUNCH();
    });
  });
}

void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  expect_cuda(dinp, "gelu_backward: dinp");
  expect_cuda(inp, "gelu_backward: inp");
  expect_cuda(dout, "gelu_backward: dout");
  const std::int64_t n = dinp.numel();
  if (n == 0) return;
  dispatch_float(dinp.dtype(), "gelu_backward: dinp", [&](auto di_tag) {
    dispatch_float(inp.dtype(), "gelu_backward: inp", [&](auto i_tag) {
      dispatch_float(dout.dtype(), "gelu_backward: dout", [&](auto do_tag) {
        using DI = decltype(di_tag);
        using I = decltype(i_tag);
        using DO = decltype(do_tag);
        gelu_backward_kernel<<<grid_for(n), kThreads, 0, current_stream()>>>(
            dinp.data_as<DI>(), inp.data_as<const I>(), dout.data_as<const DO>(), n);
        CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace engine::cuda
