// FP8 GEMM through cuBLASLt (fp8_gemm.h): the TN product of two E4M3
// operands with per-tensor scales, f32 accumulation, bf16 or f32 output.
//
// Row-major <-> column-major, as in matmul.cu: out (n, m) row-major is, byte
// for byte, D (m x n) column-major with ld m, and
//   D (m x n) = op(A) B,  A = w stored (k x m) column-major (= row-major
//                             (m, k)), op(A) = A^T ("T")
//                         B = x stored (k x n) column-major (= row-major
//                             (n, k)), op(B) = B ("N")
// so both operands have K contiguous, the only layout Hopper's FP8 kernels
// take. Per-tensor scaling: cuBLASLt multiplies the product by
// *A_SCALE_POINTER (an f32 device value), w's scale_inv times x's, computed
// on the stream just before (B's own scale pointer is then not set: see
// build()). Block scaling: each operand's scale pointer is its array of
// factors, with its scale mode (fp8_gemm.h, Fp8ScaleMode).
//
// An epilogue (Fp8GemmOptions: bias, GELU with its aux output, a residual as
// C with beta 1) runs on the f32 product before the one rounding to bf16, as
// matmul.cu's bf16 epilogues do; the bias and aux types default to D's
// (bf16), which cuBLASLt allows for FP8 operands with a bf16 D.
//
// The algorithm is cached per problem (shape, output type, accumulation,
// epilogue, alignment classes, device), like matmul.cu: the heuristic's first, or with
// ENGINE_GEMM_SEARCH=N the fastest of its first N timed on the first call's
// operands (gemm_search.h), so that bf16 and FP8 can be compared on equal terms.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/check.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/context.h"
#include "engine/cuda/fp8_gemm.h"
#include "engine/cuda/gemm_search.h"
#include "engine/cuda/lt_descriptors.h"

namespace engine::cuda {
namespace {

cudaDataType_t out_type(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF32: return CUDA_R_32F;
    default: ENGINE_FAIL("fp8_gemm: output dtype ", dtype_name(dtype), " is not supported (bf16 or f32)");
  }
}

// The problem's descriptors: TN, E4M3 x E4M3 -> out_dtype (C = D), f32
// compute and scale type, fast accumulation as asked, the scale pointer (may
// be a placeholder for a heuristic-only query: cuBLASLt does not read it
// before cublasLtMatmul), and the alignments the pointers really have.
//
// One scale pointer, A's, holding the product of both operands' inverse
// scales: cuBLASLt 13.1 on an H200 (2026-11-26, examples/gpu/fp8_probe.cu,
// RESULTS.md) ran the GEMM with A's scale pointer alone but answered
// CUBLAS_STATUS_NOT_SUPPORTED at cublasLtMatmul, after its heuristic had
// offered algorithms, whenever B's scale pointer was set (alone or with A's).
// Per-tensor scales multiply, so one pointer carries both.
// The epilogue Fp8GemmOptions asks for.
cublasLtEpilogue_t epilogue_of(const Fp8GemmOptions& options) {
  if (options.gelu_aux != nullptr)
    return options.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  return options.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// The scale pointers cuBLASLt reads: per tensor, A's alone holding both
// operands' factors multiplied (above); per block, each operand's array with
// its mode (A is w, B is x).
struct ScalePointers {
  const float* a = nullptr;
  const float* b = nullptr;
  Fp8ScaleMode a_mode = Fp8ScaleMode::kTensor, b_mode = Fp8ScaleMode::kTensor;
  bool blocks() const { return a_mode != Fp8ScaleMode::kTensor; }
};

#if CUBLAS_VERSION >= 120900
std::int32_t lt_scale_mode(Fp8ScaleMode mode) {
  return mode == Fp8ScaleMode::kVec128   ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
         : mode == Fp8ScaleMode::kBlk128 ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                         : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}
#endif

void build(LtDescriptors& desc, DType out_dtype, std::int64_t n, std::int64_t m, std::int64_t k,
           const Fp8GemmOptions& options, const ScalePointers& scales, std::uint32_t align_w, std::uint32_t align_x,
           std::uint32_t align_out, std::uint32_t align_c) {
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = CUBLAS_OP_T, op_b = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const std::int8_t fast_accum = options.fast_accum ? 1 : 0;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                              sizeof(fast_accum)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scales.a,
                                              sizeof(scales.a)));
  if (scales.blocks()) {
#if CUBLAS_VERSION >= 120900
    const std::int32_t a_mode = lt_scale_mode(scales.a_mode), b_mode = lt_scale_mode(scales.b_mode);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scales.b,
                                                sizeof(scales.b)));
#else
    ENGINE_FAIL("fp8_gemm: block scaling needs cuBLAS 12.9 or later; this build's headers are ", CUBLAS_VERSION);
#endif
  }
  const cublasLtEpilogue_t epilogue = epilogue_of(options);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (options.bias != nullptr)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &options.bias,
                                                sizeof(options.bias)));
  if (options.gelu_aux != nullptr) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &options.gelu_aux,
                                                sizeof(options.gelu_aux)));
    const std::int64_t aux_ld = m;  // (n, m) row-major: m x n column-major, like D
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                sizeof(aux_ld)));
  }
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, CUDA_R_8F_E4M3, u(k), u(m), k));  // w: k x m, ld k
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, CUDA_R_8F_E4M3, u(k), u(n), k));  // x: k x n, ld k
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, out_type(out_dtype), u(m), u(n), m));  // out: m x n, ld m

  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.pref));
  const std::size_t workspace_bytes = context().lt_workspace_bytes();
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace_bytes, sizeof(workspace_bytes)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_w,
                                                    sizeof(align_w)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_x,
                                                    sizeof(align_x)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                    &align_c, sizeof(align_c)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                    &align_out, sizeof(align_out)));
  // As in matmul.cu: split-K partial sums only in f32, never in the bf16 output type.
  if (out_dtype == DType::kBF16) {
    const std::uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                      sizeof(schemes)));
  }
}

// scale = a * b, on the stream, so the product is ready when the GEMM reads it.
__global__ void combine_scales_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ out) {
  *out = *a * *b;
}

// One device float per stream for the combined scale: a GEMM reads its slot
// before the next combine on the same stream overwrites it (stream order).
// Allocated once per stream and kept for the life of the process.
float* combined_scale_slot(cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<cudaStream_t, float*> slots;
  std::lock_guard<std::mutex> lock(mutex);
  float*& slot = slots[stream];
  if (slot == nullptr) CUDA_CHECK(cudaMalloc(&slot, sizeof(float)));
  return slot;
}

struct Chosen {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  float waves = 0.0f;
};
using Key = std::array<std::int64_t, 16>;

// Chosen algorithms by problem, for the life of the process.
std::mutex g_cache_mutex;
std::map<Key, Chosen> g_cache;

bool cached(const Key& key, Chosen* chosen) {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  const auto it = g_cache.find(key);
  if (it == g_cache.end()) return false;
  *chosen = it->second;
  return true;
}

void remember(const Key& key, const Chosen& chosen) {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  g_cache.emplace(key, chosen);
}

// A problem whose chosen algorithm cublasLtMatmul refused: another that ran,
// or none (declined from now on).
void replace(const Key& key, const Chosen& chosen) {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  g_cache[key] = chosen;
}
void forget_and_decline(const Key& key) { replace(key, Chosen{}); }

// The heuristic's first algorithm for the problem, or with candidates > 1
// (ENGINE_GEMM_SEARCH, gemm_search.h) the fastest of its first `candidates`,
// timed through launch(algo) (false when one cannot run). A query-only
// caller passes candidates 1 and is never asked to launch.
template <typename Launch>
Chosen heuristic(const LtDescriptors& desc, int candidates, Launch&& launch) {
  Chosen fresh;
  std::array<cublasLtMatmulHeuristicResult_t, kMaxGemmSearchCandidates> results{};
  int found = 0;
  candidates = std::clamp(candidates, 1, kMaxGemmSearchCandidates);
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(context().lt(), desc.op, desc.a, desc.b, desc.d,
                                                               desc.d, desc.pref, candidates, results.data(), &found);
  if (status != CUBLAS_STATUS_SUCCESS || found <= 0) return fresh;
  fresh.found = true;
  fresh.algo = results[0].algo;
  fresh.waves = results[0].wavesCount;
  if (found > 1) {
    const int best = fastest_candidate(found, context().stream(), [&](int i) {
      return results[i].state == CUBLAS_STATUS_SUCCESS && launch(results[i].algo);
    });
    if (best >= 0) {
      fresh.algo = results[best].algo;
      fresh.waves = results[best].wavesCount;
    }
  }
  return fresh;
}

Key key_of(DType out_dtype, std::int64_t n, std::int64_t m, std::int64_t k, const Fp8GemmOptions& options,
           std::uint32_t align_w, std::uint32_t align_x, std::uint32_t align_out, Fp8ScaleMode w_mode,
           Fp8ScaleMode x_mode) {
  return {context().device(),
          static_cast<std::int64_t>(out_dtype),
          n,
          m,
          k,
          options.accumulate,
          options.fast_accum,
          align_w,
          align_x,
          align_out,
          static_cast<std::int64_t>(epilogue_of(options)),
          lt_alignment_of(options.bias),
          lt_alignment_of(options.gelu_aux),
          options.residual != nullptr ? static_cast<std::int64_t>(lt_alignment_of(options.residual)) : -1,
          static_cast<std::int64_t>(w_mode),
          static_cast<std::int64_t>(x_mode)};
}

void check_shape(DType out_dtype, std::int64_t n, std::int64_t m, std::int64_t k, const Fp8GemmOptions& options) {
  ENGINE_CHECK(out_dtype == DType::kBF16 || out_dtype == DType::kF32, "fp8_gemm: output dtype ",
               dtype_name(out_dtype), " is not supported (bf16 or f32)");
  ENGINE_CHECK(!options.accumulate || out_dtype == DType::kF32,
               "fp8_gemm: accumulating needs an f32 output (weight gradients), got ", dtype_name(out_dtype));
  ENGINE_CHECK(!options.has_epilogue() || (out_dtype == DType::kBF16 && !options.accumulate),
               "fp8_gemm: bias, GELU and residual epilogues take a bf16 output that does not accumulate");
  ENGINE_CHECK(n > 0 && m > 0 && k > 0, "fp8_gemm: (n, m, k) = (", n, ", ", m, ", ", k, ") must be positive");
  const char* bad = k % 16 != 0 ? "k" : m % 16 != 0 ? "m" : n % 16 != 0 ? "n" : nullptr;
  ENGINE_CHECK(bad == nullptr, "fp8_gemm: out (", n, ", ", m, ") = x (", n, ", ", k, ") @ w (", m, ", ", k,
               ")^T: ", bad, " = ", bad[0] == 'k' ? k : bad[0] == 'm' ? m : n,
               " is not a multiple of 16 (cuBLASLt's FP8 GEMM needs n, m and k multiples of 16)");
}

std::string describe(const cublasLtMatmulAlgo_t& algo, float waves) {
  std::int32_t id = -1, split_k = 0;
  std::uint32_t tile = 0, stages = 0, swizzle = 0, reduction = 0;
  std::uint16_t cluster = 0;
  std::size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split_k, sizeof(split_k), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof(reduction),
                                       &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof(swizzle),
                                       &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster),
                                       &written);
  std::ostringstream s;
  s << "algo " << id << ", tile id " << tile << ", stages id " << stages << ", split-k " << split_k
    << " (reduction " << reduction << "), swizzle " << swizzle << ", cluster id " << cluster << ", waves " << waves;
  return s.str();
}

}  // namespace

bool fp8_device_supported(int device, std::string* why) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const bool ok = (prop.major == 8 && prop.minor >= 9) || prop.major == 9;
  if (!ok && why != nullptr) {
    std::ostringstream s;
    s << "FP8 matmuls need FP8 tensor cores as on Ada or Hopper (compute capability 8.9 or 9.x; others are not "
         "enabled in this engine): GPU "
      << device << " (" << prop.name << ") has compute capability " << prop.major << "." << prop.minor;
    *why = s.str();
  }
  return ok;
}

void check_fp8_device(int device) {
  // Once per device: cudaGetDeviceProperties is not free.
  static std::mutex mutex;
  static std::map<int, std::string> checked;  // device -> "" when supported, else the reason
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = checked.find(device); it != checked.end()) {
      why = it->second;
    } else {
      if (fp8_device_supported(device, &why)) why.clear();
      checked.emplace(device, why);
    }
  }
  ENGINE_CHECK(why.empty(), why);
}

namespace {

// fp8_gemm and try_fp8_gemm: false (nothing enqueued) when cuBLASLt has no
// algorithm and `may_decline`; an error naming the problem otherwise.
bool run_fp8_gemm(void* out, DType out_dtype, const Fp8Operand& x, const Fp8Operand& w, std::int64_t n,
                  std::int64_t m, std::int64_t k, const Fp8GemmOptions& options, cudaStream_t stream,
                  bool may_decline) {
  Context& ctx = context();
  check_fp8_device(ctx.device());
  check_shape(out_dtype, n, m, k, options);
  ENGINE_CHECK(out != nullptr && x.data != nullptr && w.data != nullptr && x.scale_inv != nullptr &&
                   w.scale_inv != nullptr,
               "fp8_gemm: out, x, w and both scale_inv pointers must not be null");
  ENGINE_CHECK(aligned(out, 16) && aligned(x.data, 16) && aligned(w.data, 16),
               "fp8_gemm: out, x and w must be 16-byte aligned (cuBLASLt's FP8 GEMM), got ", out, ", ",
               static_cast<const void*>(x.data), ", ", static_cast<const void*>(w.data));
  ENGINE_CHECK(aligned(x.scale_inv, 4) && aligned(w.scale_inv, 4), "fp8_gemm: scale_inv pointers must be 4-byte aligned");
  for (const void* p : {options.bias, static_cast<const void*>(options.gelu_aux), options.residual}) {
    if (p == nullptr || aligned(p, 16)) continue;
    if (may_decline) return false;  // the caller's elementwise pass takes any alignment
    ENGINE_FAIL("fp8_gemm: the epilogue's bias, aux and residual must be 16-byte aligned, got ", p);
  }
  const std::uint32_t align_w = lt_alignment_of(w.data), align_x = lt_alignment_of(x.data),
                      align_out = lt_alignment_of(out);
  // C: the residual when there is one (beta 1), else D itself (beta 1 when accumulating, else unread).
  const void* c = options.residual != nullptr ? options.residual : out;
  const bool blocks = w.mode != Fp8ScaleMode::kTensor;
  ENGINE_CHECK(blocks == (x.mode != Fp8ScaleMode::kTensor), "fp8_gemm: both operands per tensor or both per block");
  ENGINE_CHECK(!(w.mode == Fp8ScaleMode::kBlk128 && x.mode == Fp8ScaleMode::kBlk128),
               "fp8_gemm: 128 x 128 blocks on both operands is not offered (one of them 1 x 128)");
  ENGINE_CHECK(!blocks || !options.fast_accum, "fp8_gemm: block scaling needs fast accumulation off");
  // Per tensor, the two factors multiplied into one (see build()); per block, each operand's own array.
  float* combined_scale = blocks ? nullptr : combined_scale_slot(stream);
  const ScalePointers scales = blocks ? ScalePointers{w.scale_inv, x.scale_inv, w.mode, x.mode}
                                      : ScalePointers{combined_scale, nullptr, Fp8ScaleMode::kTensor, Fp8ScaleMode::kTensor};
  const auto combine = [&] {
    if (blocks) return;
    combine_scales_kernel<<<1, 1, 0, stream>>>(w.scale_inv, x.scale_inv, combined_scale);
    CUDA_CHECK_LAUNCH();
  };
  LtDescriptors desc;
  build(desc, out_dtype, n, m, k, options, scales, align_w, align_x, align_out, lt_alignment_of(c));
  const float alpha = 1.0f, beta = options.accumulate || options.residual != nullptr ? 1.0f : 0.0f;
  const Key key = key_of(out_dtype, n, m, k, options, align_w, align_x, align_out, w.mode, x.mode);
  Chosen chosen;
  if (!cached(key, &chosen)) {
    // A search (ENGINE_GEMM_SEARCH) runs the candidates on the real operands.
    // They overwrite out (and an epilogue's aux), which the real call below
    // overwrites again, except when accumulating: that must not touch out, so
    // the candidates write a stream-ordered scratch copy (as matmul.cu does;
    // outside the memory accounting; where it cannot be had, no search: the
    // heuristic's first). The candidates need the combined scale too.
    combine();
    int candidates = gemm_search_candidates();
    struct StreamOrderedScratch {
      void* p = nullptr;
      cudaStream_t stream = nullptr;
      ~StreamOrderedScratch() {
        if (p != nullptr) cudaFreeAsync(p, stream);
      }
    } scratch{nullptr, stream};
    void* search_out = out;
    if (candidates > 1 && options.accumulate) {
      const std::size_t bytes = static_cast<std::size_t>(n * m) * dtype_size(out_dtype);
      if (cudaMallocAsync(&scratch.p, bytes, stream) == cudaSuccess &&
          cudaMemsetAsync(scratch.p, 0, bytes, stream) == cudaSuccess) {
        search_out = scratch.p;
      } else {
        (void)cudaGetLastError();
        candidates = 1;
      }
    }
    const void* search_c = options.residual != nullptr ? options.residual : search_out;
    chosen = heuristic(desc, candidates, [&](const cublasLtMatmulAlgo_t& algo) {
      return cublasLtMatmul(ctx.lt(), desc.op, &alpha, w.data, desc.a, x.data, desc.b, &beta, search_c, desc.d,
                            search_out, desc.d, &algo, ctx.lt_workspace(), ctx.lt_workspace_bytes(),
                            stream) == CUBLAS_STATUS_SUCCESS;
    });
    remember(key, chosen);
  }
  if (!chosen.found && may_decline) return false;
  ENGINE_CHECK(chosen.found, "fp8_gemm: cuBLASLt found no FP8 algorithm for out (", n, ", ", m, ") ",
               dtype_name(out_dtype), " = x (", n, ", ", k, ") @ w (", m, ", ", k, ")^T in E4M3",
               options.accumulate ? ", accumulating" : "", " (epilogue ", static_cast<int>(epilogue_of(options)),
               options.residual != nullptr ? " with a residual" : "", "; alignments x ", align_x, ", w ", align_w,
               ", out ", align_out, " bytes)");
  combine();
  const auto launch = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(ctx.lt(), desc.op, &alpha, w.data, desc.a, x.data, desc.b, &beta, c, desc.d, out, desc.d,
                          &algo, ctx.lt_workspace(), ctx.lt_workspace_bytes(), stream);
  };
  cublasStatus_t status = launch(chosen.algo);
  // cuBLASLt's heuristic has offered algorithms that cublasLtMatmul then
  // refused (RESULTS.md, the H200 lease of 084d9f8). Such a refusal is
  // synchronous (nothing was enqueued), so the heuristic's other candidates
  // are tried in its order and the first that runs is kept; where none does
  // and the caller can fall back, the problem is remembered as "none" and
  // declined, not thrown.
  const auto refused = [](cublasStatus_t st) {
    return st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE;
  };
  if (refused(status)) {
    constexpr int kRetries = 8;
    std::array<cublasLtMatmulHeuristicResult_t, kRetries> results{};
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(ctx.lt(), desc.op, desc.a, desc.b, desc.d, desc.d, desc.pref, kRetries,
                                       results.data(), &found) == CUBLAS_STATUS_SUCCESS) {
      for (int i = 0; i < found && refused(status); ++i) {
        if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
        status = launch(results[i].algo);
        if (status == CUBLAS_STATUS_SUCCESS) replace(key, Chosen{true, results[i].algo, results[i].wavesCount});
      }
    }
    if (refused(status) && may_decline) {
      forget_and_decline(key);
      return false;
    }
  }
  CUBLAS_CHECK(status);
  return true;
}

}  // namespace

void fp8_gemm(void* out, DType out_dtype, const Fp8Operand& x, const Fp8Operand& w, std::int64_t n, std::int64_t m,
              std::int64_t k, const Fp8GemmOptions& options, cudaStream_t stream) {
  run_fp8_gemm(out, out_dtype, x, w, n, m, k, options, stream, /*may_decline=*/false);
}

bool try_fp8_gemm(void* out, DType out_dtype, const Fp8Operand& x, const Fp8Operand& w, std::int64_t n,
                  std::int64_t m, std::int64_t k, const Fp8GemmOptions& options, cudaStream_t stream) {
  return run_fp8_gemm(out, out_dtype, x, w, n, m, k, options, stream, /*may_decline=*/true);
}

bool fp8_block_scaling_supported(int device, std::string* why) {
  std::string reason;
#if CUBLAS_VERSION < 120900
  reason = "this build's cuBLAS headers (" + std::to_string(CUBLAS_VERSION) + ") predate block scaling (12.9)";
#else
  if (cublasLtGetVersion() < 120900) {
    reason = "the cuBLASLt library loaded (" + std::to_string(cublasLtGetVersion()) +
             ") predates block scaling (12.9)";
  } else {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    if (prop.major != 9)
      reason = "cuBLASLt's block-scaled FP8 GEMMs (VEC128, BLK128x128) are Hopper's (compute capability 9.x); GPU " +
               std::to_string(device) + " (" + prop.name + ") has " + std::to_string(prop.major) + "." +
               std::to_string(prop.minor);
  }
#endif
  if (why != nullptr) *why = reason;
  return reason.empty();
}

bool fp8_gemm_epilogues_enabled() {
  const char* env = std::getenv("ENGINE_FP8_EPILOGUES");
  if (env == nullptr || *env == '\0') return true;
  const std::string value(env);
  ENGINE_CHECK(value == "0" || value == "1", "ENGINE_FP8_EPILOGUES=", value, ": expected 1 (fuse bias, GELU and "
               "residual into the FP8 GEMMs; the default) or 0 (an elementwise pass after them)");
  return value == "1";
}

std::string fp8_gemm_algorithm(DType out_dtype, std::int64_t n, std::int64_t m, std::int64_t k,
                               const Fp8GemmOptions& options) {
  Context& ctx = context();
  check_fp8_device(ctx.device());
  check_shape(out_dtype, n, m, k, options);
  // Placeholder scale pointers (any device address; the heuristic reads none).
  const auto* placeholder = static_cast<const float*>(ctx.lt_workspace());
  LtDescriptors desc;
  build(desc, out_dtype, n, m, k, options, ScalePointers{placeholder}, 256, 256, 256, 256);
  const Key key = key_of(out_dtype, n, m, k, options, 256, 256, 256, Fp8ScaleMode::kTensor, Fp8ScaleMode::kTensor);
  Chosen chosen;
  if (!cached(key, &chosen)) {  // not yet run: the heuristic's first, untimed
    chosen = heuristic(desc, 1, [](const cublasLtMatmulAlgo_t&) { return false; });
    remember(key, chosen);
  }
  if (!chosen.found) return "no algorithm";
  return describe(chosen.algo, chosen.waves);
}

std::string fp8_block_scaling_report(std::int64_t n, std::int64_t m, std::int64_t k) {
#if CUBLAS_VERSION >= 120900
  Context& ctx = context();
  struct Combo {
    const char* what;
    cublasLtMatmulMatrixScale_t x_mode, w_mode;
  };
  const Combo combos[] = {
      {"x VEC128_32F (1 x 128 along K), w BLK128x128_32F", CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
       CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F},
      {"x VEC128_32F, w VEC128_32F", CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F},
  };
  std::ostringstream s;
  s << "cuBLASLt " << cublasLtGetVersion() << ", block scaling for (n, m, k) = (" << n << ", " << m << ", " << k
    << ") bf16 out:";
  const auto* placeholder = static_cast<const float*>(ctx.lt_workspace());
  for (const Combo& c : combos) {
    LtDescriptors desc;
    build(desc, DType::kBF16, n, m, k, Fp8GemmOptions{}, ScalePointers{placeholder}, 256, 256, 256, 256);
    const std::int32_t a_mode = c.w_mode, b_mode = c.x_mode;  // A is w, B is x
    cublasStatus_t st =
        cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode));
    int found = 0;
    std::array<cublasLtMatmulHeuristicResult_t, 8> results{};
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(ctx.lt(), desc.op, desc.a, desc.b, desc.d, desc.d, desc.pref,
                                          static_cast<int>(results.size()), results.data(), &found);
    s << "\n  " << c.what << ": ";
    if (st != CUBLAS_STATUS_SUCCESS)
      s << "not offered (" << cublasGetStatusName(st) << ")";
    else
      s << (found > 0 ? "offered, " : "not offered, ") << found << " algorithm(s)"
        << (found > 0 ? " (first: " + describe(results[0].algo, results[0].wavesCount) + ")" : std::string());
  }
  return s.str();
#else
  return "block scaling: this cuBLASLt's headers (CUBLAS_VERSION " + std::to_string(CUBLAS_VERSION) +
         ") predate VEC128/BLK128x128 scale modes (12.9)";
#endif
}

}  // namespace engine::cuda
