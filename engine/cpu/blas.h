// Row-major GEMM over float or double, forwarding to CBLAS (OpenBLAS).
//
// C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C, with leading
// dimensions given explicitly so that strided sub-matrices (one head of a
// (B, T, 3C) qkv tensor: lda = 3C) go to BLAS without a gather.
//
// The OpenMP build of OpenBLAS is linked: called from serial code a gemm uses
// all OpenMP threads; called from inside an `omp parallel` region it runs on
// the calling thread only, which is what the per-head attention loops want.
#pragma once

#include <cblas.h>

#include <cstdint>

namespace engine::cpu {

enum class Trans : bool { kNo = false, kYes = true };

inline CBLAS_TRANSPOSE to_cblas(Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; }

inline void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                 const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
                 std::int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
              static_cast<int>(ldc));
}

inline void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
                 const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C,
                 std::int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_dgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
              static_cast<int>(ldc));
}

}  // namespace engine::cpu
