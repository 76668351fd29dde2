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
// without one, at every use. The forward's bias, GELU and residual add are
// the FP8 GEMM's epilogue (fp8_gemm.h: applied to the f32 product, one
// rounding to bf16), unless cuBLASLt offers no such algorithm or
// ENGINE_FP8_EPILOGUES=0: then the GEMM writes bf16 and one elementwise pass
// adds bias and residual in f32 (a second rounding to bf16, far inside
// E4M3's), or bias and GELU (the roundings of gelu.cu's forward). The GELU
// backward is one in-place pass over dinp. The bias gradient sums the bf16
// dout itself (column_sums.cu), as the bf16 path does.
//
// Amaxes not read twice (ops::Fp8Options' slots): an operand whose amax is
// ready in the caller's slot (made by the norm that produced it, by this
// layer's forward for the backward's weight gradient, or by the previous
// layer's GELU backward) is only cast; the elementwise passes above fold
// max |out| or max |dinp| into the next layer's slot as they write (amax.cuh).
//
// Under tensor parallelism the amax of a shard is max-reduced over the group
// between its amax and its cast (ops::Fp8Options): a 4-byte all-reduce on the
// device, stream-ordered like the block's other collectives.
//
// The CPU reference is engine/cpu/fp8_matmul.cpp; tests/engine/cuda/
// test_cuda_fp8.cpp holds these ops to it.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "engine/cuda/amax.cuh"
#include "engine/cuda/column_sums.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"
#include "engine/cuda/fp8_block.h"
#include "engine/cuda/fp8_cast.h"
#include "engine/cuda/fp8_gemm.h"

namespace engine::cuda {
namespace {

using e4m3 = __nv_fp8_e4m3;

// y = bf16(y + bias[col] + residual), in f32, in place; bias (OC) and
// residual (N, OC) may be null. max |y| into amax_slot when it is not null.
__global__ void add_bias_residual_kernel(bf16* __restrict__ y, const bf16* __restrict__ bias,
                                         const bf16* __restrict__ residual, std::int64_t n, std::int64_t oc,
                                         unsigned* __restrict__ amax_slot) {
  unsigned m = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    float v = __bfloat162float(y[i]);
    if (bias != nullptr) v += __bfloat162float(bias[i % oc]);
    if (residual != nullptr) v += __bfloat162float(residual[i]);
    const bf16 r = __float2bfloat16_rn(v);
    y[i] = r;
    m = max(m, amax_bits(__bfloat162float(r)));
  }
  publish_warp_amax(m, amax_slot);
}

// The GELU epilogue: pre = bf16(pre + bias[col]) in place (bias may be null),
// out = bf16(gelu(pre)), max |out| into amax_slot when it is not null: the
// roundings of add_bias_residual then gelu.cu's forward, in one pass.
__global__ void bias_gelu_kernel(bf16* __restrict__ out, bf16* __restrict__ pre, const bf16* __restrict__ bias,
                                 std::int64_t n, std::int64_t oc, unsigned* __restrict__ amax_slot) {
  unsigned m = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    bf16 p = pre[i];
    if (bias != nullptr) {
      p = __float2bfloat16_rn(__bfloat162float(p) + __bfloat162float(bias[i % oc]));
      pre[i] = p;
    }
    const bf16 r = __float2bfloat16_rn(gelu(__bfloat162float(p)));
    out[i] = r;
    m = max(m, amax_bits(__bfloat162float(r)));
  }
  publish_warp_amax(m, amax_slot);
}

// dinp = bf16(dinp * gelu'(gelu_pre)) in place, max |dinp| into amax_slot when
// it is not null: gelu.cu's backward with the amax folded in.
__global__ void gelu_backward_amax_kernel(bf16* __restrict__ dinp, const bf16* __restrict__ gelu_pre,
                                          std::int64_t n, unsigned* __restrict__ amax_slot) {
  unsigned m = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const bf16 r = __float2bfloat16_rn(__bfloat162float(dinp[i]) * gelu_grad(__bfloat162float(gelu_pre[i])));
    dinp[i] = r;
    m = max(m, amax_bits(__bfloat162float(r)));
  }
  publish_warp_amax(m, amax_slot);
}

// The slot of an Fp8Options amax output, zeroed on the stream for a kernel
// to fold into (amax.cuh), or null (none asked for).
unsigned* amax_output(const ops::Fp8Options* fp8, Tensor ops::Fp8Options::*slot, cudaStream_t stream) {
  return fp8 != nullptr ? reset_amax_slot(fp8->*slot, stream) : nullptr;
}

// *slot = max |x| (n bf16) by a pass of its own, when a slot is asked for.
void amax_pass(const Tensor& x, std::int64_t n, const ops::Fp8Options* fp8, Tensor ops::Fp8Options::*slot,
               cudaStream_t stream) {
  if (fp8 == nullptr || (fp8->*slot).empty()) return;
  fp8_amax(x.data_as<const bf16>(), n, Fp8Scale{(fp8->*slot).data_as<float>(), nullptr, nullptr}, stream);
}

// The forward's elementwise pass over the plain GEMM's bf16 output: bias and
// residual added into out, or with pre_gelu (which the GEMM then wrote) bias
// and GELU into out; max |out| into fp8->out_amax when asked, on the way.
void forward_epilogue(const Tensor& out, const Tensor& pre_gelu, const Tensor& bias, const Tensor& residual,
                      std::int64_t oc, const ops::Fp8Options* fp8) {
  const cudaStream_t stream = current_stream();
  const std::int64_t n = out.numel();
  const bf16* b = bias.empty() ? nullptr : bias.data_as<const bf16>();
  if (pre_gelu.empty() && b == nullptr && residual.empty()) {  // nothing to add: at most the amax
    amax_pass(out, n, fp8, &ops::Fp8Options::out_amax, stream);
    return;
  }
  unsigned* const amax_slot = amax_output(fp8, &ops::Fp8Options::out_amax, stream);
  if (!pre_gelu.empty()) {
    bias_gelu_kernel<<<grid_for(n), kThreads, 0, stream>>>(out.data_as<bf16>(), pre_gelu.data_as<bf16>(), b, n, oc,
                                                          amax_slot);
  } else {
    add_bias_residual_kernel<<<grid_for(n), kThreads, 0, stream>>>(
        out.data_as<bf16>(), b, residual.empty() ? nullptr : residual.data_as<const bf16>(), n, oc, amax_slot);
  }
  CUDA_CHECK_LAUNCH();
}

// After the dinp GEMM: dinp *= gelu'(gelu_pre) in place with max |dinp| into
// fp8->dinp_amax on the way, or without GELU that amax alone when asked.
void finish_dinp(const Tensor& dinp, const Tensor& gelu_pre, std::int64_t n, const ops::Fp8Options* fp8,
                 cudaStream_t stream) {
  if (gelu_pre.empty()) {
    amax_pass(dinp, n, fp8, &ops::Fp8Options::dinp_amax, stream);
    return;
  }
  unsigned* const dinp_amax = amax_output(fp8, &ops::Fp8Options::dinp_amax, stream);
  gelu_backward_amax_kernel<<<grid_for(n), kThreads, 0, stream>>>(dinp.data_as<bf16>(),
                                                                  gelu_pre.data_as<const bf16>(), n, dinp_amax);
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

// The amax an operand is scaled by, in s.amax: from the caller's slot when it
// is ready (then s.amax points there and nothing is read), else computed,
// into the slot when one is given (so the backward finds it ready).
void operand_amax(const Tensor& x, Fp8Scale& s, const ops::Fp8Options* fp8, const Tensor& slot, bool ready,
                  bool sharded, cudaStream_t stream) {
  if (!slot.empty()) s.amax = slot.data_as<float>();
  if (!ready) amax(x, s, fp8, sharded, stream);
}
void input_amax(const Tensor& inp, Fp8Scale& s, const ops::Fp8Options* fp8, cudaStream_t stream) {
  if (fp8 == nullptr) amax(inp, s, fp8, false, stream);
  else operand_amax(inp, s, fp8, fp8->inp_amax, fp8->inp_amax_ready, fp8->inp, stream);
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

// The forward's E4M3 operands: the input cast under its amax, the weight's
// copy (from its cache when kept, made there on first use). In the op's
// scratch, valid until its next scratch() call.
struct ForwardOperands {
  Fp8Copy qx, qw;
};
ForwardOperands forward_operands(const Tensor& inp, const Tensor& weight, const ops::Fp8Options* fp8) {
  const std::int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.numel() / C;
  const cudaStream_t stream = current_stream();
  const CachedWeight cached = cached_weight(weight, fp8, "fp8 matmul_forward: weight");
  Fp8Scratch<2> s({N * C, cached.cache != nullptr ? 0 : OC * C});
  ForwardOperands operands{s.copies[0], cached.cache != nullptr ? cached.w : s.copies[1]};
  Fp8Copy& qx = operands.qx;
  const Fp8Copy& qw = operands.qw;
  input_amax(inp, qx.scale, fp8, stream);
  fp8_cast(inp.data_as<const bf16>(), N * C, qx.scale, qx.data, stream);
  weight_scale(weight, qw.scale, cached.cache, fp8, stream);
  if (cached.cache == nullptr) {
    fp8_cast(weight.data_as<const bf16>(), OC * C, qw.scale, qw.data, stream);
  } else if (!cached.cache->cast) {
    // Both copies from one read of the weight: the backward's W^T is kept too.
    fp8_cast_transpose(weight.data_as<const bf16>(), OC, C, qw.scale, qw.data, cached.w_t.data, stream);
    cached.cache->cast = cached.cache->transposed = true;
  }
  return operands;
}

// The forward's GEMM on its E4M3 operands, out (N, OC) = x @ w^T + bias [+
// residual], or with pre_gelu: pre_gelu = x @ w^T + bias and out =
// gelu(pre_gelu); max |out| into fp8->out_amax when asked. Bias, GELU and
// residual are the FP8 GEMM's epilogue where cuBLASLt offers one (fp8_gemm.h;
// one rounding to bf16, from f32), else one elementwise pass after the plain
// GEMM (forward_epilogue).
void forward_gemm(const Tensor& out, const Tensor& pre_gelu, const Tensor& bias, const Tensor& residual,
                  const Fp8Operand& x, const Fp8Operand& w, std::int64_t N, std::int64_t OC, std::int64_t C,
                  const ops::Fp8Options* fp8) {
  const cudaStream_t stream = current_stream();
  Fp8GemmOptions fused;
  fused.bias = bias.empty() ? nullptr : bias.data();
  fused.gelu_aux = pre_gelu.empty() ? nullptr : pre_gelu.data();
  fused.residual = residual.empty() ? nullptr : residual.data();
  if (fused.has_epilogue() && fp8_gemm_epilogues_enabled() &&
      try_fp8_gemm(out.data(), DType::kBF16, x, w, N, OC, C, fused, stream)) {
    amax_pass(out, N * OC, fp8, &ops::Fp8Options::out_amax, stream);  // cuBLASLt gives no bf16 D's amax
    return;
  }
  // The tensor the GEMM writes: out, or pre_gelu when GELU is applied after.
  const Tensor& gemm_out = pre_gelu.empty() ? out : pre_gelu;
  fp8_gemm(gemm_out.data(), DType::kBF16, x, w, N, OC, C, Fp8GemmOptions{}, stream);
  forward_epilogue(out, pre_gelu, bias, residual, OC, fp8);
}

// ---- block scaling (ops::Fp8Scaling::kBlock; fp8_block.h) -------------------------

bool block_scaled(const ops::Fp8Options* fp8) { return fp8 != nullptr && fp8->scaling == ops::Fp8Scaling::kBlock; }
static_assert(kFp8Block == ops::kFp8BlockSize, "the casts' tiles are the blocks ops::Fp8Scaling and the CPU use");

// A block-scaled E4M3 copy and its factors.
struct BlockCopy {
  e4m3* data = nullptr;
  float* scales = nullptr;
  Fp8Operand operand(Fp8ScaleMode mode) const { return {data, scales, mode}; }
};

// `count` block-scaled copies in the op's scratch: elements and scale floats of each.
template <int count>
struct BlockScratch {
  BlockCopy copies[count];
  BlockScratch(const std::int64_t (&elements)[count], const std::int64_t (&scale_floats)[count]) {
    ScratchPlan plan;
    std::size_t data_at[count], scales_at[count];
    for (int i = 0; i < count; ++i) {
      data_at[i] = plan.add(static_cast<std::size_t>(elements[i]));
      scales_at[i] = plan.add(static_cast<std::size_t>(scale_floats[i]) * sizeof(float));
    }
    char* base = plan.allocate();
    for (int i = 0; i < count; ++i) {
      copies[i].data = reinterpret_cast<e4m3*>(base + data_at[i]);
      copies[i].scales = reinterpret_cast<float*>(base + scales_at[i]);
    }
  }
};

// A weight's block-scaled copies in its FP8 cache (ops::fp8_weight_cache_bytes
// counts them after the per-tensor state and copies, which share the E4M3
// bytes: a run uses one scaling or the other): W (OC, C) and W^T (C, OC),
// each with its 128 x 128 factors.
struct CachedBlockWeight {
  ops::Fp8WeightCache* cache = nullptr;
  BlockCopy w, w_t;
};
CachedBlockWeight cached_block_weight(const Tensor& weight, const ops::Fp8Options* fp8, const char* what) {
  ops::Fp8WeightCache* cache = fp8 != nullptr ? fp8->weight_cache : nullptr;
  if (cache == nullptr) return {};
  const std::int64_t OC = weight.dim(0), C = weight.dim(1);
  expect_cuda(cache->storage, what);
  ENGINE_CHECK(cache->storage.bytes() >= ops::fp8_weight_cache_bytes(DeviceType::kCuda, OC, C), what,
               ": its FP8 cache holds ", cache->storage.bytes(), " bytes, too few for ", weight.describe());
  const auto aligned_256 = [](std::size_t bytes) { return (bytes + 255) / 256 * 256; };
  char* base = static_cast<char*>(cache->storage.data());
  const std::size_t copy_bytes = aligned_256(static_cast<std::size_t>(OC * C));
  const std::size_t scales_bytes = aligned_256(static_cast<std::size_t>(fp8_blk128_scales(OC, C)) * sizeof(float));
  CachedBlockWeight c;
  c.cache = cache;
  c.w.data = reinterpret_cast<e4m3*>(base + 256);
  c.w_t.data = reinterpret_cast<e4m3*>(base + 256 + copy_bytes);
  c.w.scales = reinterpret_cast<float*>(base + 256 + 2 * copy_bytes);
  c.w_t.scales = reinterpret_cast<float*>(base + 256 + 2 * copy_bytes + scales_bytes);
  return c;
}

// The weight's copy the forward reads (W) or the input gradient reads (W^T),
// from its cache (both made there on first use after an optimizer step) or
// made now in `scratch` (sized for the larger of W's and W^T's factors).
BlockCopy block_weight(const Tensor& weight, const CachedBlockWeight& cached, bool transposed,
                       const BlockCopy& scratch, cudaStream_t stream) {
  const std::int64_t OC = weight.dim(0), C = weight.dim(1);
  const bf16* w = weight.data_as<const bf16>();
  if (cached.cache != nullptr) {
    if (!cached.cache->cast) {
      fp8_block_cast_weight(w, OC, C, cached.w.data, cached.w.scales, cached.w_t.data, cached.w_t.scales, stream);
      cached.cache->scaled = cached.cache->cast = cached.cache->transposed = true;
    }
    return transposed ? cached.w_t : cached.w;
  }
  if (!transposed) {
    fp8_block_cast_weight(w, OC, C, scratch.data, scratch.scales, nullptr, nullptr, stream);
    return scratch;
  }
  fp8_block_cast_weight(w, OC, C, nullptr, nullptr, scratch.data, scratch.scales, stream);  // W^T alone
  return scratch;
}

void block_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                   const Tensor& pre_gelu, const Tensor& residual, const ops::Fp8Options* fp8) {
  const std::int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.numel() / C;
  const cudaStream_t stream = current_stream();
  const CachedBlockWeight cached = cached_block_weight(weight, fp8, "fp8 matmul_forward: weight");
  const bool uncached = cached.cache == nullptr;
  BlockScratch<2> s({N * C, uncached ? OC * C : 0},
                    {fp8_vec128_scales(N, C), uncached ? fp8_blk128_scales(OC, C) : 0});
  const BlockCopy& qx = s.copies[0];
  fp8_block_cast_rows(inp.data_as<const bf16>(), N, C, qx.data, qx.scales, stream);  // 1 x 128 along C
  const BlockCopy qw = block_weight(weight, cached, /*transposed=*/false, s.copies[1], stream);
  forward_gemm(out, pre_gelu, bias, residual, qx.operand(Fp8ScaleMode::kVec128), qw.operand(Fp8ScaleMode::kBlk128),
               N, OC, C, fp8);
}

// dinp = Q(dout; 1 x 128 along OC) @ Q(W; 128 x 128 blocks), then the GELU
// backward; dweight += Q(dout^T; 1 x 128 along N) @ Q(inp^T; 1 x 128 along N)^T.
void block_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                    const Tensor& weight, const Tensor& gelu_pre, const ops::Fp8Options* fp8) {
  const std::int64_t OC = weight.dim(0), C = weight.dim(1), N = dout.numel() / OC;
  const cudaStream_t stream = current_stream();
  const bool wants_dinp = !dinp.empty(), wants_dweight = !dweight.empty();
  const CachedBlockWeight cached = wants_dinp ? cached_block_weight(weight, fp8, "fp8 matmul_backward: weight")
                                              : CachedBlockWeight{};
  const bool weight_scratch = wants_dinp && cached.cache == nullptr;
  // dout, W^T (uncached), dout^T, inp^T.
  const std::int64_t w_elements = weight_scratch ? OC * C : 0;
  const std::int64_t w_factors = weight_scratch ? std::max(fp8_blk128_scales(OC, C), fp8_blk128_scales(C, OC)) : 0;
  BlockScratch<4> s({wants_dinp ? N * OC : 0, w_elements, wants_dweight ? OC * N : 0, wants_dweight ? C * N : 0},
                    {wants_dinp ? fp8_vec128_scales(N, OC) : 0, w_factors, wants_dweight ? fp8_vec128_scales(OC, N) : 0,
                     wants_dweight ? fp8_vec128_scales(C, N) : 0});
  const bf16* d = dout.data_as<const bf16>();
  if (wants_dinp) {
    const BlockCopy& q_dout = s.copies[0];
    fp8_block_cast_rows(d, N, OC, q_dout.data, q_dout.scales, stream);  // 1 x 128 along OC
    const BlockCopy q_wt = block_weight(weight, cached, /*transposed=*/true, s.copies[1], stream);
    fp8_gemm(dinp.data(), DType::kBF16, q_dout.operand(Fp8ScaleMode::kVec128), q_wt.operand(Fp8ScaleMode::kBlk128), N,
             C, OC, Fp8GemmOptions{}, stream);
    finish_dinp(dinp, gelu_pre, N * C, fp8, stream);
  }
  if (wants_dweight) {
    const BlockCopy &q_dout_t = s.copies[2], &q_inp_t = s.copies[3];
    fp8_block_cast_transpose_columns(d, N, OC, q_dout_t.data, q_dout_t.scales, stream);  // (OC, N), along N
    fp8_block_cast_transpose_columns(inp.data_as<const bf16>(), N, C, q_inp_t.data, q_inp_t.scales, stream);
    Fp8GemmOptions accumulate;
    accumulate.accumulate = true;
    fp8_gemm(dweight.data(), DType::kF32, q_dout_t.operand(Fp8ScaleMode::kVec128),
             q_inp_t.operand(Fp8ScaleMode::kVec128), OC, C, N, accumulate, stream);
  }
}

// The forward of a linear layer: its E4M3 operands (per tensor, or in blocks),
// then forward_gemm.
void forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias, const Tensor& pre_gelu,
             const Tensor& residual, const ops::Fp8Options* fp8) {
  if (block_scaled(fp8)) {
    block_forward(out, inp, weight, bias, pre_gelu, residual, fp8);
    return;
  }
  const std::int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.numel() / C;
  const ForwardOperands operands = forward_operands(inp, weight, fp8);
  forward_gemm(out, pre_gelu, bias, residual, operands.qx.operand(), operands.qw.operand(), N, OC, C, fp8);
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
  forward(out, inp, weight, bias, pre_gelu, Tensor{}, fp8);
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
  forward(out, inp, weight, bias, Tensor{}, residual, fp8);
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
  if (block_scaled(fp8)) {
    block_backward(dinp, dweight, dout, inp, weight, gelu_pre, fp8);
    return;
  }
  // dout (one scale for both copies), dout^T, weight^T (unless cached), inp^T; the unused ones empty.
  const CachedWeight cached = wants_dinp ? cached_weight(weight, fp8, "fp8 matmul_backward: weight")
                                         : CachedWeight{nullptr, {}, {}};
  Fp8Scratch<4> s({wants_dinp ? N * OC : 0, wants_dweight ? OC * N : 0,
                    wants_dinp && cached.cache == nullptr ? C * OC : 0, wants_dweight ? C * N : 0});
  Fp8Copy q_dout = s.copies[0], q_dout_t = s.copies[1];
  const Fp8Copy q_weight_t = cached.cache != nullptr ? cached.w_t : s.copies[2];
  Fp8Copy q_inp_t = s.copies[3];
  const bf16* d = dout.data_as<const bf16>();
  if (fp8 == nullptr) amax(dout, q_dout.scale, fp8, false, stream);
  else operand_amax(dout, q_dout.scale, fp8, fp8->dout_amax, !fp8->dout_amax.empty(), fp8->dout, stream);
  q_dout_t.scale = q_dout.scale;  // the transposed copy is dequantised by the same scale
  if (wants_dweight) fp8_cast_transpose(d, N, OC, q_dout.scale, wants_dinp ? q_dout.data : nullptr, q_dout_t.data, stream);
  else fp8_cast(d, N * OC, q_dout.scale, q_dout.data, stream);

  if (wants_dinp) {
    weight_scale(weight, q_weight_t.scale, cached.cache, fp8, stream);
    if (cached.cache == nullptr || !cached.cache->transposed) {
      fp8_cast_transpose(weight.data_as<const bf16>(), OC, C, q_weight_t.scale, nullptr, q_weight_t.data, stream);
      if (cached.cache != nullptr) cached.cache->transposed = true;
    }
    fp8_gemm(dinp.data(), DType::kBF16, q_dout.operand(), q_weight_t.operand(), N, C, OC, Fp8GemmOptions{}, stream);
    finish_dinp(dinp, gelu_pre, N * C, fp8, stream);
  }
  if (wants_dweight) {
    input_amax(inp, q_inp_t.scale, fp8, stream);
    fp8_cast_transpose(inp.data_as<const bf16>(), N, C, q_inp_t.scale, nullptr, q_inp_t.data, stream);
    Fp8GemmOptions accumulate;
    accumulate.accumulate = true;
    fp8_gemm(dweight.data(), DType::kF32, q_dout_t.operand(), q_inp_t.operand(), OC, C, N, accumulate, stream);
  }
}

}  // namespace engine::cuda
