// The op set: everything a GPT step computes, as functions over Tensor views.
//
// Each op checks shapes, then dispatches on the tensors' device to the CPU
// backend (engine/cpu/, fp32 or fp64, OpenMP + BLAS) or the CUDA backend
// (engine/cuda/, bf16 activations with fp32 accumulation, or fp32).
//
// Conventions (llm.c's, made explicit):
// - Weights are (out_features, in_features); a linear layer computes
//   out = inp @ weight^T + bias.
// - Parameter gradients ALWAYS accumulate (+=): gradient accumulation over
//   micro-batches needs no extra buffer.
// - Input gradients are written (=) unless the op's comment says "accumulates";
//   layernorm_backward accumulates into dinp so the residual stream's gradient
//   is one buffer updated in place through the whole backward pass.
// - N is the number of token positions (B*T) for position-wise ops.
// - Optional tensors are passed as an empty Tensor{}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "engine/tensor.h"

namespace engine::ops {

// ---- memory and elementwise -----------------------------------------------
void fill(const Tensor& t, double value);
void copy(const Tensor& dst, const Tensor& src);  // same element count; may cross devices, may convert dtype
void scale(const Tensor& t, double factor);       // t *= factor
void add(const Tensor& out, const Tensor& a, const Tensor& b);  // out = a + b (out may alias a or b)
void accumulate(const Tensor& dst, const Tensor& src);          // dst += src
double sum_of_squares(const Tensor& t);  // accumulated in fp64; synchronises on CUDA

// ---- embedding --------------------------------------------------------------
// out[b,t,:] = wte[tokens[b,t] - vocab_start, :] + wpe[position_start + t, :]
// A token outside [vocab_start, vocab_start + V) contributes a zero row (this
// is how a vocabulary-parallel shard of wte sees the tokens it does not hold).
// Pass an empty wpe to add no position embedding.
//   out (B,T,C), tokens (B,T) i32, wte (V,C), wpe (maxT,C)
void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       std::int64_t vocab_start = 0, std::int64_t position_start = 0);
// dwte, dwpe accumulate; empty dwpe skips the position table.
void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        std::int64_t vocab_start = 0, std::int64_t position_start = 0);

// ---- layer norm (Ba et al. 2016) ---------------------------------------------
// rstd = 1 / sqrt(biased variance + eps); GPT-2's eps is 1e-5
// (GptConfig::norm_eps, config.json's layer_norm_epsilon).
//   out (N,C), mean (N), rstd (N), inp (N,C), weight (C), bias (C)
// Statistics (mean, rstd, losses, attention's saved state) are f32, or f64 on
// the CPU's fp64 reference path; weights may be f32 while activations are bf16.
// out_amax (one f32 on out's device), if given: set to max |out| over the
// values as stored (NaN if any is NaN), computed as the rows are written, so
// an FP8 matmul reading out need not read it once more for its amax
// (Fp8Options::inp_amax; issue 35).
void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, double eps, const Tensor& out_amax = {});
// dinp ACCUMULATES (+=); dweight, dbias accumulate.
void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd);

// ---- RMSNorm (Zhang & Sennrich 2019), as Llama uses -------------------------
// out = inp * rstd * weight, rstd = 1 / sqrt(mean_c(inp^2) + eps); no mean is
// subtracted and there is no bias (Hugging Face's LlamaRMSNorm / Qwen2RMSNorm).
//   out (N,C), rstd (N) statistics dtype, inp (N,C), weight (C)
// out_amax: as layernorm_forward's.
void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, double eps,
                     const Tensor& out_amax = {});
// dinp ACCUMULATES (+=) like layernorm_backward's; dweight accumulates.
void rmsnorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd);

// ---- linear layers ----------------------------------------------------------
// How a linear layer's matmul takes its operands (issue 35).
enum class MatmulFormat : std::uint8_t {
  kNative,  // in their own dtype (bf16 or f32; f64 on the CPU's reference path)
  // Each GEMM operand quantised to FP8 E4M3 with a per-tensor current scale
  // (amax of that tensor now, not a history: engine/cpu/fp8_e4m3.h), or per
  // block (Fp8Options::scaling, Fp8Scaling below), the
  // product accumulated in f32 and rescaled; biases, residuals, GELU and the
  // bias gradient stay in the activations' dtype and f32. On CUDA the FP8
  // tensor cores (sm_89/sm_90; bf16 activations; every GEMM dimension a
  // multiple of 16); on the CPU the quantise-dequantise reference, the same
  // rounding with the product in f32 (f32 activations), which the CUDA op
  // tests hold the device to.
  kFp8E4M3,
};

// A layer's weight in FP8, made once per optimizer step instead of at every
// use (Transformer Engine's practice): its scale (with the amax, reduced over
// the tp group for a shard), its E4M3 copy for the forward GEMM and its
// transposed copy for dinp on CUDA, its dequantised image on the CPU. The
// first op that needs a part makes it and sets its flag; the owner
// (model::GptStage) provides the storage and clears the flags whenever the
// weights change (every optimizer step). A stale cache is a wrong model, so
// test_parity_fp8 trains with and without it and expects the same numbers.
struct Fp8WeightCache {
  Tensor storage;  // fp8_weight_cache_bytes(device, out_features, in_features) bytes, 256-byte aligned
  bool scaled = false, cast = false, transposed = false;
  void invalidate() { scaled = cast = transposed = false; }
};
std::size_t fp8_weight_cache_bytes(DeviceType device, std::int64_t out_features, std::int64_t in_features);

// How FP8 operands are scaled. kTensor: one current scale per tensor (its
// amax now; Transformer Engine's current scaling). kBlock: DeepSeek-V3's
// fine-grained scaling (technical report, sec. 3.3.1): activations and output
// gradients per 1 x kFp8BlockSize tile along the reduction dimension of the
// GEMM that reads them, so a tensor two GEMMs read along different dimensions
// is quantised twice (dout along OC for dinp, along the tokens for dweight;
// the input along C forward, along the tokens for dweight), and weights per
// kFp8BlockSize x kFp8BlockSize block (one set of scales serves W and W^T).
// Each block's scale is its own block's amax: no amax slot or group reduction
// is used. Under tensor parallelism a rank's blocks are cut from its own
// shard, so they are the whole tensor's blocks only where each shard's width
// along the cut is a multiple of kFp8BlockSize.
enum class Fp8Scaling : std::uint8_t { kTensor, kBlock };
inline constexpr std::int64_t kFp8BlockSize = 128;
const char* fp8_scaling_name(Fp8Scaling scaling);  // "tensor" | "block"
Fp8Scaling parse_fp8_scaling(const std::string& name);  // throws naming the value

// How the FP8 ops treat one layer's operands.
// Under tensor parallelism a rank holds only a shard of some of them (a
// column- or row-parallel weight, a row-parallel layer's input, a
// column-parallel layer's output gradient). Scaled by its own amax, each
// shard would be rounded on its own E4M3 grid; here a sharded operand's amax
// is first max-reduced over the group, so every rank uses the whole tensor's
// scale, and the ranks round every element as one process does (Transformer
// Engine's amax reduction group does the same). reduce_max all-reduces, with
// max, a one-element f32 tensor on the operands' device; the flags say which
// operands are shards. Every rank of the group must make the same calls
// (they do: each runs the same ops). weight_cache, if set, keeps the weight's
// FP8 form between uses (above).
//
// The amax slots let an op skip the pass that reads a whole tensor only for
// its amax (issue 35: each operand's amax computed where it is produced).
// They change no number, only which kernel finds the maximum. Each is one f32
// on the op's device, or empty (the op then computes what it needs in its own
// scratch). They describe one call: model::TransformerBlock sets them on a
// copy of the layer's options.
//   inp_amax   inp's amax slot. With inp_amax_ready it holds the amax inp is
//              scaled by, final (a shard's already max-reduced over the
//              group): written by the kernel that produced inp, or by this
//              layer's forward; the op reads inp only to cast it. Without,
//              the op computes that amax (reduced for a shard) and leaves it
//              there, where the backward finds it ready.
//   dout_amax  backward: dout's amax, final and ready, or empty.
//   out_amax   forward: set to max |out| over this rank's out, by the kernel
//              that applies bias and GELU (with pre_gelu; else a pass of its
//              own). Not reduced: the caller max-reduces it when the next
//              layer reads out as a shard.
//   dinp_amax  backward: set to max |dinp| over this rank's dinp, by the kernel
//              that finishes dinp (the GELU backward, with gelu_pre; else a
//              pass of its own). Not reduced, as out_amax.
struct Fp8Options {
  Fp8Scaling scaling = Fp8Scaling::kTensor;
  std::function<void(const Tensor& amax)> reduce_max;
  bool inp = false, weight = false, dout = false;
  Fp8WeightCache* weight_cache = nullptr;
  Tensor inp_amax;
  bool inp_amax_ready = false;
  Tensor dout_amax, out_amax, dinp_amax;
};

// out = inp @ weight^T + bias.            out (N,OC), inp (N,C), weight (OC,C), bias (OC) or empty
// With pre_gelu given: pre_gelu = inp @ weight^T + bias and out = gelu(pre_gelu)
// (GELU fused into the epilogue; the pre-activation is kept for backward).
// `fp8` (FP8 only; may be null): Fp8Options above.
void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    const Tensor& pre_gelu = {}, MatmulFormat format = MatmulFormat::kNative,
                    const Fp8Options* fp8 = nullptr);
// out = residual + (inp @ weight^T + bias): a residual connection's add folded
// into the projection GEMM (cuBLASLt's C matrix with beta = 1), so the branch
// is never written and read back. out must not overlap residual.
void matmul_forward_add(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                        const Tensor& residual, MatmulFormat format = MatmulFormat::kNative,
                        const Fp8Options* fp8 = nullptr);
// dinp = dout @ weight (written); dweight += dout^T @ inp; dbias += sum_n dout.
// With gelu_pre given (the pre-activation that produced `inp`'s producer's
// output), dinp is multiplied by gelu'(gelu_pre): the GELU backward of the
// previous layer fused into this dgrad. Any of dinp/dweight/dbias may be empty.
void matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, const Tensor& gelu_pre = {},
                     MatmulFormat format = MatmulFormat::kNative, const Fp8Options* fp8 = nullptr);
// The weight-gradient half of matmul_backward on its own: dweight += dout^T @
// inp; dbias += sum_n dout (dbias may be empty). It reads no weight, so a
// zero-bubble pipeline (Qi et al. 2024) can run it long after the input
// gradient, when a ZeRO-3 rank no longer holds the gathered weights.
void matmul_weight_grad(const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                        MatmulFormat format = MatmulFormat::kNative, const Fp8Options* fp8 = nullptr);

// GELU, tanh approximation (Hendrycks & Gimpel 2016), as GPT-2 uses.
void gelu_forward(const Tensor& out, const Tensor& inp);
void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout);  // dinp = dout * gelu'(inp)

// SwiGLU (Shazeer 2020), the gated MLP of Llama: out = silu(gate) * up with
// silu(x) = x * sigmoid(x), where each row of inp is [gate | up], the output
// of one fused gate/up matmul (under tensor parallelism each rank's slice is
// [gate_r | up_r], so the layout holds per rank).
//   out (N,F), inp (N,2F)
void swiglu_forward(const Tensor& out, const Tensor& inp);
// dinp (N,2F) is written: [dout * up * silu'(gate) | dout * silu(gate)].
void swiglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp);

// ---- rotary position embedding (Su et al. 2021), Hugging Face's layout ------
// Rotates q and k of qkv (B,T,(H+2*KV)*D) IN PLACE (v is untouched): for
// position p = position_start + t and i < D/2, with a = p * inv_freq[i]
// (the product rounded to f32, as transformers computes it),
//   x'[i]       = x[i] cos a - x[i + D/2] sin a
//   x'[i + D/2] = x[i + D/2] cos a + x[i] sin a
// the rotate-half convention of LlamaForCausalLM (not the interleaved pairs
// of the paper). inv_freq (D/2) f32 on the same device: the frequencies,
// with any scaling (Llama 3's) already applied (model/rope.h makes them).
void rope_forward(const Tensor& qkv, const Tensor& inv_freq, int n_head, int n_kv_head,
                  std::int64_t position_start = 0);
// The transpose (rotation by -a) applied IN PLACE to the q and k parts of
// dqkv (B,T,(H+2*KV)*D): the gradient of the rotation's input.
void rope_backward(const Tensor& dqkv, const Tensor& inv_freq, int n_head, int n_kv_head,
                   std::int64_t position_start = 0);

// ---- causal self-attention core ---------------------------------------------
// qkv (B,T,(H+2*KV)*D) holds [q | k | v] per position: H query heads, then KV
// key heads and KV value heads, each of size D; query head h attends with
// key/value head h / (H/KV) (grouped-query attention, Ainslie et al. 2023;
// KV = H is multi-head attention, n_kv_head = 0 means KV = H).
// out (B,T,H*D) = softmax(q k^T / sqrt(D), causal) v per head.
// `saved` is what backward needs besides qkv and out; its shape is
// backend-defined: attention_saved_shape() says what to allocate (H is the
// query heads).
Shape attention_saved_shape(DeviceType device, std::int64_t B, std::int64_t H, std::int64_t T);
DType attention_saved_dtype(DeviceType device, DType activation_dtype);
void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, int n_head, int n_kv_head = 0);
// dqkv (B,T,(H+2*KV)*D) is written (each key/value head's gradient summed
// over the query heads of its group).
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& saved, int n_head, int n_kv_head = 0);

// ---- classifier: softmax + cross-entropy, fused -------------------------------
// logits (N,Vp): columns >= vocab_size are padding and ignored.
// losses[n] = -log softmax(logits[n, :vocab_size])[targets[n]]   (f32)
// If grad_scale != 0, logits is overwritten IN PLACE with its gradient
//   dlogits = grad_scale * (softmax - onehot(target)), padding columns 0,
// so probabilities are never stored. targets (N) i32.
void softmax_cross_entropy(const Tensor& losses, const Tensor& logits, const Tensor& targets,
                           std::int64_t vocab_size, double grad_scale);

// Vocabulary-parallel softmax + cross-entropy (Megatron-LM's
// _VocabParallelCrossEntropy; Shoeybi et al. 2019, sec. 3): under tensor
// parallelism each rank holds the logits of a contiguous slice of the padded
// vocabulary, and the loss is computed without gathering them. Three steps,
// with the caller's all-reduce over the tensor-parallel group after the first
// two:
//   1. cross_entropy_partial_max   then all-reduce MAX of row_max
//   2. cross_entropy_partial_sums  then all-reduce SUM of sums
//   3. cross_entropy_finish        losses (identical on every rank) + dlogits
// logits (N, V_local) holds global vocabulary columns [vocab_start, vocab_start + V_local);
// global columns >= vocab_size are padding and ignored, as in
// softmax_cross_entropy (a slice may be all padding). With vocab_start = 0 and
// V_local = Vp the three steps compute what softmax_cross_entropy does.
// Statistics (row_max, sums, losses) are f32, or f64 with f64 logits.
// targets (N) i32 in [0, vocab_size), the same on every rank.
//
// row_max[n] = max over this slice's valid columns of logits[n, :]; -inf if
// the slice holds no valid column.   row_max (N)
void cross_entropy_partial_max(const Tensor& row_max, const Tensor& logits, std::int64_t vocab_start,
                               std::int64_t vocab_size);
// With row_max the global (all-reduced) max:
//   sums[0, n] = sum over this slice's valid columns of exp(logits[n, :] - row_max[n])
//   sums[1, n] = logits[n, targets[n] - vocab_start] if the target is in this
//                slice, else 0
// One buffer, so the caller all-reduces once.   sums (2, N)
void cross_entropy_partial_sums(const Tensor& sums, const Tensor& logits, const Tensor& row_max,
                                const Tensor& targets, std::int64_t vocab_start, std::int64_t vocab_size);
// With row_max and sums all-reduced:
//   losses[n] = log(sums[0, n]) + row_max[n] - sums[1, n]
// If grad_scale != 0, logits is overwritten IN PLACE with this slice of the gradient
//   dlogits = grad_scale * (exp(logits - row_max) / sums[0] - onehot(target)),
// padding columns 0.   losses (N)
void cross_entropy_finish(const Tensor& losses, const Tensor& logits, const Tensor& row_max, const Tensor& sums,
                          const Tensor& targets, std::int64_t vocab_start, std::int64_t vocab_size,
                          double grad_scale);

// ---- optimizer ----------------------------------------------------------------
struct AdamWHyper {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0;  // decoupled (Loshchilov & Hutter 2019); 0 for biases and norms
  double grad_scale = 1;    // grads are multiplied by this first (global-norm clipping)
  std::int64_t step = 1;    // 1-based, for bias correction
};
// One AdamW step over matching flat ranges (all f32): master params, grads,
// first and second moments. If `working` is non-empty (the bf16 copy the
// model computes with), it receives the updated params.
void adamw_update(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                  const AdamWHyper& hyper, const Tensor& working = {});

}  // namespace engine::ops
