// The FP8 linear layers (ops::MatmulFormat::kFp8E4M3, issue 35): the four
// matmul ops of a transformer block with E4M3 operands on Hopper's (or Ada's)
// FP8 tensor cores, built from fp8_cast.h and fp8_gemm.h.
//
// Every operand gets a per-tensor *current* scale, its own amax now
// (fp8_amax), and is cast on the stream, never waiting for the host:
//
//   forward   qx = E4M3(inp), qw = E4M3(weight)
//             out (N, OC) = qx @ qw^T                     fp8_gemm, bf16 out
//   backward  dout -> q_dout (N, OC) and q_dout^T (OC, N), one scale
//             weight -> qw^T (C, OC); inp -> q_inp^T (C, N)
//             dinp (N, C)     = q_dout @ [qw^T]^T          bf16 out
//             dweight (OC, C) += q_dout^T @ [q_inp^T]^T    f32, accumulating
//
// since Hopper's FP8 GEMM takes only operands with K contiguous (fp8_gemm.h).
// A weight with an ops::Fp8WeightCache (the trainer keeps one per layer) is
// scaled, cast and cast-transposed once per optimizer step, into the cache;
// without one, at every use. The bias, the residual add and GELU are not
// epilogues of the FP8 GEMM yet: the GEMM writes bf16, then one elementwise
// pass adds bias and residual in f32 (a second rounding to bf16, far inside
// E4M3's), and GELU's forward and backward run as gelu.cu's kernels. The bias
// gradient sums the bf16 dout itself (column_sums.cu), as the bf16 path does.
//
// Under tensor parallelism the amax of a shard is max-reduced over the group
// between its amax and its cast (ops::Fp8Options): a 4-byte all-reduce on the
// device, stream-ordered like the block's other collectives.
//
// The CPU reference is engine/cpu/fp8_matmul.cpp; tests/engine/cuda/
// test_cuda_fp8.cpp holds these ops to it.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "engine/cuda/column_sums.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"
#include "engine/cuda/fp8_cast.h"
#include "engine/cuda/fp8_gemm.h"

namespace engine::cuda {
namespace {

using e4m3 = __nv_fp8_e4m3;

// y = bf16(y + bias[col] + residual), in f32, in place; bias (OC) and residual (N, OC) may be null.
__global__ void add_bias_residual_kernel(bf16* __restrict__ y, const bf16* __restrict__ bias,
                                         const bf16* __restrict__ residual, std::int64_t n, std::int64_t oc) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    float v = __bfloat162float(y[i]);
    if (bias != nullptr) v += __bfloat162float(bias[i % oc]);
    if (residual != nullptr) v += __bfloat162float(residual[i]);
    y[i] = __float2bfloat16_rn(v);
  }
}

void add_bias_residual(const Tensor& y, const Tensor& bias, const Tensor& residual, std::int64_t oc) {
  if (bias.empty() && residual.empty()) return;
  const std::int64_t n = y.numel();
  add_bias_residual_kernel<<<grid_for(n), kThreads, 0, current_stream()>>>(
      y.data_as<bf16>(), bias.empty() ? nullptr : bias.data_as<const bf16>(),
      residual.empty() ? nullptr : residual.data_as<const bf16>(), n, oc);
  CUDA_CHECK_LAUNCH();
}

void expect_bf16(const Tensor& t, const char* what) {
  if (t.empty()) return;
  expect_cuda(t, what);
  ENGINE_CHECK(t.dtype() == DType::kBF16, what, " is ", t.describe(),
               ": the FP8 linear layers take bf16 activations and weights (--precision fp8 keeps bf16 copies)");
}

// One E4M3 copy (or transposed copy) and its scaling state in the op's scratch.
struct Fp8Copy {
  e4m3* data = nullptr;
  Fp8Scale scale;
  Fp8Operand operand() const { return {data, scale.scale_inv}; }
};

// Carves the scratch of one op: `count` E4M3 buffers of the given element
// counts, each with its own scaling state. One per op, made after anything
// else in the op that takes scratch (column sums): the next scratch() call
// may move the region.
template <int count>
struct Fp8Scratch {
  Fp8Copy copies[count];
  explicit Fp8Scratch(const std::int64_t (&elements)[count]) {
    ScratchPlan plan;
    std::size_t data_at[count], scale_at[count];
    for (int i = 0; i < count; ++i) {
      data_at[i] = plan.add(static_cast<std::size_t>(elements[i]));
      scale_at[i] = plan.add(kFp8ScaleFloats * sizeof(float));
    }
    char* base = plan.allocate();
    for (int i = 0; i < count; ++i) {
      copies[i].data = reinterpret_cast<e4m3*>(base + data_at[i]);
      copies[i].scale = fp8_scale_at(reinterpret_cast<float*>(base + scale_at[i]));
    }
  }
};

// *s.amax = max |x|, max-reduced over the group when x is a shard (ops::Fp8Options).
void amax(const Tensor& x, const Fp8Scale& s, const ops::Fp8Options* fp8, bool sharded, cudaStream_t stream) {
  fp8_amax(x.data_as<const bf16>(), x.numel(), s, stream);
  if (sharded && fp8 != nullptr && fp8->reduce_max)
    fp8->reduce_max(Tensor(s.amax, Shape{1}, DType::kF32, DeviceType::kCuda));
}

// A weight's FP8 cache (ops::Fp8WeightCache) laid out in its storage as
// ops::fp8_weight_cache_bytes counts it: the scaling state, the E4M3 copy of
// W (OC, C), the E4M3 copy of W^T (C, OC), each 256-byte aligned.
struct CachedWeight {
  ops::Fp8WeightCache* cache;
  Fp8Copy w, w_t;  // one scale for both
};
CachedWeight cached_weight(const Tensor& weight, const ops::Fp8Options* fp8, const char* what) {
  ops::Fp8WeightCache* cache = fp8 != nullptr ? fp8->weight_cache : nullptr;
  if (cache == nullptr) return {nullptr, {}, {}};
  const std::int64_t OC = weight.dim(0), C = weight.dim(1);
  expect_cuda(cache->storage, what);
  ENGINE_CHECK(cache->storage.bytes() >= ops::fp8_weight_cache_bytes(DeviceType::kCuda, OC, C), what,
               ": its FP8 cache holds ", cache->storage.bytes(), " bytes, too few for ", weight.describe());
  char* base = static_cast<char*>(cache->storage.data());
  const std::size_t copy_bytes = (static_cast<std::size_t>(OC * C) + 255) / 256 * 256;
  CachedWeight c{cache, {}, {}};
  c.w.scale = c.w_t.scale = fp8_scale_at(reinterpret_cast<float*>(base));
  c.w.data = reinterpret_cast<e4m3*>(base + 256);
  c.w_t.data = reinterpret_cast<e4m3*>(base + 256 + copy_bytes);
  return c;
}

// The weight's scale, from its cache or computed now into `scale` (its amax;
// scale and scale_inv follow from it in the cast that every caller enqueues
// next, which is why `scaled` never stands without `cast` or `transposed`).
void weight_scale(const Tensor& weight, const Fp8Scale& scale, ops::Fp8WeightCache* cache,
                  const ops::Fp8Options* fp8, cudaStream_t stream) {
  if (cache != nullptr && cache->scaled) return;
  amax(weight, scale, fp8, fp8 != nullptr && fp8->weight, stream);
  if (cache != nullptr) cache->scaled = true;
}

// The forward GEMM into `gemm_out` (N, OC) bf16: E4M3 images of inp and
// weight (the weight's from its cache when kept, made there on first use), then qx @ qw^T.
void forward_gemm(const Tensor& gemm_out, const Tensor& inp, const Tensor& weight, const ops::Fp8Options* fp8) {
  const std::int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.numel() / C;
  const cudaStream_t stream = current_stream();
  const CachedWeight cached = cached_weight(weight, fp8, "fp8 matmul_forward: weight");
  Fp8Scratch<2> s({N * C, cached.cache != nullptr ? 0 : OC * C});
  const Fp8Copy& qx = s.copies[0];
  const Fp8Copy qw = cached.cache != nullptr ? cached.w : s.copies[1];
  amax(inp, qx.scale, fp8, fp8 && fp8->inp, stream);
  fp8_cast(inp.data_as<const bf16>(), N * C, qx.scale, qx.data, stream);
  weight_scale(weight, qw.scale, cached.cache, fp8, stream);
  if (cached.cache == nullptr) {
    fp8_cast(weight.data_as<const bf16>(), OC * C, qw.scale, qw.data, stream);
  } else if (!cached.cache->cast) {
    // Both copies from one read of the weight: the backward's W^T is kept too.
    fp8_cast_transpose(weight.data_as<const bf16>(), OC, C, qw.scale, qw.data, cached.w_t.data, stream);
    cached.cache->cast = cached.cache->transposed = true;
  }
  fp8_gemm(gemm_out.data(), DType::kBF16, qx.operand(), qw.operand(), N, OC, C, Fp8GemmOptions{}, stream);
}

}  // namespace

void fp8_matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                        const Tensor& pre_gelu, const ops::Fp8Options* fp8) {
  expect_bf16(out, "fp8 matmul_forward: out");
  expect_bf16(inp, "fp8 matmul_forward: inp");
  expect_bf16(weight, "fp8 matmul_forward: weight");
  expect_bf16(bias, "fp8 matmul_forward: bias");
  expect_bf16(pre_gelu, "fp8 matmul_forward: pre_gelu");
  const std::int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.numel() / C;
  if (N == 0 || OC == 0) return;
  // The tensor the GEMM writes: out, or pre_gelu when GELU is applied after.
  const Tensor& gemm_out = pre_gelu.empty() ? out : pre_gelu;
  forward_gemm(gemm_out, inp, weight, fp8);
  add_bias_residual(gemm_out, bias, Tensor{}, OC);
  if (!pre_gelu.empty()) gelu_forward(out, pre_gelu);
}

void fp8_matmul_forward_add(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                            const Tensor& residual, const ops::Fp8Options* fp8) {
  expect_bf16(out, "fp8 matmul_forward_add: out");
  expect_bf16(inp, "fp8 matmul_forward_add: inp");
  expect_bf16(weight, "fp8 matmul_forward_add: weight");
  expect_bf16(bias, "fp8 matmul_forward_add: bias");
  expect_bf16(residual, "fp8 matmul_forward_add: residual");
  const std::int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.numel() / C;
  if (N == 0 || OC == 0) return;
  forward_gemm(out, inp, weight, fp8);
  add_bias_residual(out, bias, residual, OC);
}

void fp8_matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                         const Tensor& inp, const Tensor& weight, const Tensor& gelu_pre,
                         const ops::Fp8Options* fp8) {
  expect_bf16(dout, "fp8 matmul_backward: dout");
  expect_bf16(inp, "fp8 matmul_backward: inp");
  expect_bf16(dinp, "fp8 matmul_backward: dinp");
  expect_bf16(gelu_pre, "fp8 matmul_backward: gelu_pre");
  if (!dinp.empty()) expect_bf16(weight, "fp8 matmul_backward: weight");
  if (!dweight.empty()) {
    expect_cuda(dweight, "fp8 matmul_backward: dweight");
    expect_f32(dweight, "fp8 matmul_backward: dweight (parameter gradients are f32)");
  }
  const std::int64_t OC = weight.dim(0), C = weight.dim(1), N = dout.numel() / OC;
  if (N == 0 || OC == 0 || C == 0) return;
  const cudaStream_t stream = current_stream();
  if (!dbias.empty()) {  // first: the column sums take scratch of their own
    expect_cuda(dbias, "fp8 matmul_backward: dbias");
    expect_f32(dbias, "fp8 matmul_backward: dbias (parameter gradients are f32)");
    add_column_sums(dbias.data_as<float>(), dout, N, OC, stream);
  }
  const bool wants_dinp = !dinp.empty(), wants_dweight = !dweight.empty();
  if (!wants_dinp && !wants_dweight) return;
  // dout (one scale for both copies), dout^T, weight^T (unless cached), inp^T; the unused ones empty.
  const CachedWeight cached = wants_dinp ? cached_weight(weight, fp8, "fp8 matmul_backward: weight")
                                         : CachedWeight{nullptr, {}, {}};
  Fp8Scratch<4> s({wants_dinp ? N * OC : 0, wants_dweight ? OC * N : 0,
                    wants_dinp && cached.cache == nullptr ? C * OC : 0, wants_dweight ? C * N : 0});
  Fp8Copy q_dout = s.copies[0], q_dout_t = s.copies[1];
  q_dout_t.scale = q_dout.scale;  // the transposed copy is dequantised by the same scale
  const Fp8Copy q_weight_t = cached.cache != nullptr ? cached.w_t : s.copies[2];
  const Fp8Copy& q_inp_t = s.copies[3];
  const bf16* d = dout.data_as<const bf16>();
  amax(dout, q_dout.scale, fp8, fp8 && fp8->dout, stream);
  if (wants_dweight) fp8_cast_transpose(d, N, OC, q_dout.scale, wants_dinp ? q_dout.data : nullptr, q_dout_t.data, stream);
  else fp8_cast(d, N * OC, q_dout.scale, q_dout.data, stream);

  if (wants_dinp) {
    weight_scale(weight, q_weight_t.scale, cached.cache, fp8, stream);
    if (cached.cache == nullptr || !cached.cache->transposed) {
      fp8_cast_transpose(weight.data_as<const bf16>(), OC, C, q_weight_t.scale, nullptr, q_weight_t.data, stream);
      if (cached.cache != nullptr) cached.cache->transposed = true;
    }
    fp8_gemm(dinp.data(), DType::kBF16, q_dout.operand(), q_weight_t.operand(), N, C, OC, Fp8GemmOptions{}, stream);
    if (!gelu_pre.empty()) gelu_backward(dinp, gelu_pre, dinp);  // in place: dinp *= gelu'(gelu_pre)
  }
  if (wants_dweight) {
    amax(inp, q_inp_t.scale, fp8, fp8 && fp8->inp, stream);
    fp8_cast_transpose(inp.data_as<const bf16>(), N, C, q_inp_t.scale, nullptr, q_inp_t.data, stream);
    Fp8GemmOptions accumulate;
    accumulate.accumulate = true;
    fp8_gemm(dweight.data(), DType::kF32, q_dout_t.operand(), q_inp_t.operand(), OC, C, N, accumulate, stream);
  }
}

}  // namespace engine::cuda
