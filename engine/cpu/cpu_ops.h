// CPU backend: fp32 (and fp64, for the reference checks), OpenMP + BLAS.
// Shapes were checked by engine/ops.cpp; these functions trust them.
// One function per op of engine/ops.h, same contract (see there).
#pragma once

#include <cstdint>

#include "engine/ops.h"

namespace engine::cpu {

using ops::AdamWHyper;
void fill(const Tensor& t, double value);
void copy(const Tensor& dst, const Tensor& src);  // same element count; may cross devices, may convert dtype
void scale(const Tensor& t, double factor);       // t *= factor
void add(const Tensor& out, const Tensor& a, const Tensor& b);  // out = a + b (out may alias a or b)
void accumulate(const Tensor& dst, const Tensor& src);          // dst += src
double sum_of_squares(const Tensor& t);  // accumulated in fp64
void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       std::int64_t vocab_start, std::int64_t position_start);
void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        std::int64_t vocab_start, std::int64_t position_start);
void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, double eps, const Tensor& out_amax);
void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd);
void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    const Tensor& pre_gelu);
void matmul_forward_add(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                        const Tensor& residual);  // out = residual + inp @ weight^T + bias
void matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, const Tensor& gelu_pre);
// The same three with MatmulFormat::kFp8E4M3: the quantise-dequantise reference (fp8_matmul.cpp).
void fp8_matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                        const Tensor& pre_gelu, const ops::Fp8Options* fp8);
void fp8_matmul_forward_add(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                            const Tensor& residual, const ops::Fp8Options* fp8);
void fp8_matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                         const Tensor& inp, const Tensor& weight, const Tensor& gelu_pre,
                         const ops::Fp8Options* fp8);
// *amax_slot (one f32) = max |x| of an f32 tensor, NaN if any element is
// (fp8_e4m3.h's e4m3_amax): the norms' out_amax and the FP8 ops' amax slots.
// A no-op for an empty slot.
void write_amax(const Tensor& amax_slot, const Tensor& x, const char* what);
void gelu_forward(const Tensor& out, const Tensor& inp);
void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout);  // dinp = dout * gelu'(inp)
void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, double eps,
                     const Tensor& out_amax);
void rmsnorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd);
void swiglu_forward(const Tensor& out, const Tensor& inp);
void swiglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp);
void rope_forward(const Tensor& qkv, const Tensor& inv_freq, int n_head, int n_kv_head, std::int64_t position_start);
void rope_backward(const Tensor& dqkv, const Tensor& inv_freq, int n_head, int n_kv_head,
                   std::int64_t position_start);
void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, int n_head, int n_kv_head);
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& saved, int n_head, int n_kv_head);
void softmax_cross_entropy(const Tensor& losses, const Tensor& logits, const Tensor& targets,
                           std::int64_t vocab_size, double grad_scale);
void cross_entropy_partial_max(const Tensor& row_max, const Tensor& logits, std::int64_t vocab_start,
                               std::int64_t vocab_size);
void cross_entropy_partial_sums(const Tensor& sums, const Tensor& logits, const Tensor& row_max,
                                const Tensor& targets, std::int64_t vocab_start, std::int64_t vocab_size);
void cross_entropy_finish(const Tensor& losses, const Tensor& logits, const Tensor& row_max, const Tensor& sums,
                          const Tensor& targets, std::int64_t vocab_start, std::int64_t vocab_size,
                          double grad_scale);
void adamw_update(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                  const AdamWHyper& hyper, const Tensor& working);

}  // namespace engine::cpu
