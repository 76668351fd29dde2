// The CUDA FP8 path (engine/cuda/fp8_cast.h, fp8_gemm.h) against the CPU's
// E4M3 reference (engine/cpu/fp8_e4m3.h, itself tested in test_fp8_e4m3).
//
// What is held to what:
//   amax, scale, scale_inv: bit for bit (a max, one IEEE division, one IEEE
//     reciprocal; fp8_cast.cu writes them without fast-math).
//   the cast and the cast-transpose: every E4M3 code bit for bit (round to
//     nearest even of the same f32 product x * scale); the transposed copy
//     equal to the transpose of the cast.
//   the FP8 GEMM: against a double-precision product of the *dequantised*
//     operands, so FP8 rounding itself is not in the tolerance. What is:
//     the bf16 rounding of the output (half an ulp, 2^-9 relative; 2^-8
//     allowed), and the f32 accumulation, bounded by 2^-13 * sum_k |a_k b_k|
//     (the worst case k * 2^-24 for k <= 2048, and above the ~14 bits that
//     Hopper's FP8 MMA keeps between promotions to f32 registers, DeepSeek-V3
//     report sec. 3.3.2, which fast accumulation off bounds to one block of K).
//   shapes cuBLASLt's FP8 GEMM cannot take (k % 16 != 0) and a GPU without
//     FP8 tensor cores: refused with a clear error.
//   the FP8 linear layers (ops::MatmulFormat::kFp8E4M3): against the CPU's
//     quantise-dequantise ops on the same bf16 values (see CudaFp8Linear).
//   block scaling (CudaFp8Block): every code and factor of the 1 x 128, 128 x 1
//     and 128 x 128 casts bit for bit against the CPU's block image, read
//     where cuBLASLt reads them; the block-scaled ops against the CPU's.
//   the amax slots (CudaFp8AmaxSlots): an amax made in the kernel that writes
//     the tensor (norms, GELU epilogues) equal bit for bit to the tensor's
//     amax, the outputs unchanged; a ready slot read, not recomputed.
// Every test skips without a GPU, like test_cuda_ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/buffer.h"
#include "engine/check.h"
#include "engine/cpu/fp8_e4m3.h"
#include "engine/device.h"
#include "engine/ops.h"
#include "engine/tensor.h"
#include "tests/support/scoped_env.h"
#if ENGINE_WITH_CUDA
#include <cuda_runtime.h>

#include "engine/cuda/context.h"
#include "engine/cuda/fp8_block.h"
#include "engine/cuda/fp8_cast.h"
#include "engine/cuda/fp8_gemm.h"
#endif

namespace {

using namespace engine;

[[maybe_unused]] bool gpu_visible() {
  static const bool visible = cuda_device_count() > 0;
  return visible;
}

#if ENGINE_WITH_CUDA
using cuda::Fp8Scale;

constexpr DeviceType kCpu = DeviceType::kCpu;
constexpr DeviceType kCuda = DeviceType::kCuda;

void sync() { ASSERT_EQ(cudaStreamSynchronize(cuda::context().stream()), cudaSuccess); }

// A bf16 device tensor holding `host` (rounded to bf16), and `host` replaced
// by the rounded values, so both sides see the same numbers. `offset`
// elements of padding in front misalign it (offset 1: 2-byte aligned).
struct Bf16Dev {
  Buffer buffer;
  __nv_bfloat16* ptr = nullptr;
  Bf16Dev(std::vector<float>& host, std::int64_t offset = 0)
      : buffer(kCuda, static_cast<std::size_t>(host.size() + offset) * 2 + 16) {
    ptr = static_cast<__nv_bfloat16*>(buffer.data()) + offset;
    const Shape shape{static_cast<std::int64_t>(host.size())};
    const Tensor dev(ptr, shape, DType::kBF16, kCuda);
    ops::copy(dev, Tensor(host.data(), shape, DType::kF32, kCpu));
    ops::copy(Tensor(host.data(), shape, DType::kF32, kCpu), dev);
  }
};

struct Bytes {
  Buffer buffer;
  __nv_fp8_e4m3* ptr;
  explicit Bytes(std::int64_t n, std::uint8_t poison = 0x7F)
      : buffer(kCuda, static_cast<std::size_t>(n) + 16), ptr(static_cast<__nv_fp8_e4m3*>(buffer.data())) {
    EXPECT_EQ(cudaMemset(ptr, poison, static_cast<std::size_t>(n)), cudaSuccess);
  }
  std::vector<std::uint8_t> host(std::int64_t n) const {
    std::vector<std::uint8_t> h(static_cast<std::size_t>(n));
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

struct ScaleDev {
  Buffer buffer{kCuda, cuda::kFp8ScaleFloats * sizeof(float)};
  Fp8Scale s = cuda::fp8_scale_at(static_cast<float*>(buffer.data()));
  struct Values {
    float amax, scale, scale_inv;
  };
  Values host() const {
    float v[cuda::kFp8ScaleFloats];
    EXPECT_EQ(cudaMemcpy(v, buffer.data(), sizeof v, cudaMemcpyDeviceToHost), cudaSuccess);
    return {v[0], v[1], v[2]};
  }
};

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

std::vector<float> random_vector(std::int64_t n, std::mt19937& rng, float stddev) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::normal_distribution<float> normal(0.0f, stddev);
  for (float& x : v) x = normal(rng);
  return v;
}

// Counts code mismatches, reporting the first few.
int compare_codes(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want, const char* what) {
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i] && ++bad <= 5)
      ADD_FAILURE() << what << " element " << i << ": got 0x" << std::hex << int(got[i]) << ", want 0x"
                    << int(want[i]);
  return bad;
}

void expect_scales_match(const ScaleDev::Values& got, const std::vector<float>& x) {
  const float amax = cpu::e4m3_amax(x.data(), static_cast<std::int64_t>(x.size()));
  const float scale = cpu::e4m3_scale(amax);
  EXPECT_EQ(bits(got.amax), bits(amax)) << "amax " << got.amax << " vs " << amax;
  EXPECT_EQ(bits(got.scale), bits(scale)) << "scale " << got.scale << " vs " << scale;
  EXPECT_EQ(bits(got.scale_inv), bits(cpu::e4m3_scale_inv(scale))) << "scale_inv " << got.scale_inv;
}

// amax then the plain cast of x (n values), checked against the CPU.
void check_cast(std::vector<float> x, std::int64_t offset) {
  const std::int64_t n = static_cast<std::int64_t>(x.size());
  Bf16Dev dev(x, offset);
  ScaleDev scale;
  Bytes q(n);
  const cudaStream_t stream = cuda::context().stream();
  cuda::fp8_amax(dev.ptr, n, scale.s, stream);
  cuda::fp8_cast(dev.ptr, n, scale.s, q.ptr, stream);
  sync();
  const ScaleDev::Values got = scale.host();
  expect_scales_match(got, x);
  std::vector<std::uint8_t> want(static_cast<std::size_t>(n));
  cpu::e4m3_quantize(x.data(), n, cpu::e4m3_scale(cpu::e4m3_amax(x.data(), n)), want.data());
  EXPECT_EQ(compare_codes(q.host(n), want, "cast"), 0) << "n " << n << ", offset " << offset;
}

TEST(CudaFp8, AmaxScaleAndCastMatchTheCpuBitForBit) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  std::mt19937 rng(11);
  for (const std::int64_t n : {std::int64_t{1024} * 1600, std::int64_t{1000003}, std::int64_t{37}, std::int64_t{1}}) {
    std::vector<float> x = random_vector(n, rng, 3.0f);
    // Special values: -0, tiny values that land among E4M3's subnormals or
    // round to zero after scaling, and a clear maximum.
    x[0] = -0.0f;
    if (n > 8) {
      x[1] = 1e-4f, x[2] = -3e-3f, x[3] = 2e-2f, x[4] = -1e-7f, x[n / 2] = -17.25f;
    }
    SCOPED_TRACE("n " + std::to_string(n));
    check_cast(x, 0);  // aligned: 16-byte packs
    check_cast(x, 1);  // misaligned: the element-wise path
  }
}

TEST(CudaFp8, ZeroNaNAndTinyTensors) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  std::vector<float> zeros(1000, 0.0f);
  zeros[3] = -0.0f;
  check_cast(zeros, 0);  // amax 0 -> scale 1, codes 0 and 0x80

  // Subnormal f32 magnitudes: 448 / amax overflows, so scale is FLT_MAX.
  std::vector<float> tiny(64, 1e-39f);
  tiny[5] = -2e-39f;
  check_cast(tiny, 0);

  std::vector<float> with_nan(4096, 1.0f);
  with_nan[1234] = std::nanf("");
  Bf16Dev dev(with_nan);
  ScaleDev scale;
  cuda::fp8_amax(dev.ptr, 4096, scale.s, cuda::context().stream());
  Bytes q(4096);
  cuda::fp8_cast(dev.ptr, 4096, scale.s, q.ptr, cuda::context().stream());
  sync();
  const ScaleDev::Values got = scale.host();
  EXPECT_TRUE(std::isnan(got.amax)) << got.amax;
  EXPECT_EQ(got.scale, 1.0f);
  EXPECT_EQ(q.host(4096)[1234] & 0x7F, 0x7F);  // NaN stays NaN
}

TEST(CudaFp8, CastTransposeIsTheTransposeOfTheCast) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  std::mt19937 rng(12);
  struct Case {
    std::int64_t rows, cols, offset;
  };
  // Packed 64 x 64 tiles (GPT-like, and partial edge tiles), the scalar path
  // (odd shapes, a misaligned input), tiny shapes.
  for (const Case c : {Case{1024, 1600, 0}, Case{72, 136, 0}, Case{256, 4800, 0}, Case{8, 8, 0}, Case{37, 23, 0},
                       Case{1, 1, 0}, Case{64, 64, 1}, Case{130, 7, 0}}) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + ", cols " + std::to_string(c.cols) + ", offset " +
                 std::to_string(c.offset));
    const std::int64_t n = c.rows * c.cols;
    std::vector<float> x = random_vector(n, rng, 0.5f);
    x[static_cast<std::size_t>(n - 1)] = 9.0f;  // the max in the last element (last tile)
    Bf16Dev dev(x, c.offset);
    for (const bool with_q : {true, false}) {
      ScaleDev scale;
      Bytes q(n), qt(n);
      const cudaStream_t stream = cuda::context().stream();
      cuda::fp8_amax(dev.ptr, n, scale.s, stream);
      cuda::fp8_cast_transpose(dev.ptr, c.rows, c.cols, scale.s, with_q ? q.ptr : nullptr, qt.ptr, stream);
      sync();
      expect_scales_match(scale.host(), x);
      const float s = cpu::e4m3_scale(cpu::e4m3_amax(x.data(), n));
      std::vector<std::uint8_t> want_q(static_cast<std::size_t>(n)), want_qt(static_cast<std::size_t>(n));
      cpu::e4m3_quantize(x.data(), n, s, want_q.data());
      cpu::e4m3_quantize_transpose(x.data(), c.rows, c.cols, s, want_qt.data());
      EXPECT_EQ(compare_codes(qt.host(n), want_qt, "transposed cast"), 0);
      if (with_q) EXPECT_EQ(compare_codes(q.host(n), want_q, "cast beside the transpose"), 0);
    }
  }
}

// ---- the GEMM ------------------------------------------------------------------

// A bf16 matrix quantised on the GPU: its codes (checked against the CPU) and
// scale_inv on the host, and the device state the GEMM reads.
struct Quantized {
  std::int64_t rows, cols;
  std::vector<float> x;  // the bf16 values
  Bf16Dev dev;
  ScaleDev scale;
  Bytes q, qt;
  std::vector<std::uint8_t> codes;  // row-major (rows, cols)
  float scale_inv = 0;
  Quantized(std::int64_t rows_, std::int64_t cols_, std::mt19937& rng, float stddev)
      : rows(rows_), cols(cols_), x(random_vector(rows_ * cols_, rng, stddev)), dev(x), q(rows * cols),
        qt(rows * cols) {
    const cudaStream_t stream = cuda::context().stream();
    cuda::fp8_amax(dev.ptr, rows * cols, scale.s, stream);
    cuda::fp8_cast_transpose(dev.ptr, rows, cols, scale.s, q.ptr, qt.ptr, stream);
    sync();
    codes = q.host(rows * cols);
    const float s = cpu::e4m3_scale(cpu::e4m3_amax(x.data(), rows * cols));
    std::vector<std::uint8_t> want(codes.size());
    cpu::e4m3_quantize(x.data(), rows * cols, s, want.data());
    EXPECT_EQ(compare_codes(codes, want, "operand cast"), 0);
    scale_inv = scale.host().scale_inv;
    EXPECT_EQ(bits(scale_inv), bits(cpu::e4m3_scale_inv(s)));
  }
  double value(std::int64_t r, std::int64_t c) const {  // the E4M3 value, unscaled
    return cpu::e4m3_to_float(codes[static_cast<std::size_t>(r * cols + c)]);
  }
  cuda::Fp8Operand operand() const { return {q.ptr, scale.s.scale_inv}; }
  cuda::Fp8Operand transposed_operand() const { return {qt.ptr, scale.s.scale_inv}; }
};

// want[i][j] (n x m) = scale * sum_t a(i, t) b(j, t), and bound[i][j] = the
// same sum of |a b| (for the accumulation term of the tolerance).
template <typename A, typename B>
void reference(std::int64_t n, std::int64_t m, std::int64_t k, double scale, A&& a, B&& b, std::vector<double>& want,
               std::vector<double>& sum_abs) {
  want.assign(static_cast<std::size_t>(n * m), 0.0);
  sum_abs.assign(static_cast<std::size_t>(n * m), 0.0);
  std::vector<double> ar(static_cast<std::size_t>(n * k)), br(static_cast<std::size_t>(m * k));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t t = 0; t < k; ++t) ar[static_cast<std::size_t>(i * k + t)] = a(i, t);
  for (std::int64_t j = 0; j < m; ++j)
    for (std::int64_t t = 0; t < k; ++t) br[static_cast<std::size_t>(j * k + t)] = b(j, t);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < m; ++j) {
      double s = 0, s_abs = 0;
      const double* ai = &ar[static_cast<std::size_t>(i * k)];
      const double* bj = &br[static_cast<std::size_t>(j * k)];
      for (std::int64_t t = 0; t < k; ++t) {
        const double p = ai[t] * bj[t];  // exact: E4M3 values have 4 significant bits
        s += p;
        s_abs += std::fabs(p);
      }
      want[static_cast<std::size_t>(i * m + j)] = s * scale;
      sum_abs[static_cast<std::size_t>(i * m + j)] = s_abs * scale;
    }
}

// got within rel |want| + 2^-13 sum_abs, elementwise; reports the worst.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& sum_abs,
                  double rel, double base, const char* what) {
  const double acc = std::ldexp(1.0, -13);
  int bad = 0;
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(got[i] - (want[i] + base));
    const double tol = rel * std::fabs(want[i] + base) + acc * sum_abs[i];
    worst = std::max(worst, err / tol);
    if (!(err <= tol) && ++bad <= 5)
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", want " << want[i] + base << " (error "
                    << err << ", tolerance " << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what;
  std::printf("%s: worst error %.3f of the tolerance over %zu elements\n", what, worst, want.size());
}

std::vector<float> download(const void* p, DType dtype, std::int64_t n) {
  std::vector<float> h(static_cast<std::size_t>(n));
  ops::copy(Tensor(h.data(), Shape{n}, DType::kF32, kCpu), Tensor(const_cast<void*>(p), Shape{n}, dtype, kCuda));
  return h;
}

// FP8 tests of the GEMM need FP8 tensor cores; elsewhere the GEMM must refuse.
bool fp8_gemm_available() {
  std::string why;
  if (cuda::fp8_device_supported(cuda::context().device(), &why)) return true;
  std::vector<float> one(16 * 16, 1.0f);
  Bf16Dev dev(one);
  ScaleDev s;
  Bytes q(256);
  Buffer out(kCuda, 256 * 2);
  try {
    cuda::fp8_gemm(out.data(), DType::kBF16, {q.ptr, s.s.scale_inv}, {q.ptr, s.s.scale_inv}, 16, 16, 16, {},
                   cuda::context().stream());
    ADD_FAILURE() << "fp8_gemm ran on a GPU it should refuse: " << why;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("compute capability"), std::string::npos) << e.what();
  }
  return false;
}

TEST(CudaFp8, GemmForwardMatchesTheDequantisedProduct) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  if (!fp8_gemm_available()) GTEST_SKIP() << "no FP8 tensor cores (refusal checked)";
  // out (N, OC) = inp (N, C) @ W (OC, C)^T at gpt2-1558m's qkv: C 1600, OC 4800, N 256.
  std::mt19937 rng(13);
  const std::int64_t N = 256, C = 1600, OC = 4800;
  Quantized inp(N, C, rng, 2.0f), w(OC, C, rng, 0.02f);
  Buffer out(kCuda, static_cast<std::size_t>(N * OC) * 2);
  ops::fill(Tensor(out.data(), Shape{N * OC}, DType::kBF16, kCuda), std::nan(""));
  cuda::fp8_gemm(out.data(), DType::kBF16, inp.operand(), w.operand(), N, OC, C, {}, cuda::context().stream());
  sync();
  std::vector<double> want, sum_abs;
  reference(N, OC, C, static_cast<double>(inp.scale_inv) * w.scale_inv,
            [&](std::int64_t i, std::int64_t t) { return inp.value(i, t); },
            [&](std::int64_t j, std::int64_t t) { return w.value(j, t); }, want, sum_abs);
  expect_close(download(out.data(), DType::kBF16, N * OC), want, sum_abs, std::ldexp(1.0, -8), 0.0, "forward");
}

TEST(CudaFp8, GemmDinpWithTheTransposedWeight) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  if (!fp8_gemm_available()) GTEST_SKIP() << "no FP8 tensor cores (refusal checked)";
  // dinp (N, C) = dout (N, OC) @ W (OC, C) = dout @ [W^T (C, OC)]^T: the
  // weight's transposed cast is the second operand, k = OC.
  std::mt19937 rng(14);
  const std::int64_t N = 256, C = 1600, OC = 4800;
  Quantized dout(N, OC, rng, 1e-3f), w(OC, C, rng, 0.02f);
  Buffer dinp(kCuda, static_cast<std::size_t>(N * C) * 2);
  cuda::fp8_gemm(dinp.data(), DType::kBF16, dout.operand(), w.transposed_operand(), N, C, OC, {},
                 cuda::context().stream());
  sync();
  std::vector<double> want, sum_abs;
  reference(N, C, OC, static_cast<double>(dout.scale_inv) * w.scale_inv,
            [&](std::int64_t i, std::int64_t t) { return dout.value(i, t); },
            [&](std::int64_t j, std::int64_t t) { return w.value(t, j); },  // W^T (C, OC)[j][t] = W[t][j]
            want, sum_abs);
  expect_close(download(dinp.data(), DType::kBF16, N * C), want, sum_abs, std::ldexp(1.0, -8), 0.0, "dinp");
}

TEST(CudaFp8, GemmDweightAccumulatesInF32) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  if (!fp8_gemm_available()) GTEST_SKIP() << "no FP8 tensor cores (refusal checked)";
  // dweight (OC, C) += dout^T (OC, N) @ inp (N, C) = [dout^T] @ [inp^T (C, N)]^T:
  // both operands transposed casts, k = N.
  std::mt19937 rng(15);
  const std::int64_t N = 1024, C = 160, OC = 96;
  Quantized dout(N, OC, rng, 1e-3f), inp(N, C, rng, 1.0f);
  std::vector<float> init(static_cast<std::size_t>(OC * C), 0.5f);
  Buffer dweight(kCuda, init.size() * sizeof(float));
  ops::copy(Tensor(dweight.data(), Shape{OC * C}, DType::kF32, kCuda), Tensor(init.data(), Shape{OC * C}, DType::kF32, kCpu));
  cuda::Fp8GemmOptions accumulate;
  accumulate.accumulate = true;
  cuda::fp8_gemm(dweight.data(), DType::kF32, dout.transposed_operand(), inp.transposed_operand(), OC, C, N,
                 accumulate, cuda::context().stream());
  sync();
  std::vector<double> want, sum_abs;
  reference(OC, C, N, static_cast<double>(dout.scale_inv) * inp.scale_inv,
            [&](std::int64_t i, std::int64_t t) { return dout.value(t, i); },  // dout^T (OC, N)
            [&](std::int64_t j, std::int64_t t) { return inp.value(t, j); },   // inp^T (C, N)
            want, sum_abs);
  expect_close(download(dweight.data(), DType::kF32, OC * C), want, sum_abs, 1e-5, 0.5, "dweight += (f32)");
}

TEST(CudaFp8, GemmRefusesShapesItCannotTake) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  if (!fp8_gemm_available()) GTEST_SKIP() << "no FP8 tensor cores (refusal checked)";
  Bytes a(64 * 1616), b(64 * 1616);
  ScaleDev s;
  Buffer out(kCuda, 64 * 64 * 4);
  const auto expect_refused = [&](std::int64_t n, std::int64_t m, std::int64_t k, DType dtype, bool accumulate,
                                  const char* needle) {
    cuda::Fp8GemmOptions o;
    o.accumulate = accumulate;
    try {
      cuda::fp8_gemm(out.data(), dtype, {a.ptr, s.s.scale_inv}, {b.ptr, s.s.scale_inv}, n, m, k, o,
                     cuda::context().stream());
      ADD_FAILURE() << "accepted (" << n << ", " << m << ", " << k << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_refused(64, 64, 1601, DType::kBF16, false, "k = 1601 is not a multiple of 16");
  expect_refused(64, 40, 1600, DType::kBF16, false, "m = 40 is not a multiple of 16");
  expect_refused(24, 64, 1600, DType::kBF16, false, "n = 24 is not a multiple of 16");
  expect_refused(64, 64, 1600, DType::kBF16, true, "accumulating needs an f32 output");
  sync();
}

TEST(CudaFp8, ReportsBlockScaling) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  if (!fp8_gemm_available()) GTEST_SKIP() << "no FP8 tensor cores (refusal checked)";
  // Informational: only per-tensor scaling is implemented.
  std::printf("%s\n", cuda::fp8_block_scaling_report(8192, 4800, 1600).c_str());
  std::printf("fp8 forward (8192, 4800, 1600): %s\n",
              cuda::fp8_gemm_algorithm(DType::kBF16, 8192, 4800, 1600, {}).c_str());
}

// ---- the FP8 linear layers (ops::MatmulFormat::kFp8E4M3, fp8_linear.cu) ----
// Each op on bf16 device tensors against the CPU's quantise-dequantise
// reference (engine/cpu/fp8_matmul.cpp) on the same bf16-rounded values: the
// scales and E4M3 codes are then identical on both sides (checked bit for bit
// above), so what differs is the bf16 rounding of the outputs (the GEMM's, and
// a second one where bias or residual are added after it: 2^-8 relative
// together) and the order of the f32 sums. Tolerance per element:
// 2^-7 |reference| + 2^-8 max |reference|; a wrong transpose, operand or
// scale is off by the size of the values themselves.

// A device tensor in `dtype` holding `host`, and `host` replaced by the values
// it holds (bf16-rounded), so the CPU reference sees the same numbers.
struct DevTensor {
  Buffer buffer;
  Tensor t;
  DevTensor(std::vector<float>& host, Shape shape, DType dtype = DType::kBF16)
      : buffer(kCuda, static_cast<std::size_t>(shape.numel()) * dtype_size(dtype)),
        t(buffer.data(), shape, dtype, kCuda) {
    const Tensor h(host.data(), shape, DType::kF32, kCpu);
    ops::copy(t, h);
    ops::copy(h, t);
  }
  std::vector<float> host() const { return download(t.data(), t.dtype(), t.numel()); }
};

Tensor cpu_view(std::vector<float>& v, Shape shape) { return Tensor(v.data(), shape, DType::kF32, kCpu); }

void expect_close_to_reference(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double max_ref = 0;
  for (float w : want) max_ref = std::max(max_ref, std::fabs(static_cast<double>(w)));
  int bad = 0;
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double tol = std::ldexp(std::fabs(static_cast<double>(want[i])), -7) + std::ldexp(max_ref, -8);
    worst = std::max(worst, err / tol);
    if (!(err <= tol) && ++bad <= 5)
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", want " << want[i] << " (tolerance "
                    << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what;
  std::printf("%s: worst error %.3f of the tolerance over %zu elements\n", what, worst, want.size());
}

struct LinearShape {
  std::int64_t N, C, OC;
};

using test_support::ScopedEnv;  // tests/support/scoped_env.h

// Needs no GPU: the switch only reads its variable.
TEST(CudaFp8, EpilogueSwitchReadsItsVariable) {
  {
    ScopedEnv env("ENGINE_FP8_EPILOGUES", "");
    EXPECT_TRUE(cuda::fp8_gemm_epilogues_enabled());
  }
  {
    ScopedEnv env("ENGINE_FP8_EPILOGUES", "0");
    EXPECT_FALSE(cuda::fp8_gemm_epilogues_enabled());
  }
  ScopedEnv env("ENGINE_FP8_EPILOGUES", "off");
  try {
    cuda::fp8_gemm_epilogues_enabled();
    ADD_FAILURE() << "ENGINE_FP8_EPILOGUES=off was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ENGINE_FP8_EPILOGUES=off"), std::string::npos) << e.what();
  }
}

TEST(CudaFp8Linear, ForwardOpsMatchTheCpuReference) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  if (!fp8_gemm_available()) GTEST_SKIP() << "no FP8 tensor cores (refusal checked)";
  constexpr auto kFp8 = ops::MatmulFormat::kFp8E4M3;
  std::mt19937 rng(21);
  // Bias, GELU and residual as the GEMM's epilogue, then as the elementwise
  // pass after a plain GEMM (ENGINE_FP8_EPILOGUES=0): both within the tolerance.
  for (const char* epilogues : {"1", "0"})
  for (const LinearShape& s : {LinearShape{64, 96, 80}, LinearShape{256, 768, 2304}}) {
    ScopedEnv env("ENGINE_FP8_EPILOGUES", epilogues);
    SCOPED_TRACE(std::string("ENGINE_FP8_EPILOGUES=") + epilogues + ", N " + std::to_string(s.N) + ", C " +
                 std::to_string(s.C) + ", OC " + std::to_string(s.OC));
    std::vector<float> inp = random_vector(s.N * s.C, rng, 1.0f), w = random_vector(s.OC * s.C, rng, 0.02f),
                       b = random_vector(s.OC, rng, 0.1f), res = random_vector(s.N * s.OC, rng, 1.0f);
    DevTensor d_inp(inp, {s.N, s.C}), d_w(w, {s.OC, s.C}), d_b(b, {s.OC}), d_res(res, {s.N, s.OC});
    std::vector<float> zeros(s.N * s.OC, 0.0f);
    DevTensor d_out(zeros, {s.N, s.OC}), d_pre(zeros, {s.N, s.OC});

    // Bias and GELU.
    ops::matmul_forward(d_out.t, d_inp.t, d_w.t, d_b.t, d_pre.t, kFp8);
    std::vector<float> out(s.N * s.OC), pre(s.N * s.OC);
    ops::matmul_forward(cpu_view(out, {s.N, s.OC}), cpu_view(inp, {s.N, s.C}), cpu_view(w, {s.OC, s.C}),
                        cpu_view(b, {s.OC}), cpu_view(pre, {s.N, s.OC}), kFp8);
    expect_close_to_reference(d_pre.host(), pre, "fp8 forward: pre_gelu");
    expect_close_to_reference(d_out.host(), out, "fp8 forward: gelu(pre)");

    // The residual add.
    ops::matmul_forward_add(d_out.t, d_inp.t, d_w.t, d_b.t, d_res.t, kFp8);
    ops::matmul_forward_add(cpu_view(out, {s.N, s.OC}), cpu_view(inp, {s.N, s.C}), cpu_view(w, {s.OC, s.C}),
                            cpu_view(b, {s.OC}), cpu_view(res, {s.N, s.OC}), kFp8);
    expect_close_to_reference(d_out.host(), out, "fp8 forward_add");
  }
}

TEST(CudaFp8Linear, BackwardOpsMatchTheCpuReference) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  if (!fp8_gemm_available()) GTEST_SKIP() << "no FP8 tensor cores (refusal checked)";
  constexpr auto kFp8 = ops::MatmulFormat::kFp8E4M3;
  std::mt19937 rng(22);
  for (const LinearShape& s : {LinearShape{64, 96, 80}, LinearShape{256, 768, 2304}}) {
    SCOPED_TRACE("N " + std::to_string(s.N) + ", C " + std::to_string(s.C) + ", OC " + std::to_string(s.OC));
    std::vector<float> inp = random_vector(s.N * s.C, rng, 1.0f), w = random_vector(s.OC * s.C, rng, 0.02f),
                       dout = random_vector(s.N * s.OC, rng, 1e-3f), pre = random_vector(s.N * s.C, rng, 1.5f);
    std::vector<float> dw(s.OC * s.C, 0.5f), db(s.OC, -0.25f), dinp(s.N * s.C, 0.0f);
    DevTensor d_inp(inp, {s.N, s.C}), d_w(w, {s.OC, s.C}), d_dout(dout, {s.N, s.OC}), d_pre(pre, {s.N, s.C}),
        d_dinp(dinp, {s.N, s.C}), d_dw(dw, {s.OC, s.C}, DType::kF32), d_db(db, {s.OC}, DType::kF32);

    // Fused: dinp with the GELU gradient, dweight and dbias accumulating.
    ops::matmul_backward(d_dinp.t, d_dw.t, d_db.t, d_dout.t, d_inp.t, d_w.t, d_pre.t, kFp8);
    ops::matmul_backward(cpu_view(dinp, {s.N, s.C}), cpu_view(dw, {s.OC, s.C}), cpu_view(db, {s.OC}),
                         cpu_view(dout, {s.N, s.OC}), cpu_view(inp, {s.N, s.C}), cpu_view(w, {s.OC, s.C}),
                         cpu_view(pre, {s.N, s.C}), kFp8);
    expect_close_to_reference(d_dinp.host(), dinp, "fp8 backward: dinp * gelu'(pre)");
    expect_close_to_reference(d_dw.host(), dw, "fp8 backward: dweight (accumulated)");
    expect_close_to_reference(d_db.host(), db, "fp8 backward: dbias (accumulated)");

    // Split, as a zero-bubble pipeline runs it: the input gradient alone
    // (dout cast without its transposed copy), then the weight gradient alone.
    ops::matmul_backward(d_dinp.t, Tensor{}, Tensor{}, d_dout.t, d_inp.t, d_w.t, Tensor{}, kFp8);
    ops::matmul_backward(cpu_view(dinp, {s.N, s.C}), Tensor{}, Tensor{}, cpu_view(dout, {s.N, s.OC}),
                         cpu_view(inp, {s.N, s.C}), cpu_view(w, {s.OC, s.C}), Tensor{}, kFp8);
    expect_close_to_reference(d_dinp.host(), dinp, "fp8 input-gradient pass: dinp");
    ops::matmul_weight_grad(d_dw.t, d_db.t, d_dout.t, d_inp.t, kFp8);
    ops::matmul_weight_grad(cpu_view(dw, {s.OC, s.C}), cpu_view(db, {s.OC}), cpu_view(dout, {s.N, s.OC}),
                            cpu_view(inp, {s.N, s.C}), kFp8);
    expect_close_to_reference(d_dw.host(), dw, "fp8 weight-gradient pass: dweight");
    expect_close_to_reference(d_db.host(), db, "fp8 weight-gradient pass: dbias");
  }
}

// A weight kept in FP8 between uses (ops::Fp8WeightCache, one per block
// weight in training) gives the numbers of a weight cast at every use, bit
// for bit: filled by the first forward (copy and transposed copy in one
// pass), read by the second and by the backward's dinp.
TEST(CudaFp8Linear, ACachedWeightGivesTheSameNumbers) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  if (!fp8_gemm_available()) GTEST_SKIP() << "no FP8 tensor cores (refusal checked)";
  constexpr auto kFp8 = ops::MatmulFormat::kFp8E4M3;
  const std::int64_t N = 128, C = 256, OC = 384;
  std::mt19937 rng(23);
  std::vector<float> inp = random_vector(N * C, rng, 1.0f), w = random_vector(OC * C, rng, 0.02f),
                     dout = random_vector(N * OC, rng, 1e-3f), zeros(N * OC, 0.0f), zeros_in(N * C, 0.0f);
  DevTensor d_inp(inp, {N, C}), d_w(w, {OC, C}), d_dout(dout, {N, OC}), out_plain(zeros, {N, OC}),
      out_cached(zeros, {N, OC}), dinp_plain(zeros_in, {N, C}), dinp_cached(zeros_in, {N, C});
  Buffer storage(kCuda, ops::fp8_weight_cache_bytes(kCuda, OC, C));
  // Per tensor, and in blocks (the cache then holds W's and W^T's 128 x 128 copies and factors).
  for (const ops::Fp8Scaling scaling : {ops::Fp8Scaling::kTensor, ops::Fp8Scaling::kBlock}) {
    std::string why;
    if (scaling == ops::Fp8Scaling::kBlock && !cuda::fp8_block_scaling_supported(cuda::context().device(), &why)) {
      std::printf("block scaling not checked: %s\n", why.c_str());
      continue;
    }
    SCOPED_TRACE(std::string("scaling ") + ops::fp8_scaling_name(scaling));
    ops::Fp8WeightCache cache;
    cache.storage = Tensor(storage.data(), Shape{static_cast<std::int64_t>(storage.bytes() / 4)}, DType::kF32, kCuda);
    ops::Fp8Options plain, cached;
    plain.scaling = cached.scaling = scaling;
    cached.weight_cache = &cache;

    ops::matmul_forward(out_plain.t, d_inp.t, d_w.t, Tensor{}, Tensor{}, kFp8, &plain);
    for (int use = 0; use < 2; ++use) {
      ops::matmul_forward(out_cached.t, d_inp.t, d_w.t, Tensor{}, Tensor{}, kFp8, &cached);
      EXPECT_TRUE(cache.scaled && cache.cast && cache.transposed) << "use " << use;
      EXPECT_EQ(out_cached.host(), out_plain.host()) << "forward, use " << use;
    }
    ops::matmul_backward(dinp_plain.t, Tensor{}, Tensor{}, d_dout.t, d_inp.t, d_w.t, Tensor{}, kFp8, &plain);
    ops::matmul_backward(dinp_cached.t, Tensor{}, Tensor{}, d_dout.t, d_inp.t, d_w.t, Tensor{}, kFp8, &cached);
    EXPECT_EQ(dinp_cached.host(), dinp_plain.host()) << "dinp from the cached transposed copy";
    // A backward first (a cache cleared mid-step never is, but the op allows
    // it): per tensor the scale, then W^T only; in blocks both copies at once.
    cache.invalidate();
    ops::matmul_backward(dinp_cached.t, Tensor{}, Tensor{}, d_dout.t, d_inp.t, d_w.t, Tensor{}, kFp8, &cached);
    EXPECT_TRUE(cache.scaled && cache.transposed);
    EXPECT_EQ(cache.cast, scaling == ops::Fp8Scaling::kBlock);
    EXPECT_EQ(dinp_cached.host(), dinp_plain.host()) << "dinp filling the cache";
  }
}

TEST(CudaFp8Linear, RefusesF32ActivationsNamingThem) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  std::vector<float> inp(32 * 16, 1.0f), w(16 * 16, 1.0f), out(32 * 16, 0.0f);
  DevTensor d_inp(inp, {32, 16}, DType::kF32), d_w(w, {16, 16}), d_out(out, {32, 16});
  try {
    ops::matmul_forward(d_out.t, d_inp.t, d_w.t, Tensor{}, Tensor{}, ops::MatmulFormat::kFp8E4M3);
    ADD_FAILURE() << "f32 activations were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("take bf16 activations"), std::string::npos) << e.what();
  }
}

// ---- amax slots (ops::Fp8Options; the norms' out_amax; engine/cuda/amax.cuh) ----
// An amax made inside the kernel that writes a tensor must be the one
// fp8_amax finds reading it back, bit for bit, and must change nothing the
// kernel writes; a ready slot must be what the op scales by.

// The amax of a device tensor's values as the CPU reference finds it.
float host_amax(const DevTensor& d) {
  const std::vector<float> v = d.host();
  return cpu::e4m3_amax(v.data(), static_cast<std::int64_t>(v.size()));
}

struct AmaxSlot {
  std::vector<float> init{-1.0f};
  DevTensor d{init, Shape{1}, DType::kF32};
  float value() const { return d.host()[0]; }
  void set(float v) {
    std::vector<float> h{v};
    ops::copy(d.t, cpu_view(h, {1}));
  }
};

TEST(CudaFp8AmaxSlots, NormsWriteTheAmaxOfWhatTheyWrite) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  std::mt19937 rng(31);
  // 768: the vectorised kernels (a row in registers); 100: the scalar ones.
  // 37 rows: the last block of 8 warps only partly filled.
  for (const std::int64_t C : {768, 100}) {
    SCOPED_TRACE("C " + std::to_string(C));
    const std::int64_t N = 37;
    std::vector<float> x = random_vector(N * C, rng, 2.0f), g = random_vector(C, rng, 1.0f),
                       b = random_vector(C, rng, 0.2f), zeros(N * C, 0.0f), stats(N, 0.0f);
    DevTensor d_x(x, {N, C}), d_g(g, {C}), d_b(b, {C}), y_plain(zeros, {N, C}), y_slot(zeros, {N, C}),
        mean(stats, {N}, DType::kF32), rstd(stats, {N}, DType::kF32);
    AmaxSlot slot;
    ops::layernorm_forward(y_plain.t, mean.t, rstd.t, d_x.t, d_g.t, d_b.t, 1e-5);
    ops::layernorm_forward(y_slot.t, mean.t, rstd.t, d_x.t, d_g.t, d_b.t, 1e-5, slot.d.t);
    EXPECT_EQ(y_slot.host(), y_plain.host()) << "layernorm: the slot changed the output";
    EXPECT_EQ(bits(slot.value()), bits(host_amax(y_slot))) << "layernorm";
    slot.set(1e30f);  // the kernel resets it: a leftover larger value must not survive
    ops::rmsnorm_forward(y_plain.t, rstd.t, d_x.t, d_g.t, 1e-6);
    ops::rmsnorm_forward(y_slot.t, rstd.t, d_x.t, d_g.t, 1e-6, slot.d.t);
    EXPECT_EQ(y_slot.host(), y_plain.host()) << "rmsnorm: the slot changed the output";
    EXPECT_EQ(bits(slot.value()), bits(host_amax(y_slot))) << "rmsnorm";
  }
}

TEST(CudaFp8AmaxSlots, LinearLayersFillTheSlotsAndScaleByReadyOnes) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  if (!fp8_gemm_available()) GTEST_SKIP() << "no FP8 tensor cores (refusal checked)";
  constexpr auto kFp8 = ops::MatmulFormat::kFp8E4M3;
  const std::int64_t N = 256, C = 768, OC = 1024;
  std::mt19937 rng(32);
  std::vector<float> inp = random_vector(N * C, rng, 1.0f), w = random_vector(OC * C, rng, 0.02f),
                     b = random_vector(OC, rng, 0.1f), res = random_vector(N * OC, rng, 1.0f),
                     dout = random_vector(N * OC, rng, 1e-3f), gp = random_vector(N * C, rng, 1.5f),
                     z_out(N * OC, 0.0f), z_in(N * C, 0.0f), z_w(OC * C, 0.0f);
  DevTensor d_inp(inp, {N, C}), d_w(w, {OC, C}), d_b(b, {OC}), d_res(res, {N, OC}), d_dout(dout, {N, OC}),
      d_gp(gp, {N, C}), out_own(z_out, {N, OC}), pre_own(z_out, {N, OC}), out(z_out, {N, OC}), pre(z_out, {N, OC}),
      dinp_own(z_in, {N, C}), dinp(z_in, {N, C}), dw_own(z_w, {OC, C}, DType::kF32), dw(z_w, {OC, C}, DType::kF32);
  AmaxSlot inp_slot, out_slot, dout_slot, dinp_slot;

  // Forward: the input's slot filled, the GELU output's amax for the next layer.
  ops::matmul_forward(out_own.t, d_inp.t, d_w.t, d_b.t, pre_own.t, kFp8);
  ops::Fp8Options fwd;
  fwd.inp_amax = inp_slot.d.t;
  fwd.out_amax = out_slot.d.t;
  ops::matmul_forward(out.t, d_inp.t, d_w.t, d_b.t, pre.t, kFp8, &fwd);
  EXPECT_EQ(out.host(), out_own.host());
  EXPECT_EQ(pre.host(), pre_own.host());
  EXPECT_EQ(bits(inp_slot.value()), bits(host_amax(d_inp)));
  EXPECT_EQ(bits(out_slot.value()), bits(host_amax(out))) << "the GELU epilogue's amax";
  ops::matmul_forward_add(out.t, d_inp.t, d_w.t, d_b.t, d_res.t, kFp8, &fwd);
  EXPECT_EQ(bits(out_slot.value()), bits(host_amax(out))) << "the residual epilogue's amax";
  // Ready: read, not recomputed (a wrong value moves the output).
  fwd.inp_amax_ready = true;
  fwd.out_amax = Tensor{};
  ops::matmul_forward(out.t, d_inp.t, d_w.t, d_b.t, pre.t, kFp8, &fwd);
  EXPECT_EQ(out.host(), out_own.host()) << "scaled by the ready slot";
  inp_slot.set(3.0f * host_amax(d_inp));
  ops::matmul_forward(out.t, d_inp.t, d_w.t, d_b.t, pre.t, kFp8, &fwd);
  EXPECT_NE(out.host(), out_own.host()) << "a ready slot was not read";
  inp_slot.set(host_amax(d_inp));

  // Backward: dout's and the input's amax ready, dinp's written by the GELU backward.
  ops::matmul_backward(dinp_own.t, dw_own.t, Tensor{}, d_dout.t, d_inp.t, d_w.t, d_gp.t, kFp8);
  dout_slot.set(host_amax(d_dout));
  ops::Fp8Options bwd;
  bwd.inp_amax = inp_slot.d.t;
  bwd.inp_amax_ready = true;
  bwd.dout_amax = dout_slot.d.t;
  bwd.dinp_amax = dinp_slot.d.t;
  ops::matmul_backward(dinp.t, dw.t, Tensor{}, d_dout.t, d_inp.t, d_w.t, d_gp.t, kFp8, &bwd);
  EXPECT_EQ(dinp.host(), dinp_own.host());
  EXPECT_EQ(dw.host(), dw_own.host());
  EXPECT_EQ(bits(dinp_slot.value()), bits(host_amax(dinp))) << "the GELU backward's amax";
  // Without GELU the amax is a pass of its own, the same number.
  ops::matmul_backward(dinp.t, Tensor{}, Tensor{}, d_dout.t, d_inp.t, d_w.t, Tensor{}, kFp8, &bwd);
  EXPECT_EQ(bits(dinp_slot.value()), bits(host_amax(dinp)));
}

// ---- block scaling (fp8_block.h; ops::Fp8Scaling::kBlock) --------------------------
// The casts against engine/cpu/fp8_e4m3.h's e4m3_block_image, bit for bit:
// every code times its tile's factor is the CPU's dequantised image, each
// factor read where cuBLASLt reads it. Shapes with partial tiles both ways.

std::vector<float> download_f32(const float* p, std::int64_t n) {
  std::vector<float> h(static_cast<std::size_t>(n));
  EXPECT_EQ(cudaMemcpy(h.data(), p, h.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Compares codes * factor(r, c) with the CPU image (rows, cols); returns mismatches.
template <typename Factor>
int compare_block_image(const std::vector<std::uint8_t>& codes, std::int64_t rows, std::int64_t cols,
                        const Factor& factor, const std::vector<float>& want, const char* what) {
  int bad = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const float got = cpu::e4m3_to_float(codes[r * cols + c]) * factor(r, c), expected = want[r * cols + c];
      if (bits(got) != bits(expected) && ++bad <= 5)
        ADD_FAILURE() << what << " (" << r << ", " << c << "): " << got << ", want " << expected;
    }
  return bad;
}

std::vector<float> transpose_host(const std::vector<float>& x, std::int64_t rows, std::int64_t cols) {
  std::vector<float> t(x.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

TEST(CudaFp8Block, CastsMatchTheCpuBlockImageBitForBit) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  using cuda::fp8_blocks;
  using cuda::fp8_pad4;
  std::mt19937 rng(41);
  const cudaStream_t stream = cuda::context().stream();
  for (const auto& [R, K] : {std::pair<std::int64_t, std::int64_t>{200, 300}, {37, 128}, {256, 1600}}) {
    SCOPED_TRACE(std::to_string(R) + " x " + std::to_string(K));
    std::vector<float> x = random_vector(R * K, rng, 2.0f);
    for (std::int64_t r = 0; r < R; ++r)  // rows of different magnitudes: the tiles' scales differ
      for (std::int64_t c = 0; c < K; ++c) x[r * K + c] *= std::exp2(static_cast<float>(r % 9) - 4.0f);
    Bf16Dev dev(x);  // x now holds the bf16-rounded values
    // 1 x 128 along each row.
    std::vector<float> want(R * K);
    cpu::e4m3_block_image(x.data(), R, K, 1, 128, want.data());
    Bytes q(R * K);
    Buffer scales(kCuda, cuda::fp8_vec128_scales(R, K) * sizeof(float));
    cuda::fp8_block_cast_rows(dev.ptr, R, K, q.ptr, static_cast<float*>(scales.data()), stream);
    sync();
    const std::vector<float> f = download_f32(static_cast<float*>(scales.data()), cuda::fp8_vec128_scales(R, K));
    EXPECT_EQ(compare_block_image(q.host(R * K), R, K, [&](std::int64_t r, std::int64_t c) {
      return f[(c / 128) * fp8_pad4(R) + r];
    }, want, "rows"), 0);
    // 128 x 1 along each column, transposed: qt (K, R), tiled along R.
    std::vector<float> want_cols(R * K);
    cpu::e4m3_block_image(x.data(), R, K, 128, 1, want_cols.data());
    Bytes qt(R * K);
    Buffer scales_t(kCuda, cuda::fp8_vec128_scales(K, R) * sizeof(float));
    cuda::fp8_block_cast_transpose_columns(dev.ptr, R, K, qt.ptr, static_cast<float*>(scales_t.data()), stream);
    sync();
    const std::vector<float> ft = download_f32(static_cast<float*>(scales_t.data()), cuda::fp8_vec128_scales(K, R));
    EXPECT_EQ(compare_block_image(qt.host(R * K), K, R, [&](std::int64_t k, std::int64_t r) {
      return ft[(r / 128) * fp8_pad4(K) + k];
    }, transpose_host(want_cols, R, K), "columns, transposed"), 0);
    // 128 x 128 weight blocks, and the transposed copy from the same blocks.
    std::vector<float> want_w(R * K);
    cpu::e4m3_block_image(x.data(), R, K, 128, 128, want_w.data());
    Bytes qw(R * K), qwt(R * K);
    Buffer sw(kCuda, cuda::fp8_blk128_scales(R, K) * sizeof(float)), swt(kCuda, cuda::fp8_blk128_scales(K, R) * sizeof(float));
    cuda::fp8_block_cast_weight(dev.ptr, R, K, qw.ptr, static_cast<float*>(sw.data()), qwt.ptr,
                                static_cast<float*>(swt.data()), stream);
    sync();
    const std::vector<float> fw = download_f32(static_cast<float*>(sw.data()), cuda::fp8_blk128_scales(R, K));
    const std::vector<float> fwt = download_f32(static_cast<float*>(swt.data()), cuda::fp8_blk128_scales(K, R));
    EXPECT_EQ(compare_block_image(qw.host(R * K), R, K, [&](std::int64_t r, std::int64_t c) {
      return fw[(r / 128) * fp8_pad4(fp8_blocks(K)) + c / 128];
    }, want_w, "weight blocks"), 0);
    EXPECT_EQ(compare_block_image(qwt.host(R * K), K, R, [&](std::int64_t c, std::int64_t r) {
      return fwt[(c / 128) * fp8_pad4(fp8_blocks(R)) + r / 128];
    }, transpose_host(want_w, R, K), "weight blocks, transposed"), 0);
    // W^T alone (a weight kept in no cache, for the input gradient): the same codes and factors.
    Bytes qwt_alone(R * K);
    Buffer swt_alone(kCuda, cuda::fp8_blk128_scales(K, R) * sizeof(float));
    cuda::fp8_block_cast_weight(dev.ptr, R, K, nullptr, nullptr, qwt_alone.ptr, static_cast<float*>(swt_alone.data()),
                                stream);
    sync();
    EXPECT_EQ(qwt_alone.host(R * K), qwt.host(R * K));
    EXPECT_EQ(download_f32(static_cast<float*>(swt_alone.data()), cuda::fp8_blk128_scales(K, R)), fwt);
  }
}

// The block-scaled linear layers against the CPU's block reference (the same
// codes and factors on both sides; what differs is bf16 output rounding and
// the order of the f32 sums, as CudaFp8Linear's tolerance says).
TEST(CudaFp8Block, LinearOpsMatchTheCpuReference) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU";
  std::string why;
  if (!cuda::fp8_block_scaling_supported(cuda::context().device(), &why)) GTEST_SKIP() << why;
  constexpr auto kFp8 = ops::MatmulFormat::kFp8E4M3;
  ops::Fp8Options block;
  block.scaling = ops::Fp8Scaling::kBlock;
  std::mt19937 rng(42);
  for (const LinearShape& s : {LinearShape{256, 768, 2304}, LinearShape{160, 1600, 400}}) {
    SCOPED_TRACE("N " + std::to_string(s.N) + ", C " + std::to_string(s.C) + ", OC " + std::to_string(s.OC));
    std::vector<float> inp = random_vector(s.N * s.C, rng, 1.0f), w = random_vector(s.OC * s.C, rng, 0.02f),
                       b = random_vector(s.OC, rng, 0.1f), dout = random_vector(s.N * s.OC, rng, 1e-3f),
                       pre_in = random_vector(s.N * s.C, rng, 1.5f), zeros(s.N * s.OC, 0.0f), zeros_in(s.N * s.C, 0.0f);
    std::vector<float> dw(s.OC * s.C, 0.5f);
    DevTensor d_inp(inp, {s.N, s.C}), d_w(w, {s.OC, s.C}), d_b(b, {s.OC}), d_dout(dout, {s.N, s.OC}),
        d_pre_in(pre_in, {s.N, s.C}), d_out(zeros, {s.N, s.OC}), d_pre(zeros, {s.N, s.OC}),
        d_dinp(zeros_in, {s.N, s.C}), d_dw(dw, {s.OC, s.C}, DType::kF32);
    // Forward with bias and GELU.
    ops::matmul_forward(d_out.t, d_inp.t, d_w.t, d_b.t, d_pre.t, kFp8, &block);
    std::vector<float> out(s.N * s.OC), pre(s.N * s.OC);
    ops::matmul_forward(cpu_view(out, {s.N, s.OC}), cpu_view(inp, {s.N, s.C}), cpu_view(w, {s.OC, s.C}),
                        cpu_view(b, {s.OC}), cpu_view(pre, {s.N, s.OC}), kFp8, &block);
    expect_close_to_reference(d_pre.host(), pre, "block fp8 forward: pre_gelu");
    expect_close_to_reference(d_out.host(), out, "block fp8 forward: gelu(pre)");
    // Backward: dinp with the GELU gradient, dweight accumulating.
    ops::matmul_backward(d_dinp.t, d_dw.t, Tensor{}, d_dout.t, d_inp.t, d_w.t, d_pre_in.t, kFp8, &block);
    std::vector<float> dinp(s.N * s.C);
    ops::matmul_backward(cpu_view(dinp, {s.N, s.C}), cpu_view(dw, {s.OC, s.C}), Tensor{}, cpu_view(dout, {s.N, s.OC}),
                         cpu_view(inp, {s.N, s.C}), cpu_view(w, {s.OC, s.C}), cpu_view(pre_in, {s.N, s.C}), kFp8,
                         &block);
    expect_close_to_reference(d_dinp.host(), dinp, "block fp8 backward: dinp * gelu'(pre)");
    expect_close_to_reference(d_dw.host(), dw, "block fp8 backward: dweight (accumulated)");
  }
}

#else   // a build without CUDA

TEST(CudaFp8, NeedsACudaBuild) { GTEST_SKIP() << "engine built without CUDA"; }

#endif  // ENGINE_WITH_CUDA

}  // namespace
