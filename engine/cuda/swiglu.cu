// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"), Llama's MLP
// activation, forward and backward:
//   out (N, F)  = silu(gate) * up,   inp (N, 2F) rows [gate | up]
//   dinp (N, 2F) written: [dout * up * silu'(gate) | dout * silu(gate)]
// with silu(x) = x sigmoid(x) (Elfwing et al. 2018) and
// silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))), as the CPU backend computes.
// Elementwise and memory-bound: when every operand has one dtype, F is a whole
// number of 16-byte packs and the pointers are 16-byte aligned, each thread
// moves one pack of gate, up and out (or dinp) with 16-byte accesses; every
// other case (mixed dtypes, odd F) runs the scalar kernels.
#include <cstdint>
#include <initializer_list>

#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"

namespace engine::cuda {
namespace {

// sigmoid(x) = 1 / (1 + exp(-x)); exp overflow for x < -88 gives 1/inf = 0,
// the right limit, so a saturated gate gives silu = -0, never NaN.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Element (n, f) of the output: gate and up from row n of inp.
template <typename O, typename I>
__global__ void swiglu_forward_kernel(O* __restrict__ out, const I* __restrict__ inp, std::int64_t N,
                                      std::int64_t F) {
  // out (N, F), inp (N, 2F)
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < N * F;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t n = i / F, f = i % F;
    const float g = to_float(inp[n * 2 * F + f]), u = to_float(inp[n * 2 * F + F + f]);
    out[i] = from_float<O>(g * sigmoid(g) * u);
  }
}

template <typename DI, typename DO, typename I>
__global__ void swiglu_backward_kernel(DI* __restrict__ dinp, const DO* __restrict__ dout, const I* __restrict__ inp,
                                       std::int64_t N, std::int64_t F) {
  // dinp (N, 2F) written, dout (N, F), inp (N, 2F)
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < N * F;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t n = i / F, f = i % F;
    const float g = to_float(inp[n * 2 * F + f]), u = to_float(inp[n * 2 * F + F + f]), d = to_float(dout[i]);
    const float s = sigmoid(g);
    dinp[n * 2 * F + f] = from_float<DI>(d * u * s * (1.0f + g * (1.0f - s)));
    dinp[n * 2 * F + F + f] = from_float<DI>(d * g * s);
  }
}

// ---- 16-byte packs: element pack p of the output is (n, V f') ------------------

template <typename T>
__global__ void swiglu_forward_vec_kernel(T* __restrict__ out, const T* __restrict__ inp, std::int64_t N,
                                          std::int64_t F) {
  // out (N, F), inp (N, 2F); F % V == 0
  constexpr int V = Pack16<T>::kSize;
  const std::int64_t packs_per_row = F / V;
  for (std::int64_t p = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; p < N * packs_per_row;
       p += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t n = p / packs_per_row, f = (p % packs_per_row) * V;
    const Pack16<T> g = load16(inp + n * 2 * F + f), u = load16(inp + n * 2 * F + F + f);
    Pack16<T> o;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float gk = to_float(g.v[k]);
      o.v[k] = from_float<T>(gk * sigmoid(gk) * to_float(u.v[k]));
    }
    store16(out + n * F + f, o);
  }
}

template <typename T>
__global__ void swiglu_backward_vec_kernel(T* __restrict__ dinp, const T* __restrict__ dout, const T* __restrict__ inp,
                                           std::int64_t N, std::int64_t F) {
  // dinp (N, 2F) written, dout (N, F), inp (N, 2F); F % V == 0
  constexpr int V = Pack16<T>::kSize;
  const std::int64_t packs_per_row = F / V;
  for (std::int64_t p = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; p < N * packs_per_row;
       p += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t n = p / packs_per_row, f = (p % packs_per_row) * V;
    const Pack16<T> g = load16(inp + n * 2 * F + f), u = load16(inp + n * 2 * F + F + f), d = load16(dout + n * F + f);
    Pack16<T> dg, du;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float gk = to_float(g.v[k]), dk = to_float(d.v[k]), s = sigmoid(gk);
      dg.v[k] = from_float<T>(dk * to_float(u.v[k]) * s * (1.0f + gk * (1.0f - s)));
      du.v[k] = from_float<T>(dk * gk * s);
    }
    store16(dinp + n * 2 * F + f, dg);
    store16(dinp + n * 2 * F + F + f, du);
  }
}

// Every tensor of `dtype`, 16-byte aligned, and F a whole number of packs.
bool vectorisable(std::int64_t F, DType dtype, std::initializer_list<const Tensor*> tensors) {
  if (F % pack16_elements(dtype) != 0) return false;
  for (const Tensor* t : tensors)
    if (t->dtype() != dtype || !aligned(t->data(), 16)) return false;
  return true;
}

}  // namespace

void swiglu_forward(const Tensor& out, const Tensor& inp) {
  expect_cuda(out, "swiglu_forward: out");
  expect_cuda(inp, "swiglu_forward: inp");
  const std::int64_t F = out.dim(-1), N = out.numel() / F;
  if (N * F == 0) return;
  cudaStream_t stream = current_stream();
  if (vectorisable(F, out.dtype(), {&out, &inp})) {
    dispatch_float(out.dtype(), "swiglu_forward: out", [&](auto tag) {
      using T = decltype(tag);
      swiglu_forward_vec_kernel<<<grid_for(N * F / Pack16<T>::kSize), kThreads, 0, stream>>>(
          out.data_as<T>(), inp.data_as<const T>(), N, F);
      CUDA_CHECK_LAUNCH();
    });
    return;
  }
  dispatch_float(out.dtype(), "swiglu_forward: out", [&](auto o_tag) {
    dispatch_float(inp.dtype(), "swiglu_forward: inp", [&](auto i_tag) {
      using O = decltype(o_tag);
      using I = decltype(i_tag);
      swiglu_forward_kernel<<<grid_for(N * F), kThreads, 0, stream>>>(out.data_as<O>(), inp.data_as<const I>(), N, F);
      CUDA_CHECK_LAUNCH();
    });
  });
}

void swiglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  expect_cuda(dinp, "swiglu_backward: dinp");
  expect_cuda(dout, "swiglu_backward: dout");
  expect_cuda(inp, "swiglu_backward: inp");
  const std::int64_t F = dout.dim(-1), N = dout.numel() / F;
  if (N * F == 0) return;
  cudaStream_t stream = current_stream();
  if (vectorisable(F, dinp.dtype(), {&dinp, &dout, &inp})) {
    dispatch_float(dinp.dtype(), "swiglu_backward: dinp", [&](auto tag) {
      using T = decltype(tag);
      swiglu_backward_vec_kernel<<<grid_for(N * F / Pack16<T>::kSize), kThreads, 0, stream>>>(
          dinp.data_as<T>(), dout.data_as<const T>(), inp.data_as<const T>(), N, F);
      CUDA_CHECK_LAUNCH();
    });
    return;
  }
  dispatch_float(dinp.dtype(), "swiglu_backward: dinp", [&](auto di_tag) {
    dispatch_float(dout.dtype(), "swiglu_backward: dout", [&](auto do_tag) {
      dispatch_float(inp.dtype(), "swiglu_backward: inp", [&](auto i_tag) {
        using DI = decltype(di_tag);
        using DO = decltype(do_tag);
        using I = decltype(i_tag);
        swiglu_backward_kernel<<<grid_for(N * F), kThreads, 0, stream>>>(
            dinp.data_as<DI>(), dout.data_as<const DO>(), inp.data_as<const I>(), N, F);
        CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace engine::cuda
