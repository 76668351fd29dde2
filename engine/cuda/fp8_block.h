// FP8 E4M3 casts with block scaling (ops::Fp8Scaling::kBlock; DeepSeek-V3
// technical report, sec. 3.3.1): each 1 x 128 tile along an operand's
// reduction dimension, or each 128 x 128 block of a weight, has its own
// current scale (448 / the block's amax, as per-tensor scaling's rule,
// e4m3.cuh), and the scale factors are written where cuBLASLt's block-scaled
// FP8 GEMM reads them (fp8_gemm.h, Fp8ScaleMode):
//
//   kVec128 (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) for an operand of R rows
//     and K along the reduction, stored (R, K) row-major: one f32 per row and
//     128-element tile, at [kb * pad4(R) + r] (the tile index outermost, the
//     rows contiguous, their count rounded up to a multiple of 4);
//   kBlk128 (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F): one f32 per 128 x
//     128 block, at [rb * pad4(ceil(K / 128)) + kb].
//
// The layouts are Transformer Engine's "GEMM-ready" ones (its
// quantize_transpose_{vector,square}_blockwise kernels and
// float8_blockwise_tensor.py's get_scale_shape), which it hands to
// cublasLtMatmul as they are. Each value is the factor that dequantises
// (x ~= e4m3 * s, the scale's inverse), as per-tensor scale_inv is.
// Edge tiles and blocks are what remains of the matrix. Bit for bit what
// engine/cpu/fp8_e4m3.h's e4m3_block_image rounds to.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace engine::cuda {

inline constexpr std::int64_t kFp8Block = 128;

inline std::int64_t fp8_blocks(std::int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }
inline std::int64_t fp8_pad4(std::int64_t n) { return (n + 3) / 4 * 4; }
// Floats of an operand's scale factors (R rows, K along the reduction).
inline std::int64_t fp8_vec128_scales(std::int64_t rows, std::int64_t k) { return fp8_blocks(k) * fp8_pad4(rows); }
inline std::int64_t fp8_blk128_scales(std::int64_t rows, std::int64_t k) {
  return fp8_blocks(rows) * fp8_pad4(fp8_blocks(k));
}

// x (rows, cols) bf16 row-major, reduced along cols: q (rows, cols) E4M3 in
// 1 x 128 tiles along each row, scales kVec128 for (rows, K = cols).
void fp8_block_cast_rows(const __nv_bfloat16* x, std::int64_t rows, std::int64_t cols, __nv_fp8_e4m3* q,
                         float* scales, cudaStream_t stream);

// x (rows, cols) bf16 row-major, for a GEMM that reduces along the rows (the
// tokens of a weight gradient): qt (cols, rows) = the transpose in E4M3,
// tiled 128 x 1 in x's terms (1 x 128 along each row of qt), scales kVec128
// for (R = cols, K = rows).
void fp8_block_cast_transpose_columns(const __nv_bfloat16* x, std::int64_t rows, std::int64_t cols,
                                      __nv_fp8_e4m3* qt, float* scales, cudaStream_t stream);

// w (rows, cols) bf16 row-major in 128 x 128 blocks: q (rows, cols) with
// scales kBlk128 for (rows, K = cols), and qt (cols, rows) = its transpose
// (the same blocks, the same codes) with scales_t kBlk128 for (cols, K =
// rows). Either pair may be null (not both): the input gradient of a weight
// kept in no cache needs only W^T. Once per optimizer step when cached, so
// the transpose is written one byte at a time.
void fp8_block_cast_weight(const __nv_bfloat16* w, std::int64_t rows, std::int64_t cols, __nv_fp8_e4m3* q,
                           float* scales, __nv_fp8_e4m3* qt, float* scales_t, cudaStream_t stream);

}  // namespace engine::cuda
