// Token + position embedding (GPT-2's wte and wpe), forward and backward.
//
// A token outside [vocab_start, vocab_start + V) selects no row of wte (a
// vocabulary-parallel shard, Megatron-LM section 3); the position row is
// still added.
//
// Backward is deterministic. dwpe: one thread per (t, c) sums over b in
// order. dwte: the (token, position) pairs are radix-sorted by token with
// CUB's stable sort, so each token's positions form a segment in increasing
// position order; one block per segment sums its rows in that order and adds
// the total to dwte once. No float atomics, so the result is bitwise
// reproducible (llm.c buckets on the host for the same reason; sorting on the
// device avoids copying tokens back every step).
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>

#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"

namespace engine::cuda {
namespace {

template <typename O, typename W, typename P>
__global__ void embedding_forward_kernel(O* __restrict__ out, const std::int32_t* __restrict__ tokens,
                                         const W* __restrict__ wte, const P* __restrict__ wpe, std::int64_t N,
                                         int T, int C, std::int64_t V, std::int64_t vocab_start,
                                         std::int64_t position_start) {
  // out (N, C) with N = B*T, tokens (N), wte (V, C), wpe (maxT, C) or null
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < N * C;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t n = i / C;
    const int c = static_cast<int>(i % C);
    const std::int64_t row = static_cast<std::int64_t>(tokens[n]) - vocab_start;
    float v = (row >= 0 && row < V) ? to_float(wte[row * C + c]) : 0.0f;
    if (wpe != nullptr) v += to_float(wpe[(position_start + n % T) * C + c]);
    out[i] = from_float<O>(v);
  }
}

// dwpe[position_start + t, c] += sum_b dout[b, t, c], summed in b order.
template <typename D>
__global__ void embedding_backward_wpe_kernel(float* __restrict__ dwpe, const D* __restrict__ dout, int B, int T,
                                              int C, std::int64_t position_start) {
  // dwpe (maxT, C), dout (B, T, C)
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < std::int64_t{T} * C;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    float sum = 0.0f;
    for (int b = 0; b < B; ++b) sum += to_float(dout[std::int64_t{b} * T * C + i]);
    dwpe[position_start * C + i] += sum;
  }
}

// Sort keys: the local row (token - vocab_start), or V for tokens this shard
// does not hold (sorted last and skipped). Values: the position n.
__global__ void embedding_sort_keys_kernel(unsigned* __restrict__ keys, unsigned* __restrict__ positions,
                                           const std::int32_t* __restrict__ tokens, std::int64_t N, std::int64_t V,
                                           std::int64_t vocab_start) {
  for (std::int64_t n = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; n < N;
       n += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t row = static_cast<std::int64_t>(tokens[n]) - vocab_start;
    keys[n] = static_cast<unsigned>((row >= 0 && row < V) ? row : V);
    positions[n] = static_cast<unsigned>(n);
  }
}

// Block i handles sorted index i if it starts a segment of equal keys:
// dwte[key, :] += sum of dout[positions[j], :] over the segment, in order.
template <typename D>
__global__ void embedding_backward_wte_kernel(float* __restrict__ dwte, const D* __restrict__ dout,
                                              const unsigned* __restrict__ keys,
                                              const unsigned* __restrict__ positions, std::int64_t N, int C,
                                              unsigned V) {
  // dwte (V, C), dout (N, C), keys/positions (N) sorted by key
  const std::int64_t start = blockIdx.x;
  const unsigned key = keys[start];
  if (key >= V || (start > 0 && keys[start - 1] == key)) return;
  std::int64_t end = start + 1;
  while (end < N && keys[end] == key) ++end;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sum = 0.0f;
    for (std::int64_t j = start; j < end; ++j) sum += to_float(dout[std::int64_t{positions[j]} * C + c]);
    dwte[std::int64_t{key} * C + c] += sum;
  }
}

}  // namespace

void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       std::int64_t vocab_start, std::int64_t position_start) {
  expect_cuda(out, "embedding_forward: out");
  expect_cuda(tokens, "embedding_forward: tokens");
  expect_cuda(wte, "embedding_forward: wte");
  const std::int64_t T = out.dim(1), C = out.dim(2), N = out.dim(0) * T, V = wte.dim(0);
  if (N * C == 0) return;
  // An empty wpe is passed as wte's type with a null pointer.
  const DType wpe_dtype = wpe.empty() ? wte.dtype() : wpe.dtype();
  dispatch_float(out.dtype(), "embedding_forward: out", [&](auto o_tag) {
    dispatch_float(wte.dtype(), "embedding_forward: wte", [&](auto w_tag) {
      dispatch_float(wpe_dtype, "embedding_forward: wpe", [&](auto p_tag) {
        using O = decltype(o_tag);
        using W = decltype(w_tag);
        using P = decltype(p_tag);
        embedding_forward_kernel<<<grid_for(N * C), kThreads, 0, current_stream()>>>(
            out.data_as<O>(), tokens.data_as<const std::int32_t>(), wte.data_as<const W>(),
            wpe.empty() ? nullptr : wpe.data_as<const P>(), N, static_cast<int>(T), static_cast<int>(C), V,
            vocab_start, position_start);
        CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        std::int64_t vocab_start, std::int64_t position_start) {
  expect_cuda(dwte, "embedding_backward: dwte");
  expect_cuda(dout, "embedding_backward: dout");
  expect_cuda(tokens, "embedding_backward: tokens");
  expect_f32(dwte, "embedding_backward: dwte (parameter gradients are f32)");
  if (!dwpe.empty()) {
    expect_cuda(dwpe, "embedding_backward: dwpe");
    expect_f32(dwpe, "embedding_backward: dwpe (parameter gradients are f32)");
  }
  const std::int64_t B = dout.dim(0), T = dout.dim(1), C = dout.dim(2), N = B * T, V = dwte.dim(0);
  if (N * C == 0) return;
  ENGINE_CHECK(N < (std::int64_t{1} << 31) && V < (std::int64_t{1} << 31),
               "embedding_backward: B*T = ", N, " and V = ", V, " must fit in 31 bits");
  cudaStream_t stream = current_stream();

  // Sort (key, position) pairs by key. Only the bits that can be set are sorted.
  int end_bit = 1;
  while ((std::int64_t{1} << end_bit) <= V) ++end_bit;  // keys are in [0, V]
  const int n = static_cast<int>(N);
  std::size_t sort_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const unsigned*>(nullptr),
                                             static_cast<unsigned*>(nullptr), static_cast<const unsigned*>(nullptr),
                                             static_cast<unsigned*>(nullptr), n, 0, end_bit, stream));
  ScratchPlan plan;
  const std::size_t at_keys_in = plan.add(sizeof(unsigned) * N), at_keys = plan.add(sizeof(unsigned) * N);
  const std::size_t at_pos_in = plan.add(sizeof(unsigned) * N), at_pos = plan.add(sizeof(unsigned) * N);
  const std::size_t at_sort = plan.add(sort_bytes);
  char* base = plan.allocate();
  unsigned* keys_in = reinterpret_cast<unsigned*>(base + at_keys_in);  // (N)
  unsigned* keys = reinterpret_cast<unsigned*>(base + at_keys);        // (N) sorted
  unsigned* pos_in = reinterpret_cast<unsigned*>(base + at_pos_in);    // (N)
  unsigned* pos = reinterpret_cast<unsigned*>(base + at_pos);          // (N) sorted with keys

  embedding_sort_keys_kernel<<<grid_for(N), kThreads, 0, stream>>>(keys_in, pos_in, tokens.data_as<const std::int32_t>(),
                                                                    N, V, vocab_start);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + at_sort, sort_bytes, keys_in, keys, pos_in, pos, n, 0, end_bit,
                                             stream));

  dispatch_float(dout.dtype(), "embedding_backward: dout", [&](auto tag) {
    using D = decltype(tag);
    embedding_backward_wte_kernel<<<static_cast<unsigned>(N), 128, 0, stream>>>(
        dwte.data_as<float>(), dout.data_as<const D>(), keys, pos, N, static_cast<int>(C), static_cast<unsigned>(V));
    CUDA_CHECK_LAUNCH();
    if (!dwpe.empty()) {
      embedding_backward_wpe_kernel<<<grid_for(T * C), kThreads, 0, stream>>>(
          dwpe.data_as<float>(), dout.data_as<const D>(), static_cast<int>(B), static_cast<int>(T),
          static_cast<int>(C), position_start);
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace engine::cuda
