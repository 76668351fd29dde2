// FP8 GEMM through cuBLASLt (issue 35, step 1): E4M3 x E4M3 operands with
// per-tensor scales, f32 accumulation, a bf16 output (or an f32 one that
// accumulates: weight gradients).
//
// Hopper's (and Ada's) FP8 GEMMs take one layout only, "TN": in cuBLASLt's
// column-major terms A transposed and B not, i.e. both operands stored with
// the reduction dimension K contiguous. In the engine's row-major terms that
// is exactly
//
//     out (n, m) = x (n, k) @ w (m, k)^T        (both K-contiguous)
//
// which the forward pass already is (x = input (N, C), w = weight (OC, C)).
// The two backward products need transposed copies (fp8_cast_transpose):
//   dinp (N, C)     = dout (N, OC)  @ [W^T (C, OC)]^T      x = dout,   w = W^T
//   dweight (OC, C) += dout^T (OC, N) @ [inp^T (C, N)]^T    x = dout^T, w = inp^T
//
// Block scaling (Fp8ScaleMode kVec128 / kBlk128, cuBLAS 12.9+, Hopper only):
// each operand's scale pointer is its array of factors (fp8_block.h); 1D x
// 1D, 1D x 2D and 2D x 1D, never 2D x 2D (Transformer Engine refuses it), and
// fast accumulation off (cuBLASLt answers NOT_SUPPORTED otherwise).
//
// cuBLASLt's requirements for FP8 (cuBLAS docs, cublasLtMatmul, "FP8"): TN
// as above; compute CUBLAS_COMPUTE_32F with f32 scale type; A/B scale
// pointers are device f32 values that multiply the product (here the
// scale_inv of each operand's per-tensor scaling, fp8_cast.h); every matrix
// 16-byte aligned with dimensions that are multiples of 16. fp8_gemm checks
// m, n, k % 16 and the alignments itself and refuses anything else in one
// line, instead of leaving cuBLASLt to fail without saying why.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "engine/tensor.h"

namespace engine::cuda {

// How an operand's dequantising factors are laid out (fp8_block.h).
enum class Fp8ScaleMode : std::uint8_t {
  kTensor,  // one f32 for the whole operand
  kVec128,  // one per row and 1 x 128 tile along k (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F)
  kBlk128,  // one per 128 x 128 block (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)
};

// One E4M3 operand: row-major (rows, k) data and the device float(s) that
// dequantise it (x ~= data * scale_inv, per tensor or per block as `mode` says).
struct Fp8Operand {
  const __nv_fp8_e4m3* data = nullptr;
  const float* scale_inv = nullptr;
  Fp8ScaleMode mode = Fp8ScaleMode::kTensor;
};

struct Fp8GemmOptions {
  // out += product (f32 outputs only: weight gradients accumulate) instead of out = product.
  bool accumulate = false;
  // CUBLASLT_MATMUL_DESC_FAST_ACCUM: off keeps cuBLASLt promoting the tensor
  // cores' partial sums to f32 registers (DeepSeek-V3 report, sec. 3.3.2:
  // Hopper's FP8 MMA accumulates with about 14 bits); on is faster and less exact.
  bool fast_accum = false;
  // The epilogue, for a bf16 output that does not accumulate (all null: none),
  // applied to the f32 product before the one rounding to bf16:
  //   bias      (m) bf16, added to every row of out       (CUBLASLT_EPILOGUE_BIAS)
  //   gelu_aux  (n, m) bf16: out = gelu(product + bias), and gelu_aux = the
  //             pre-activation, which GELU's backward reads (GELU_AUX[_BIAS];
  //             cuBLASLt's GELU is the tanh approximation, as gelu.cu's)
  //   residual  (n, m) bf16, added too: cuBLASLt's C with beta 1
  // Each 16-byte aligned.
  const void* bias = nullptr;
  void* gelu_aux = nullptr;
  const void* residual = nullptr;
  bool has_epilogue() const { return bias != nullptr || gelu_aux != nullptr || residual != nullptr; }
};

// out (n, m) row-major = (x (n, k) @ w (m, k)^T) * (*x.scale_inv) * (*w.scale_inv)
// [+ out when accumulating]. out_dtype is kBF16 or kF32 (kF32 required to
// accumulate). Enqueued on `stream` (the context's: the cuBLASLt workspace is
// the context's), no host synchronisation except the first call of a shape
// under ENGINE_GEMM_SEARCH, which times the candidates like matmul.cu. Throws
// engine::Error on a GPU without FP8 tensor cores, on dimensions that are not
// multiples of 16, on misaligned pointers, and when cuBLASLt has no algorithm.
void fp8_gemm(void* out, DType out_dtype, const Fp8Operand& x, const Fp8Operand& w, std::int64_t n, std::int64_t m,
              std::int64_t k, const Fp8GemmOptions& options, cudaStream_t stream);
// fp8_gemm, but returns false, running no GEMM, where cuBLASLt offers no
// algorithm for the problem that runs (an epilogue it does not fuse with FP8
// operands on this GPU, say) or an epilogue pointer is not 16-byte aligned,
// so the caller can run the plain GEMM and an elementwise pass instead. The
// answer is cached per problem, as the algorithm is.
bool try_fp8_gemm(void* out, DType out_dtype, const Fp8Operand& x, const Fp8Operand& w, std::int64_t n,
                  std::int64_t m, std::int64_t k, const Fp8GemmOptions& options, cudaStream_t stream);

// Whether this build's cuBLASLt and `device` can run block-scaled FP8 GEMMs
// (Fp8ScaleMode kVec128 / kBlk128): headers and library 12.9 or later, and a
// Hopper GPU (compute capability 9.x). When not, *why says which is missing.
bool fp8_block_scaling_supported(int device, std::string* why = nullptr);

// Whether the FP8 linear layers ask fp8_gemm for epilogues (bias, GELU,
// residual) instead of an elementwise pass after it: ENGINE_FP8_EPILOGUES,
// "1" (default) or "0" (to measure what the fusion saves, or to step around a
// fused kernel that turns out slower). Any other value is an error naming it.
bool fp8_gemm_epilogues_enabled();

// Whether `device` has FP8 tensor cores that this code is written for:
// compute capability 8.9 (Ada) or 9.x (Hopper). When not, *why (if given)
// says which GPU it is and what it has.
bool fp8_device_supported(int device, std::string* why = nullptr);
// Throws engine::Error with that sentence when not.
void check_fp8_device(int device);

// The cuBLASLt algorithm fp8_gemm uses for this problem (on the current
// device, 256-byte aligned pointers), in words: algorithm id, tile, stages,
// split-K, and the heuristic's waves count. For benchmarks' logs: call it
// after fp8_gemm has run the problem, so that under ENGINE_GEMM_SEARCH it
// names the searched winner (before, it caches the heuristic's first, untimed).
std::string fp8_gemm_algorithm(DType out_dtype, std::int64_t n, std::int64_t m, std::int64_t k,
                               const Fp8GemmOptions& options);

// Whether this cuBLASLt offers block-scaled FP8 GEMMs for this problem on the
// current device: per-128-element vectors of f32 scales along K for x
// (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, activations) with 128 x 128 blocks
// (BLK128x128_32F) or VEC128 for w, as DeepSeek-V3 trains. One line of text
// per combination ("found N algorithms" or the status); only per-tensor
// scaling is implemented.
std::string fp8_block_scaling_report(std::int64_t n, std::int64_t m, std::int64_t k);

}  // namespace engine::cuda
