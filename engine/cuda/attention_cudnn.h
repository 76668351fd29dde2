// Causal attention through cuDNN's fused scaled-dot-product attention
// (cuDNN frontend graph API, sdpa / sdpa_backward), for bf16 activations.
//
// Same layouts and the same saved state as the built-in FlashAttention-2
// path (attention_forward.cu, attention_backward.cu): qkv (B, T, W) with
// W = (H + 2 KV) D (H query heads, then KV key and KV value heads), out
// (B, T, C = H D), lse (B, H, T) f32 = log sum_j exp(q.k_j * scale), dqkv
// (B, T, W). cuDNN reads q, k and v in place through strides (no permute), as
// llm.c does; grouped-query attention is cuDNN's own (K and V tensors with
// KV heads, H / KV query heads each; their gradients summed over the group).
//
// Which implementation runs: ENGINE_ATTENTION=cudnn | flash | auto (the
// default: cuDNN where this build has it and it supports the shape, else
// the built-in kernels). A shape is decided once, forward and backward
// together, so the two never mix.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

namespace engine::cuda {

// Each runs the op on cuDNN and returns true, or returns false, doing
// nothing, when cuDNN does not take it (ENGINE_ATTENTION=flash, a build
// without cuDNN, or a shape cuDNN declined): the caller then runs the
// built-in kernels. The first call per shape builds both graphs (tens to
// hundreds of milliseconds). Raises when ENGINE_ATTENTION=cudnn and cuDNN
// cannot run the shape.
bool cudnn_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int H, int KV,
                             int D, float scale);
bool cudnn_attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const __nv_bfloat16* out, const float* lse, int B, int T, int H, int KV, int D,
                              float scale);

}  // namespace engine::cuda
