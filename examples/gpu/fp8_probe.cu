// A diagnostic for a lent GPU: which part of engine/cuda/fp8_gemm.cu's
// cuBLASLt set-up makes cublasLtMatmul answer CUBLAS_STATUS_NOT_SUPPORTED
// after the heuristic has offered an algorithm (seen on an H200, cuBLASLt
// 13.1, 2026-11-26). Each variant changes one thing from the engine's set-up
// and prints the heuristic's and the matmul's status. Standalone, so it
// compiles in seconds where the engine's build would take a minute:
//
//   nvcc -O2 -arch=sm_90 -o fp8_probe examples/gpu/fp8_probe.cu -lcublasLt
//   CUBLASLT_LOG_LEVEL=5 ./fp8_probe 0     # the engine's set-up, with cuBLASLt's trace
//   ./fp8_probe                            # every variant
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

struct Variant {
  const char* what;
  bool fast_accum_attr = true;   // set CUBLASLT_MATMUL_DESC_FAST_ACCUM (to 0)
  bool reduction_mask = true;    // CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = COMPUTE_TYPE (bf16 out)
  bool scale_pointers = true;    // A and B scale pointers
  bool f32_out = false;          // D in f32 instead of bf16
  bool separate_c = false;       // C its own buffer (beta 0 either way)
  bool alignment_prefs = true;   // MIN_ALIGNMENT_*_BYTES = 256
  int scale_which = 3;           // with scale_pointers: 1 A only, 2 B only, 3 both
  bool explicit_mode = false;    // A/B_SCALE_MODE set to SCALAR_32F explicitly
  bool device_alpha = false;     // POINTER_MODE_DEVICE: alpha and beta read from device memory
};

const Variant kVariants[] = {
    {"0 the engine's set-up (bf16 out)"},
    {"1 no FAST_ACCUM attribute", false},
    {"2 no reduction-scheme mask", true, false},
    {"3 no scale pointers", true, true, false},
    {"4 f32 out", true, true, true, true},
    {"5 C a separate buffer", true, true, true, false, true},
    {"6 no alignment preferences", true, true, true, false, false, false},
    {"7 neither FAST_ACCUM nor the reduction mask", false, false},
    {"8 A scale pointer only", true, true, true, false, false, true, 1},
    {"9 B scale pointer only", true, true, true, false, false, true, 2},
    {"10 scale modes set to SCALAR_32F explicitly", true, true, true, false, false, true, 3, true},
    {"11 scale pointers, alpha/beta on the device", true, true, true, false, false, true, 3, false, true},
    {"12 no scale pointers, alpha/beta on the device", true, true, false, false, false, true, 3, false, true},
    {"13 scale pointers, f32 out, no FAST_ACCUM", false, true, true, true},
};

#define CHECK_CUDA(x)                                                                 \
  do {                                                                                \
    cudaError_t e = (x);                                                              \
    if (e != cudaSuccess) {                                                           \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

void run(const Variant& v, cublasLtHandle_t lt, void* workspace, std::size_t workspace_bytes) {
  const std::int64_t n = 256, m = 4800, k = 1600;
  void *w = nullptr, *x = nullptr, *d = nullptr, *c = nullptr;
  float* scales = nullptr;
  CHECK_CUDA(cudaMalloc(&w, m * k));
  CHECK_CUDA(cudaMalloc(&x, n * k));
  CHECK_CUDA(cudaMalloc(&d, n * m * 4));
  CHECK_CUDA(cudaMalloc(&c, n * m * 4));
  CHECK_CUDA(cudaMalloc(&scales, 2 * sizeof(float)));
  CHECK_CUDA(cudaMemset(w, 0x38, m * k));  // E4M3 0x38 = 1.0
  CHECK_CUDA(cudaMemset(x, 0x38, n * k));
  const float ones[2] = {1.0f, 1.0f};
  CHECK_CUDA(cudaMemcpy(scales, ones, sizeof ones, cudaMemcpyHostToDevice));

  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, dl = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (v.fast_accum_attr) {
    const std::int8_t fast = 0;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
  }
  if (v.scale_pointers) {
    const float* sa = scales;
    const float* sb = scales + 1;
    if (v.scale_which & 1) cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
    if (v.scale_which & 2) cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
    if (v.explicit_mode) {
      const std::int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode);
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
    }
  }
  float* alpha_beta = nullptr;  // device copies of alpha = 1, beta = 0
  CHECK_CUDA(cudaMalloc(&alpha_beta, 2 * sizeof(float)));
  const float ab[2] = {1.0f, 0.0f};
  CHECK_CUDA(cudaMemcpy(alpha_beta, ab, sizeof ab, cudaMemcpyHostToDevice));
  if (v.device_alpha) {
    const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode);
  }
  const cudaDataType_t out = v.f32_out ? CUDA_R_32F : CUDA_R_16BF;
  cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, k, m, k);
  cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, k, n, k);
  cublasLtMatrixLayoutCreate(&dl, out, m, n, m);
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                       sizeof workspace_bytes);
  if (v.alignment_prefs) {
    const std::uint32_t al = 256;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
  }
  if (v.reduction_mask && !v.f32_out) {
    const std::uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes);
  }
  cublasLtMatmulHeuristicResult_t results[8] = {};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, dl, dl, pref, 8, results, &found);
  std::printf("%-46s heuristic %d, %d found;", v.what, static_cast<int>(hs), found);
  const float alpha = 1.0f, beta = 0.0f;
  for (int i = 0; i < found && i < 4; ++i) {
    const void* alpha_p = v.device_alpha ? static_cast<const void*>(alpha_beta) : &alpha;
    const void* beta_p = v.device_alpha ? static_cast<const void*>(alpha_beta + 1) : &beta;
    const cublasStatus_t ms = cublasLtMatmul(lt, op, alpha_p, w, a, x, b, beta_p, v.separate_c ? c : d, dl, d, dl,
                                             &results[i].algo, workspace, workspace_bytes, nullptr);
    std::printf(" matmul[%d] %d (ws %zu)", i, static_cast<int>(ms), results[i].workspaceSize);
  }
  const cudaError_t sync = cudaDeviceSynchronize();
  std::printf(" | sync %s\n", cudaGetErrorString(sync));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(dl);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatmulDescDestroy(op);
  cudaFree(alpha_beta);
  cudaFree(scales);
  cudaFree(c);
  cudaFree(d);
  cudaFree(x);
  cudaFree(w);
}

}  // namespace

int main(int argc, char** argv) {
  cublasLtHandle_t lt = nullptr;
  cublasLtCreate(&lt);
  std::printf("cuBLASLt %zu\n", cublasLtGetVersion());
  const std::size_t workspace_bytes = 32u << 20;
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, workspace_bytes));
  const int count = sizeof kVariants / sizeof kVariants[0];
  for (int i = 0; i < count; ++i)
    if (argc < 2 || std::atoi(argv[1]) == i) run(kVariants[i], lt, workspace, workspace_bytes);
  cudaFree(workspace);
  cublasLtDestroy(lt);
  return 0;
}
