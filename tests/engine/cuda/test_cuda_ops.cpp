// The CUDA backend against the CPU backend (the reference), op by op, on
// random inputs, through the public API only (engine::ops, Buffer, copy).
//
// Every test runs in two modes:
//   fp32: every tensor f32 on both sides; the backends must agree tightly.
//   bf16: activations (and the weights' working copies) bf16 on the GPU,
//         parameter gradients, statistics and optimizer state f32. The CPU
//         computes in f32 on the SAME values: inputs are first rounded to
//         bf16 (through the device, i.e. the backend's own conversion) and
//         those rounded values are what both backends see.
// Device outputs are poisoned with NaN before each op, so an element the op
// forgets to write fails the comparison.
//
// Tolerances. An element passes when |got - want| <= rel |want| + abs * max|want|.
// bf16 keeps 8 significant bits, so rounding an f32 result to bf16 moves it by
// at most half an ulp: |x - bf16(x)| <= 2^-9 |x|. With identical (pre-rounded)
// inputs and fp32 accumulation on both sides, an op whose result is rounded
// once is within 2^-9 relative; we allow 2^-8 (2x margin) plus a small
// absolute term for fp32 summation-order noise near zero. Ops that round an
// intermediate to bf16 too (GELU fused after a bf16 GEMM, attention's P and
// dS fed to tensor cores in bf16, the dinp of layernorm and RMSNorm
// accumulated in bf16) get 2^-7 (SwiGLU and RoPE round once: 2^-8);
// attention backward, whose gradients pass through several bf16
// roundings and the cancellation in dP - rowsum(dO o O), is checked by
// relative L2 error (2^-6) with a looser per-element bound. f32 results
// (parameter gradients, losses, statistics) differ only by fp32 summation
// order: 1e-4 relative. In fp32 mode everything is within 1e-4 relative of
// max|want| (different but equally valid summation orders, CUDA's fast exp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <random>
#include <stdlib.h>  // setenv, unsetenv
#include <string>
#include <utility>
#include <vector>

#include "engine/buffer.h"
#include "engine/check.h"
#include "engine/device.h"
#include "engine/ops.h"
#include "engine/tensor.h"
#include "tests/support/scoped_env.h"
#if ENGINE_WITH_CUDA
#include "engine/cuda/context.h"
#include "engine/cuda/gemm_search.h"
#endif

namespace {

using namespace engine;

constexpr DeviceType kCpu = DeviceType::kCpu;
constexpr DeviceType kCuda = DeviceType::kCuda;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

bool gpu_visible() {
  static const bool visible = cuda_device_count() > 0;
  return visible;
}

// ---- tensors ------------------------------------------------------------------

// An f32 CPU tensor owning its storage.
struct Host {
  std::vector<float> v;
  Tensor t;
  explicit Host(Shape shape) : v(static_cast<std::size_t>(shape.numel())), t(v.data(), shape, DType::kF32, kCpu) {}
  Host(Host&&) = default;  // the vector's storage moves with it, so t stays valid
  float& operator[](std::int64_t i) { return v[static_cast<std::size_t>(i)]; }
  float operator[](std::int64_t i) const { return v[static_cast<std::size_t>(i)]; }
};

// A CUDA tensor owning its storage.
struct Dev {
  Buffer buffer;
  Tensor t;
  Dev(Shape shape, DType dtype)
      : buffer(kCuda, static_cast<std::size_t>(shape.numel()) * dtype_size(dtype)), t(buffer.as_tensor(shape, dtype)) {}
};

Host random_host(Shape shape, std::mt19937& rng, float stddev = 1.0f, float mean = 0.0f) {
  Host h(shape);
  std::normal_distribution<float> normal(mean, stddev);
  for (float& x : h.v) x = normal(rng);
  return h;
}

Dev to_device(const Host& h, DType dtype) {
  Dev d(h.t.shape(), dtype);
  ops::copy(d.t, h.t);
  return d;
}

Host to_host(const Tensor& t) {
  Host h(t.shape());
  ops::copy(h.t, t);
  return h;
}

// Rounds h in place to what a `dtype` tensor can hold (bf16: through the device).
void round_to(Host& h, DType dtype) {
  if (dtype == DType::kF32) return;
  Dev d = to_device(h, dtype);
  ops::copy(h.t, d.t);
}

// Random values already representable in `dtype`, on the host.
Host random_in(DType dtype, Shape shape, std::mt19937& rng, float stddev = 1.0f, float mean = 0.0f) {
  Host h = random_host(shape, rng, stddev, mean);
  round_to(h, dtype);
  return h;
}

// A device tensor of `dtype` filled with NaN: whatever the op does not write stays NaN.
Dev poisoned(Shape shape, DType dtype) {
  Dev d(shape, dtype);
  ops::fill(d.t, kNaN);
  return d;
}

Dev i32_to_device(const std::vector<std::int32_t>& values, Shape shape) {
  std::vector<std::int32_t> copy = values;
  const Tensor host(copy.data(), shape, DType::kI32, kCpu);
  Dev d(shape, DType::kI32);
  ops::copy(d.t, host);
  return d;
}

// ---- comparison ---------------------------------------------------------------

struct Tolerance {
  double rel;        // relative to |want| per element
  double abs;        // relative to max |want| over the tensor
  double l2 = 1e30;  // bound on ||got - want|| / ||want||
};

// fp32 mode gets `f32`, bf16 mode `bf16`.
Tolerance pick(DType act, Tolerance f32, Tolerance bf16) { return act == DType::kF32 ? f32 : bf16; }

const Tolerance kF32Tight{1e-4, 1e-4};
const Tolerance kBf16Once{std::ldexp(1.0, -8), std::ldexp(1.0, -12)};   // one bf16 rounding
const Tolerance kBf16Twice{std::ldexp(1.0, -7), std::ldexp(1.0, -9)};   // two roundings / approximations
const Tolerance kF32Sum{1e-4, 1e-4};                                    // f32 results of bf16 inputs

void expect_close(const Tensor& got_tensor, const Host& want, Tolerance tol, const std::string& what) {
  const Host got = to_host(got_tensor);
  ASSERT_EQ(got.v.size(), want.v.size()) << what;
  double max_want = 0.0, err2 = 0.0, want2 = 0.0, worst = 0.0;
  for (float w : want.v) max_want = std::max(max_want, std::fabs(static_cast<double>(w)));
  std::int64_t failures = 0, worst_at = -1;
  std::string examples;
  for (std::size_t i = 0; i < want.v.size(); ++i) {
    const double g = got.v[i], w = want.v[i], diff = std::fabs(g - w);
    const double bound = tol.rel * std::fabs(w) + tol.abs * max_want;
    err2 += (g - w) * (g - w);
    want2 += w * w;
    if (!(diff <= bound)) {  // also catches NaN (unwritten, poisoned) elements
      if (failures < 5)
        examples += "\n  [" + std::to_string(i) + "] got " + std::to_string(g) + " want " + std::to_string(w);
      ++failures;
    }
    if (diff > worst) {  // NaN compares false: reported through `failures` instead
      worst = diff;
      worst_at = static_cast<std::int64_t>(i);
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << want.v.size()
                         << " elements out of tolerance (rel " << tol.rel << ", abs " << tol.abs << " x max|want| "
                         << max_want << "); worst |diff| " << worst << " at " << worst_at << examples;
  const double rel_l2 = want2 > 0 ? std::sqrt(err2 / want2) : std::sqrt(err2);
  EXPECT_LE(rel_l2, tol.l2) << what << ": relative L2 error";
}

// ---- fixtures -----------------------------------------------------------------

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_visible()) GTEST_SKIP() << "no CUDA device visible";
  }
};

class CudaMode : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!gpu_visible()) GTEST_SKIP() << "no CUDA device visible";
  }
  DType act() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Modes, CudaMode, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

// ---- device and memory -------------------------------------------------------------

TEST_F(Cuda, DeviceQueries) {
  EXPECT_TRUE(built_with_cuda());
  EXPECT_FALSE(cuda_device_name(0).empty());
  const auto before = memory_stats(kCuda).current;
  {
    Dev d(Shape{1000}, DType::kF32);
    EXPECT_GE(memory_stats(kCuda).current, before + 4000);
  }
  EXPECT_EQ(memory_stats(kCuda).current, before);
}

TEST_F(Cuda, CopyConvertsExactlyLikeTheCpu) {
  std::mt19937 rng(1);
  // Special values: ties (1 + 2^-8 rounds to even 1; 1 + 3*2^-8 up to 1 + 2^-6),
  // signed zero, infinities, overflow to inf, a tiny value.
  std::vector<float> values = {0.0f, -0.0f, 1.0f, 1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8),
                               -2.5f, 1e-3f, 3.4e38f, std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(), 1e-30f};
  std::normal_distribution<float> normal(0.0f, 10.0f);
  while (values.size() < 1000) values.push_back(normal(rng));
  const Shape shape{static_cast<std::int64_t>(values.size())};
  Host src(shape);
  src.v = values;
  src.t = Tensor(src.v.data(), shape, DType::kF32, kCpu);

  // The CPU's own f32 -> bf16 conversion is the reference, bit for bit.
  std::vector<std::uint16_t> cpu_bits(values.size());
  const Tensor cpu_bf16(cpu_bits.data(), shape, DType::kBF16, kCpu);
  ops::copy(cpu_bf16, src.t);

  // host f32 -> device bf16 (staged conversion) -> host bf16 (plain copy)
  Dev d_bf16(shape, DType::kBF16);
  ops::copy(d_bf16.t, src.t);
  std::vector<std::uint16_t> bits(values.size());
  ops::copy(Tensor(bits.data(), shape, DType::kBF16, kCpu), d_bf16.t);
  EXPECT_EQ(bits, cpu_bits) << "host f32 -> device bf16";

  // host f32 -> device f32 -> device bf16 (conversion kernel) -> host bf16
  Dev d_f32 = to_device(src, DType::kF32);
  Dev d_bf16b = poisoned(shape, DType::kBF16);
  ops::copy(d_bf16b.t, d_f32.t);
  std::fill(bits.begin(), bits.end(), 0);
  ops::copy(Tensor(bits.data(), shape, DType::kBF16, kCpu), d_bf16b.t);
  EXPECT_EQ(bits, cpu_bits) << "device f32 -> device bf16";

  // device bf16 -> host f32 (staged) and device bf16 -> device f32 -> host f32
  Host widened(shape);
  ops::copy(widened.t, cpu_bf16);
  const Host back = to_host(d_bf16.t);
  Dev d_f32b = poisoned(shape, DType::kF32);
  ops::copy(d_f32b.t, d_bf16.t);
  const Host back2 = to_host(d_f32b.t);
  for (std::size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(std::memcmp(&back.v[i], &widened.v[i], 4), 0) << "device bf16 -> host f32 at " << i;
    EXPECT_EQ(std::memcmp(&back2.v[i], &widened.v[i], 4), 0) << "device bf16 -> device f32 at " << i;
  }

  // i32 round trip, and a device-to-device copy of the same dtype.
  std::vector<std::int32_t> ints(777);
  for (std::size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<std::int32_t>(i * 2654435761u);
  Dev d_i32 = i32_to_device(ints, Shape{777});
  Dev d_i32b(Shape{777}, DType::kI32);
  ops::copy(d_i32b.t, d_i32.t);
  std::vector<std::int32_t> ints_back(777, 0);
  ops::copy(Tensor(ints_back.data(), Shape{777}, DType::kI32, kCpu), d_i32b.t);
  EXPECT_EQ(ints_back, ints);
}

TEST_P(CudaMode, FillScaleAddAccumulate) {
  std::mt19937 rng(2);
  // 999 elements take the scalar add, 4096 the 16-byte one.
  for (const Shape shape : {Shape{3, 333}, Shape{4, 1024}}) {
    SCOPED_TRACE("numel " + std::to_string(shape.numel()));
    const Tolerance once = pick(act(), Tolerance{1e-6, 0}, kBf16Once);

    Dev filled = poisoned(shape, act());
    ops::fill(filled.t, 2.5);
    Host twos(shape);
    std::fill(twos.v.begin(), twos.v.end(), 2.5f);
    expect_close(filled.t, twos, Tolerance{0, 0}, "fill");

    Host a = random_in(act(), shape, rng), b = random_in(act(), shape, rng);
    Dev da = to_device(a, act()), db = to_device(b, act());

    Dev scaled = to_device(a, act());
    ops::scale(scaled.t, 0.3);
    Host want_scaled(shape);
    ops::copy(want_scaled.t, a.t);
    ops::scale(want_scaled.t, 0.3);
    expect_close(scaled.t, want_scaled, once, "scale");

    Dev sum = poisoned(shape, act());
    ops::add(sum.t, da.t, db.t);
    Host want_sum(shape);
    ops::add(want_sum.t, a.t, b.t);
    expect_close(sum.t, want_sum, once, "add");

    ops::add(da.t, da.t, db.t);  // out aliases a
    expect_close(da.t, want_sum, once, "add in place");

    // f32 gradient += activation-dtype gradient, and same-dtype accumulate.
    Host g = random_host(shape, rng);
    Dev dg = to_device(g, DType::kF32);
    ops::accumulate(dg.t, db.t);
    ops::accumulate(g.t, b.t);
    expect_close(dg.t, g, Tolerance{1e-6, 0}, "accumulate into f32");

    Dev acc = to_device(a, act());
    ops::accumulate(acc.t, db.t);
    expect_close(acc.t, want_sum, once, "accumulate");
  }
}

TEST_P(CudaMode, SumOfSquares) {
  std::mt19937 rng(3);
  for (std::int64_t n : {1, 1000, 100003, 3000000}) {
    Host x = random_in(act(), Shape{n}, rng, 2.0f);
    Dev dx = to_device(x, act());
    const double want = ops::sum_of_squares(x.t);
    const double got = ops::sum_of_squares(dx.t);
    EXPECT_NEAR(got, want, 1e-9 * want) << "n = " << n;  // both fp64, different summation orders
    EXPECT_EQ(got, ops::sum_of_squares(dx.t)) << "deterministic, n = " << n;
  }
}

// ---- embedding ------------------------------------------------------------------

TEST_P(CudaMode, Embedding) {
  std::mt19937 rng(4);
  const std::int64_t B = 3, T = 9, C = 48, V = 37, maxT = 16;
  for (const bool with_wpe : {true, false}) {
    for (const std::int64_t vocab_start : {0, 5}) {
      const std::int64_t position_start = with_wpe ? 4 : 0;
      SCOPED_TRACE("wpe " + std::to_string(with_wpe) + ", vocab_start " + std::to_string(vocab_start));
      // Tokens in [0, 50): with vocab_start 5 some fall outside the shard [5, 42);
      // few distinct values, so many repeat (segments of the sorted backward).
      std::vector<std::int32_t> tokens(B * T);
      std::uniform_int_distribution<int> token(0, 49);
      for (auto& t : tokens) t = token(rng) % 12 * 4 + (token(rng) % 2);
      Dev d_tokens = i32_to_device(tokens, Shape{B, T});
      std::vector<std::int32_t> tokens_host = tokens;
      const Tensor h_tokens(tokens_host.data(), Shape{B, T}, DType::kI32, kCpu);

      Host wte = random_in(act(), Shape{V, C}, rng), wpe = random_in(act(), Shape{maxT, C}, rng);
      Dev d_wte = to_device(wte, act()), d_wpe = to_device(wpe, act());
      Host out(Shape{B, T, C});
      ops::embedding_forward(out.t, h_tokens, wte.t, with_wpe ? wpe.t : Tensor{}, vocab_start, position_start);
      Dev d_out = poisoned(Shape{B, T, C}, act());
      ops::embedding_forward(d_out.t, d_tokens.t, d_wte.t, with_wpe ? d_wpe.t : Tensor{}, vocab_start,
                             position_start);
      expect_close(d_out.t, out, pick(act(), Tolerance{1e-6, 0}, kBf16Once), "embedding_forward");

      // Backward accumulates into existing f32 gradients.
      Host dout = random_in(act(), Shape{B, T, C}, rng);
      Dev d_dout = to_device(dout, act());
      Host dwte = random_host(Shape{V, C}, rng), dwpe = random_host(Shape{maxT, C}, rng);
      Dev d_dwte = to_device(dwte, DType::kF32), d_dwpe = to_device(dwpe, DType::kF32);
      ops::embedding_backward(dwte.t, with_wpe ? dwpe.t : Tensor{}, dout.t, h_tokens, vocab_start, position_start);
      ops::embedding_backward(d_dwte.t, with_wpe ? d_dwpe.t : Tensor{}, d_dout.t, d_tokens.t, vocab_start,
                              position_start);
      expect_close(d_dwte.t, dwte, Tolerance{1e-5, 1e-6}, "embedding_backward dwte");
      expect_close(d_dwpe.t, dwpe, Tolerance{1e-5, 1e-6}, "embedding_backward dwpe");
    }
  }
}

// ---- layer norm -----------------------------------------------------------------------

TEST_P(CudaMode, LayerNorm) {
  std::mt19937 rng(5);
  // C picks the kernels: 36 (not whole 16-byte packs in bf16: scalar), 80 and
  // 768 (vectorised, one or a few packs per lane; the fused backward), 1600
  // (gpt2-1558m: 7 bf16 packs a lane, the fused backward's K = 7; f32's 13
  // exceed its 8: scalar dinp, vectorised partial sums), 5120 (rows too long
  // for registers in either dtype).
  for (const std::int64_t C : {36, 80, 768, 1600, 5120}) {
    SCOPED_TRACE("C = " + std::to_string(C));
    const std::int64_t B = 2, T = 37, N = B * T;
    Host inp = random_in(act(), Shape{B, T, C}, rng, 2.0f, 0.5f);
    Host weight = random_in(act(), Shape{C}, rng, 0.2f, 1.0f), bias = random_in(act(), Shape{C}, rng, 0.2f);
    Dev d_inp = to_device(inp, act()), d_weight = to_device(weight, act()), d_bias = to_device(bias, act());

    Host out(Shape{B, T, C}), mean(Shape{N}), rstd(Shape{N});
    ops::layernorm_forward(out.t, mean.t, rstd.t, inp.t, weight.t, bias.t, 1e-3);
    Dev d_out = poisoned(Shape{B, T, C}, act()), d_mean = poisoned(Shape{N}, DType::kF32),
        d_rstd = poisoned(Shape{N}, DType::kF32);
    ops::layernorm_forward(d_out.t, d_mean.t, d_rstd.t, d_inp.t, d_weight.t, d_bias.t, 1e-3);
    expect_close(d_out.t, out, pick(act(), kF32Tight, kBf16Once), "layernorm_forward out");
    expect_close(d_mean.t, mean, Tolerance{1e-5, 1e-5}, "layernorm_forward mean");
    expect_close(d_rstd.t, rstd, Tolerance{1e-5, 0}, "layernorm_forward rstd");

    // Backward: dinp accumulates (activation dtype), dweight/dbias accumulate in f32.
    Host dout = random_in(act(), Shape{B, T, C}, rng);
    Host dinp = random_in(act(), Shape{B, T, C}, rng);
    Host dweight = random_host(Shape{C}, rng), dbias = random_host(Shape{C}, rng);
    Dev d_dout = to_device(dout, act()), d_dinp = to_device(dinp, act());
    Dev d_dweight = to_device(dweight, DType::kF32), d_dbias = to_device(dbias, DType::kF32);
    ops::layernorm_backward(dinp.t, dweight.t, dbias.t, dout.t, inp.t, weight.t, mean.t, rstd.t);
    ops::layernorm_backward(d_dinp.t, d_dweight.t, d_dbias.t, d_dout.t, d_inp.t, d_weight.t, d_mean.t, d_rstd.t);
    expect_close(d_dinp.t, dinp, pick(act(), kF32Tight, kBf16Twice), "layernorm_backward dinp");
    expect_close(d_dweight.t, dweight, kF32Sum, "layernorm_backward dweight");
    expect_close(d_dbias.t, dbias, kF32Sum, "layernorm_backward dbias");
  }
}

// Many rows: the backward's row chunks (32 rows each in the fused kernel, up
// to 64 chunks otherwise) and the chunk sums over many of them; and every
// parameter gradient the same bit for bit when the op runs twice.
TEST_P(CudaMode, LayerNormBackwardOverManyRowsRepeats) {
  std::mt19937 rng(15);
  for (const std::int64_t C : {768, 1600}) {
    SCOPED_TRACE("C = " + std::to_string(C));
    const std::int64_t N = 2411;  // 75 chunks of 32 and a partial one
    Host inp = random_in(act(), Shape{N, C}, rng, 2.0f, 0.5f), weight = random_in(act(), Shape{C}, rng, 0.2f, 1.0f);
    Host bias = random_in(act(), Shape{C}, rng, 0.2f);
    Host out(Shape{N, C}), mean(Shape{N}), rstd(Shape{N});
    ops::layernorm_forward(out.t, mean.t, rstd.t, inp.t, weight.t, bias.t, 1e-5);
    Host dout = random_in(act(), Shape{N, C}, rng), dinp = random_in(act(), Shape{N, C}, rng);
    Host dweight = random_host(Shape{C}, rng), dbias = random_host(Shape{C}, rng);
    Dev d_inp = to_device(inp, act()), d_weight = to_device(weight, act()), d_dout = to_device(dout, act());
    Dev d_mean = to_device(mean, DType::kF32), d_rstd = to_device(rstd, DType::kF32);
    std::vector<Host> results;
    for (int run = 0; run < 2; ++run) {
      Dev d_dinp = to_device(dinp, act()), d_dweight = to_device(dweight, DType::kF32),
          d_dbias = to_device(dbias, DType::kF32);
      ops::layernorm_backward(d_dinp.t, d_dweight.t, d_dbias.t, d_dout.t, d_inp.t, d_weight.t, d_mean.t, d_rstd.t);
      results.push_back(to_host(d_dinp.t));
      results.push_back(to_host(d_dweight.t));
      results.push_back(to_host(d_dbias.t));
    }
    ops::layernorm_backward(dinp.t, dweight.t, dbias.t, dout.t, inp.t, weight.t, mean.t, rstd.t);
    expect_close(results[0].t, dinp, pick(act(), kF32Tight, kBf16Twice), "layernorm_backward dinp");
    expect_close(results[1].t, dweight, kF32Sum, "layernorm_backward dweight");
    expect_close(results[2].t, dbias, kF32Sum, "layernorm_backward dbias");
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(0, std::memcmp(results[i].v.data(), results[3 + i].v.data(), results[i].v.size() * sizeof(float)))
          << "layernorm_backward output " << i << " differs between two runs on the same inputs";
  }
}

// ---- RMSNorm ----------------------------------------------------------------------------------

// Forward and backward of one case against the CPU on the same values;
// `w_dtype` is the weight's dtype on the device (the activations' or f32).
void check_rmsnorm(std::int64_t N, std::int64_t C, double eps, DType act, DType w_dtype, std::mt19937& rng) {
  SCOPED_TRACE("N " + std::to_string(N) + " C " + std::to_string(C) + " eps " + std::to_string(eps) + " weight " +
               dtype_name(w_dtype));
  // A non-zero mean: RMSNorm must not subtract it.
  Host inp = random_in(act, Shape{N, C}, rng, 2.0f, 0.5f), weight = random_in(w_dtype, Shape{C}, rng, 0.2f, 1.0f);
  Dev d_inp = to_device(inp, act), d_weight = to_device(weight, w_dtype);
  Host out(Shape{N, C}), rstd(Shape{N});
  ops::rmsnorm_forward(out.t, rstd.t, inp.t, weight.t, eps);
  Dev d_out = poisoned(Shape{N, C}, act), d_rstd = poisoned(Shape{N}, DType::kF32);
  ops::rmsnorm_forward(d_out.t, d_rstd.t, d_inp.t, d_weight.t, eps);
  expect_close(d_out.t, out, pick(act, kF32Tight, kBf16Once), "rmsnorm_forward out");
  expect_close(d_rstd.t, rstd, Tolerance{1e-5, 0}, "rmsnorm_forward rstd");

  // Backward: dinp accumulates (activation dtype), dweight accumulates in f32.
  Host dout = random_in(act, Shape{N, C}, rng), dinp = random_in(act, Shape{N, C}, rng);
  Host dweight = random_host(Shape{C}, rng);
  Dev d_dout = to_device(dout, act), d_dinp = to_device(dinp, act), d_dweight = to_device(dweight, DType::kF32);
  ops::rmsnorm_backward(dinp.t, dweight.t, dout.t, inp.t, weight.t, rstd.t);
  ops::rmsnorm_backward(d_dinp.t, d_dweight.t, d_dout.t, d_inp.t, d_weight.t, d_rstd.t);
  expect_close(d_dinp.t, dinp, pick(act, kF32Tight, kBf16Twice), "rmsnorm_backward dinp");
  expect_close(d_dweight.t, dweight, kF32Sum, "rmsnorm_backward dweight");
}

TEST_P(CudaMode, RmsNorm) {
  std::mt19937 rng(19);
  // C picks the kernels, as for layer norm: 36 (bf16 not whole packs: scalar;
  // f32 one pack a lane), 80 and 768 (vectorised, the fused backward), 1600
  // (bf16 7 packs a lane, the fused backward's K = 7; f32 13: vectorised
  // forward, long-row backward), 4096 (Llama's width: bf16 16 packs a lane in
  // the forward, the long-row backward), 5120 (scalar forward in both dtypes).
  for (const std::int64_t C : {36, 80, 768, 1600, 4096, 5120})
    for (const double eps : {1e-6, 1e-5}) check_rmsnorm(2 * 37, C, eps, act(), act(), rng);
}

TEST_F(Cuda, RmsNormWithF32WeightAndBf16Activations) {
  // The f32 master weight passed with bf16 activations: the scalar kernels.
  std::mt19937 rng(20);
  for (const std::int64_t C : {80, 1600}) check_rmsnorm(37, C, 1e-6, DType::kBF16, DType::kF32, rng);
}

// Many rows (chunks of the dweight reduction) and dweight the same bit for
// bit when the backward runs twice.
TEST_P(CudaMode, RmsNormBackwardOverManyRowsRepeats) {
  std::mt19937 rng(21);
  for (const std::int64_t C : {768, 4096}) {
    SCOPED_TRACE("C = " + std::to_string(C));
    const std::int64_t N = 2411;
    Host inp = random_in(act(), Shape{N, C}, rng, 2.0f), weight = random_in(act(), Shape{C}, rng, 0.2f, 1.0f);
    Host out(Shape{N, C}), rstd(Shape{N});
    ops::rmsnorm_forward(out.t, rstd.t, inp.t, weight.t, 1e-6);
    Host dout = random_in(act(), Shape{N, C}, rng), dinp = random_in(act(), Shape{N, C}, rng);
    Host dweight = random_host(Shape{C}, rng);
    Dev d_inp = to_device(inp, act()), d_weight = to_device(weight, act()), d_dout = to_device(dout, act());
    Dev d_rstd = to_device(rstd, DType::kF32);
    std::vector<Host> results;
    for (int run = 0; run < 2; ++run) {
      Dev d_dinp = to_device(dinp, act()), d_dweight = to_device(dweight, DType::kF32);
      ops::rmsnorm_backward(d_dinp.t, d_dweight.t, d_dout.t, d_inp.t, d_weight.t, d_rstd.t);
      results.push_back(to_host(d_dinp.t));
      results.push_back(to_host(d_dweight.t));
    }
    ops::rmsnorm_backward(dinp.t, dweight.t, dout.t, inp.t, weight.t, rstd.t);
    expect_close(results[0].t, dinp, pick(act(), kF32Tight, kBf16Twice), "rmsnorm_backward dinp");
    expect_close(results[1].t, dweight, kF32Sum, "rmsnorm_backward dweight");
    for (int i = 0; i < 2; ++i)
      EXPECT_EQ(0, std::memcmp(results[i].v.data(), results[2 + i].v.data(), results[i].v.size() * sizeof(float)))
          << "rmsnorm_backward output " << i << " differs between two runs on the same inputs";
  }
}

// ---- GELU ---------------------------------------------------------------------------------

TEST_P(CudaMode, Gelu) {
  std::mt19937 rng(6);
  const Shape shape{4, 517};
  Host x = random_in(act(), shape, rng, 3.0f), dout = random_in(act(), shape, rng);
  Dev d_x = to_device(x, act()), d_dout = to_device(dout, act());
  Host out(shape), dinp(shape);
  ops::gelu_forward(out.t, x.t);
  ops::gelu_backward(dinp.t, x.t, dout.t);
  Dev d_out = poisoned(shape, act()), d_dinp = poisoned(shape, act());
  ops::gelu_forward(d_out.t, d_x.t);
  ops::gelu_backward(d_dinp.t, d_x.t, d_dout.t);
  expect_close(d_out.t, out, pick(act(), kF32Tight, kBf16Once), "gelu_forward");
  expect_close(d_dinp.t, dinp, pick(act(), kF32Tight, kBf16Once), "gelu_backward");
}

// ---- SwiGLU -------------------------------------------------------------------------------------

TEST_P(CudaMode, Swiglu) {
  std::mt19937 rng(22);
  // F 517: not whole 16-byte packs (scalar kernels); 1024: the packed ones;
  // 11008: Llama 2 7B's intermediate size.
  const std::pair<std::int64_t, std::int64_t> sizes[] = {{4, 517}, {6, 1024}, {3, 11008}};  // (N, F)
  for (const auto& [N, F] : sizes) {
    SCOPED_TRACE("N " + std::to_string(N) + " F " + std::to_string(F));
    Host inp = random_in(act(), Shape{N, 2 * F}, rng, 3.0f);
    inp[0] = -100.0f;  // saturated gates: exp overflows, silu must be 0 or x, not NaN
    inp[1] = 100.0f;
    Host dout = random_in(act(), Shape{N, F}, rng);
    Dev d_inp = to_device(inp, act()), d_dout = to_device(dout, act());
    Host out(Shape{N, F}), dinp(Shape{N, 2 * F});
    ops::swiglu_forward(out.t, inp.t);
    ops::swiglu_backward(dinp.t, dout.t, inp.t);
    Dev d_out = poisoned(Shape{N, F}, act()), d_dinp = poisoned(Shape{N, 2 * F}, act());
    ops::swiglu_forward(d_out.t, d_inp.t);
    ops::swiglu_backward(d_dinp.t, d_dout.t, d_inp.t);
    expect_close(d_out.t, out, pick(act(), kF32Tight, kBf16Once), "swiglu_forward");
    expect_close(d_dinp.t, dinp, pick(act(), kF32Tight, kBf16Once), "swiglu_backward");
  }
}

TEST_F(Cuda, SwigluWithMixedDtypes) {
  // bf16 input, f32 output and gradient: the scalar kernels convert per element.
  std::mt19937 rng(23);
  const std::int64_t N = 5, F = 64;
  Host inp = random_in(DType::kBF16, Shape{N, 2 * F}, rng, 3.0f), dout = random_host(Shape{N, F}, rng);
  Dev d_inp = to_device(inp, DType::kBF16), d_dout = to_device(dout, DType::kF32);
  Host out(Shape{N, F}), dinp(Shape{N, 2 * F});
  ops::swiglu_forward(out.t, inp.t);
  ops::swiglu_backward(dinp.t, dout.t, inp.t);
  Dev d_out = poisoned(Shape{N, F}, DType::kF32), d_dinp = poisoned(Shape{N, 2 * F}, DType::kF32);
  ops::swiglu_forward(d_out.t, d_inp.t);
  ops::swiglu_backward(d_dinp.t, d_dout.t, d_inp.t);
  expect_close(d_out.t, out, kF32Tight, "swiglu_forward");
  expect_close(d_dinp.t, dinp, kF32Tight, "swiglu_backward");
}

// ---- RoPE ---------------------------------------------------------------------------------------

// inv_freq[i] = base^(-2i/D), optionally with transformers' llama3 scaling
// (factor 8, low 1, high 4, original context 8192), as test_rope.cpp makes it.
Host rope_inv_freq(std::int64_t D, double base, bool llama3) {
  Host f(Shape{D / 2});
  for (std::int64_t i = 0; i < D / 2; ++i) {
    double inv = std::pow(base, -double(2 * i) / double(D));
    if (llama3) {
      const double wavelen = 2 * 3.141592653589793 / inv, low = 8192.0, high = 8192.0 / 4;
      if (wavelen > low) {
        inv /= 8;
      } else if (wavelen >= high) {
        const double smooth = (8192.0 / wavelen - 1) / (4 - 1);
        inv = (1 - smooth) * inv / 8 + smooth * inv;
      }
    }
    f[i] = static_cast<float>(inv);
  }
  return f;
}

TEST_P(CudaMode, Rope) {
  std::mt19937 rng(24);
  struct Case {
    std::int64_t B, T, H, KV, D, position_start;
    bool llama3;
  };
  // Grouped and multi-head, head sizes 8 to 128, positions from 0 to 100000
  // (angles of 10^5 radians: where a fast-math sinf would be wrong).
  const Case cases[] = {{2, 17, 4, 4, 64, 0, false},
                        {2, 9, 4, 2, 8, 3, true},
                        {1, 33, 6, 2, 128, 5000, true},
                        {2, 5, 4, 1, 32, 100000, false},
                        {1, 300, 32, 8, 128, 0, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " H " + std::to_string(c.H) + " KV " +
                 std::to_string(c.KV) + " D " + std::to_string(c.D) + " start " + std::to_string(c.position_start));
    const std::int64_t W = (c.H + 2 * c.KV) * c.D;
    const Shape shape{c.B, c.T, W};
    Host inv_freq = rope_inv_freq(c.D, c.llama3 ? 500000 : 10000, c.llama3);
    Dev d_inv_freq = to_device(inv_freq, DType::kF32);
    const int H = static_cast<int>(c.H), KV = static_cast<int>(c.KV);
    for (const bool backward : {false, true}) {
      SCOPED_TRACE(backward ? "rope_backward" : "rope_forward");
      const Host x = random_in(act(), shape, rng, 2.0f);
      Host want(shape);
      ops::copy(want.t, x.t);
      Dev d_x = to_device(x, act());
      if (backward) {
        ops::rope_backward(want.t, inv_freq.t, H, KV, c.position_start);
        ops::rope_backward(d_x.t, d_inv_freq.t, H, KV, c.position_start);
      } else {
        ops::rope_forward(want.t, inv_freq.t, H, KV, c.position_start);
        ops::rope_forward(d_x.t, d_inv_freq.t, H, KV, c.position_start);
      }
      expect_close(d_x.t, want, pick(act(), kF32Tight, kBf16Once), "q and k rotated");
      // v untouched, bit for bit.
      const Host got = to_host(d_x.t);
      std::int64_t changed = 0;
      for (std::int64_t bt = 0; bt < c.B * c.T; ++bt)
        for (std::int64_t i = (c.H + c.KV) * c.D; i < W; ++i) {
          const auto at = static_cast<std::size_t>(bt * W + i);
          changed += std::memcmp(&got.v[at], &x.v[at], sizeof(float)) != 0;
        }
      EXPECT_EQ(changed, 0) << "elements of v changed";
    }
  }
}

// ---- matmul ----------------------------------------------------------------------------------

struct MatmulCase {
  std::int64_t N, C, OC;
  bool bias, gelu;
};

void check_matmul(const MatmulCase& mc, DType act, DType weight_dtype, std::mt19937& rng) {
  const std::int64_t N = mc.N, C = mc.C, OC = mc.OC;
  SCOPED_TRACE("N " + std::to_string(N) + " C " + std::to_string(C) + " OC " + std::to_string(OC) + " bias " +
               std::to_string(mc.bias) + " gelu " + std::to_string(mc.gelu) + " weight " + dtype_name(weight_dtype));
  const DType w_round = act == DType::kBF16 ? DType::kBF16 : weight_dtype;  // values the GEMM really uses
  Host inp = random_in(act, Shape{N, C}, rng), weight = random_in(w_round, Shape{OC, C}, rng, 0.1f);
  Host bias = random_in(w_round, Shape{OC}, rng, 0.5f);
  Dev d_inp = to_device(inp, act), d_weight = to_device(weight, weight_dtype), d_bias = to_device(bias, weight_dtype);

  // Forward, optionally with GELU fused (pre_gelu kept).
  Host out(Shape{N, OC}), pre(Shape{N, OC});
  ops::matmul_forward(out.t, inp.t, weight.t, mc.bias ? bias.t : Tensor{}, mc.gelu ? pre.t : Tensor{});
  Dev d_out = poisoned(Shape{N, OC}, act), d_pre = poisoned(Shape{N, OC}, act);
  ops::matmul_forward(d_out.t, d_inp.t, d_weight.t, mc.bias ? d_bias.t : Tensor{}, mc.gelu ? d_pre.t : Tensor{});
  if (mc.gelu) {
    expect_close(d_pre.t, pre, pick(act, kF32Tight, kBf16Once), "matmul_forward pre_gelu");
    expect_close(d_out.t, out, pick(act, kF32Tight, kBf16Twice), "matmul_forward gelu(out)");
  } else {
    expect_close(d_out.t, out, pick(act, kF32Tight, kBf16Once), "matmul_forward out");
  }

  // Backward: dinp written (times gelu'(gelu_pre) when given), dweight and
  // dbias accumulated into f32 starting from random values.
  Host dout = random_in(act, Shape{N, OC}, rng);
  Host gelu_pre = random_in(act, Shape{N, C}, rng, 2.0f);
  Host dweight = random_host(Shape{OC, C}, rng), dbias = random_host(Shape{OC}, rng);
  Dev d_dout = to_device(dout, act), d_gelu_pre = to_device(gelu_pre, act);
  Dev d_dweight = to_device(dweight, DType::kF32), d_dbias = to_device(dbias, DType::kF32);
  Dev d_dinp = poisoned(Shape{N, C}, act);
  Host dinp(Shape{N, C});
  ops::matmul_backward(dinp.t, dweight.t, mc.bias ? dbias.t : Tensor{}, dout.t, inp.t, weight.t,
                       mc.gelu ? gelu_pre.t : Tensor{});
  ops::matmul_backward(d_dinp.t, d_dweight.t, mc.bias ? d_dbias.t : Tensor{}, d_dout.t, d_inp.t, d_weight.t,
                       mc.gelu ? d_gelu_pre.t : Tensor{});
  expect_close(d_dinp.t, dinp, pick(act, kF32Tight, mc.gelu ? kBf16Twice : kBf16Once), "matmul_backward dinp");
  expect_close(d_dweight.t, dweight, kF32Sum, "matmul_backward dweight");
  expect_close(d_dbias.t, dbias, kF32Sum, "matmul_backward dbias");

  // Partial backward: only dweight, then only dinp (the others empty).
  Host dweight2 = random_host(Shape{OC, C}, rng);
  Dev d_dweight2 = to_device(dweight2, DType::kF32);
  ops::matmul_backward(Tensor{}, dweight2.t, Tensor{}, dout.t, inp.t, weight.t);
  ops::matmul_backward(Tensor{}, d_dweight2.t, Tensor{}, d_dout.t, d_inp.t, d_weight.t);
  expect_close(d_dweight2.t, dweight2, kF32Sum, "matmul_backward dweight only");
  Dev d_dinp2 = poisoned(Shape{N, C}, act);
  Host dinp2(Shape{N, C});
  ops::matmul_backward(dinp2.t, Tensor{}, Tensor{}, dout.t, inp.t, weight.t);
  ops::matmul_backward(d_dinp2.t, Tensor{}, Tensor{}, d_dout.t, d_inp.t, d_weight.t);
  expect_close(d_dinp2.t, dinp2, pick(act, kF32Tight, kBf16Once), "matmul_backward dinp only");

  // The weight-gradient half on its own (zero-bubble pipelines): no weight read.
  Host dweight3 = random_host(Shape{OC, C}, rng), dbias3 = random_host(Shape{OC}, rng);
  Dev d_dweight3 = to_device(dweight3, DType::kF32), d_dbias3 = to_device(dbias3, DType::kF32);
  ops::matmul_weight_grad(dweight3.t, mc.bias ? dbias3.t : Tensor{}, dout.t, inp.t);
  ops::matmul_weight_grad(d_dweight3.t, mc.bias ? d_dbias3.t : Tensor{}, d_dout.t, d_inp.t);
  expect_close(d_dweight3.t, dweight3, kF32Sum, "matmul_weight_grad dweight");
  expect_close(d_dbias3.t, dbias3, kF32Sum, "matmul_weight_grad dbias");
}

TEST_P(CudaMode, Matmul) {
  std::mt19937 rng(7);
  const MatmulCase cases[] = {
      {64, 96, 160, true, false},   // plain, bias epilogue
      {64, 96, 160, false, false},  // no bias
      {50, 64, 96, true, true},     // GELU fused forward (OC % 8 == 0) and DGELU fused backward (C % 8 == 0)
      {30, 40, 100, true, true},    // OC % 8 != 0: unfused GELU forward
      {37, 36, 24, true, true},     // C % 8 != 0: unfused GELU forward and backward
      {37, 36, 24, true, false},    // C % 8 != 0 with the plain bias epilogue
      {1, 8, 8, true, true},        // a single row
      {256, 768, 3 * 768, true, false},  // a GPT-2 small qkv projection slice
  };
  for (const MatmulCase& mc : cases) check_matmul(mc, act(), act(), rng);
}

// The residual add folded into the projection GEMM (cuBLASLt's C with beta 1):
// out = residual + inp W^T + b against the CPU's matmul_forward + add. One
// bf16 rounding on the GPU (of the f32 sum) against two on the CPU, within
// kBf16Twice. The GPT-2 shapes (C 768 -> 768, 3072 -> 768) and an awkward one.
TEST_P(CudaMode, MatmulForwardAdd) {
  std::mt19937 rng(18);
  const MatmulCase cases[] = {{256, 768, 768, true, false}, {128, 3072, 768, false, false}, {37, 36, 24, true, false}};
  for (const MatmulCase& mc : cases) {
    const std::int64_t N = mc.N, C = mc.C, OC = mc.OC;
    SCOPED_TRACE("N " + std::to_string(N) + " C " + std::to_string(C) + " OC " + std::to_string(OC));
    Host inp = random_in(act(), Shape{N, C}, rng), weight = random_in(act(), Shape{OC, C}, rng, 0.1f);
    Host bias = random_in(act(), Shape{OC}, rng, 0.5f), residual = random_in(act(), Shape{N, OC}, rng, 2.0f);
    Host out(Shape{N, OC});
    ops::matmul_forward_add(out.t, inp.t, weight.t, mc.bias ? bias.t : Tensor{}, residual.t);
    Dev d_inp = to_device(inp, act()), d_weight = to_device(weight, act()), d_bias = to_device(bias, act());
    Dev d_residual = to_device(residual, act()), d_out = poisoned(Shape{N, OC}, act());
    ops::matmul_forward_add(d_out.t, d_inp.t, d_weight.t, mc.bias ? d_bias.t : Tensor{}, d_residual.t);
    expect_close(d_out.t, out, pick(act(), kF32Tight, kBf16Twice), "matmul_forward_add out");
    expect_close(d_residual.t, residual, Tolerance{0, 0}, "matmul_forward_add residual (unchanged)");
  }
}

// Many rows (the GEMM's k for dweight, 65 row chunks for dbias's column sums,
// 16-byte loads at OC 768) and the parameter gradients the same bit for bit
// when the backward runs twice.
TEST_P(CudaMode, MatmulBackwardOverManyRowsRepeats) {
  std::mt19937 rng(16);
  const std::int64_t N = 4100, C = 256, OC = 768;
  const Shape w_shape{OC, C};
  Host inp = random_in(act(), Shape{N, C}, rng), weight = random_in(act(), w_shape, rng, 0.1f);
  Host dout = random_in(act(), Shape{N, OC}, rng);
  Host dweight = random_host(w_shape, rng), dbias = random_host(Shape{OC}, rng);
  Dev d_inp = to_device(inp, act()), d_weight = to_device(weight, act()), d_dout = to_device(dout, act());
  std::vector<Host> results;
  for (int run = 0; run < 2; ++run) {
    Dev d_dinp = poisoned(Shape{N, C}, act());
    Dev d_dweight = to_device(dweight, DType::kF32), d_dbias = to_device(dbias, DType::kF32);
    ops::matmul_backward(d_dinp.t, d_dweight.t, d_dbias.t, d_dout.t, d_inp.t, d_weight.t);
    results.push_back(to_host(d_dweight.t));
    results.push_back(to_host(d_dbias.t));
  }
  Host dinp(Shape{N, C});
  ops::matmul_backward(dinp.t, dweight.t, dbias.t, dout.t, inp.t, weight.t);
  expect_close(results[0].t, dweight, kF32Sum, "matmul_backward dweight");
  expect_close(results[1].t, dbias, kF32Sum, "matmul_backward dbias");
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(0, std::memcmp(results[i].v.data(), results[2 + i].v.data(), results[i].v.size() * sizeof(float)))
        << "matmul_backward " << (i == 0 ? "dweight" : "dbias") << " differs between two runs on the same inputs";
}

TEST_F(Cuda, MatmulWithF32WeightsAndBf16Activations) {
  // Master weights passed directly: converted to bf16 for the GEMM.
  std::mt19937 rng(8);
  check_matmul({48, 64, 80, true, true}, DType::kBF16, DType::kF32, rng);
}

// ENGINE_GEMM_SEARCH (engine/cuda/gemm_search.h): with the heuristic's
// candidates timed and the fastest kept, every product still matches the
// CPU, and the accumulating dweight GEMM's candidates run on a scratch D, not
// the gradient being accumulated (check_matmul starts dweight from random
// values). The shapes are used nowhere else in this program, so the choice
// is made here, not taken from the cache.
using test_support::ScopedEnv;  // tests/support/scoped_env.h

TEST_P(CudaMode, MatmulWithTimedAlgorithmSearch) {
  const ScopedEnv search("ENGINE_GEMM_SEARCH", "16");
  std::mt19937 rng(17);
  const std::int64_t base = act() == DType::kBF16 ? 8 : 0;  // each mode its own shapes (the cache is per dtype too)
  const MatmulCase cases[] = {
      {200 + base, 128, 320, true, false},  // bias epilogue
      {96 + base, 160, 256, true, true},    // fused GELU forward and DGELU backward (bf16)
      {1000 + base, 200, 200, false, false},  // a width not a multiple of the 128- and 256-wide tiles
  };
#if ENGINE_WITH_CUDA
  const engine::cuda::GemmSearchCounts before = engine::cuda::gemm_search_counts();
#endif
  for (const MatmulCase& mc : cases) check_matmul(mc, act(), act(), rng);
#if ENGINE_WITH_CUDA
  // The search really ran: some shape had several candidates, and they were timed.
  const engine::cuda::GemmSearchCounts after = engine::cuda::gemm_search_counts();
  EXPECT_GT(after.searches, before.searches);
  EXPECT_GT(after.candidates_timed - before.candidates_timed, after.searches - before.searches);
#endif
}

#if ENGINE_WITH_CUDA
// Runs without a GPU: only the variable's parsing.
TEST(GemmSearch, ReadsTheCandidateCountAndRefusesOthers) {
  {
    const ScopedEnv empty("ENGINE_GEMM_SEARCH", "");
    EXPECT_EQ(engine::cuda::gemm_search_candidates(), 1);
  }
  {
    const ScopedEnv unset("ENGINE_GEMM_SEARCH", nullptr);
    EXPECT_EQ(engine::cuda::gemm_search_candidates(), 1);
  }
  {
    const ScopedEnv set("ENGINE_GEMM_SEARCH", "32");
    EXPECT_EQ(engine::cuda::gemm_search_candidates(), 32);
  }
  for (const char* bad : {"0", "33", "-4", "8x", "many"}) {
    const ScopedEnv set("ENGINE_GEMM_SEARCH", bad);
    try {
      engine::cuda::gemm_search_candidates();
      ADD_FAILURE() << "ENGINE_GEMM_SEARCH=" << bad << " was accepted";
    } catch (const engine::Error& e) {
      EXPECT_NE(std::string(e.what()).find("ENGINE_GEMM_SEARCH='" + std::string(bad) + "'"), std::string::npos)
          << e.what();
    }
  }
}

// Runs without a GPU: only the variable's parsing.
TEST(LtWorkspace, ReadsTheSizeInMibAndRefusesOthers) {
  using engine::cuda::Context;
  {
    const ScopedEnv unset("ENGINE_LT_WORKSPACE_MIB", nullptr);
    EXPECT_EQ(Context::lt_workspace_bytes_from_env(), Context::kLtWorkspaceBytes);
  }
  {
    const ScopedEnv set("ENGINE_LT_WORKSPACE_MIB", "256");
    EXPECT_EQ(Context::lt_workspace_bytes_from_env(), std::size_t{256} << 20);
  }
  for (const char* bad : {"0", "4097", "-1", "32M", "big"}) {
    const ScopedEnv set("ENGINE_LT_WORKSPACE_MIB", bad);
    EXPECT_THROW(Context::lt_workspace_bytes_from_env(), engine::Error) << bad;
  }
}
#endif

// ---- attention ----------------------------------------------------------------------------------

struct AttentionCase {
  std::int64_t B, T, H, D;
  std::int64_t KV = 0;  // key/value heads (grouped-query attention); 0: KV = H
  std::int64_t kv() const { return KV == 0 ? H : KV; }
  std::int64_t width() const { return (H + 2 * kv()) * D; }  // W, a row of qkv
};

// lse[b, h, t] = log sum_{j<=t} exp(q_t . k_j / sqrt(D)), in double on the
// host; query head h reads key head h / (H / KV).
Host reference_lse(const Host& qkv, const AttentionCase& a) {
  const std::int64_t W = a.width();
  Host lse(Shape{a.B, a.H, a.T});
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.D));
  std::vector<double> s(static_cast<std::size_t>(a.T));
  for (std::int64_t b = 0; b < a.B; ++b)
    for (std::int64_t h = 0; h < a.H; ++h)
      for (std::int64_t t = 0; t < a.T; ++t) {
        const float* q = &qkv.v[static_cast<std::size_t>((b * a.T + t) * W + h * a.D)];
        const std::int64_t kv_head = h / (a.H / a.kv());
        double mx = -1e300;
        for (std::int64_t j = 0; j <= t; ++j) {
          const float* k = &qkv.v[static_cast<std::size_t>((b * a.T + j) * W + (a.H + kv_head) * a.D)];
          double dot = 0;
          for (std::int64_t d = 0; d < a.D; ++d) dot += static_cast<double>(q[d]) * k[d];
          s[static_cast<std::size_t>(j)] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        double sum = 0;
        for (std::int64_t j = 0; j <= t; ++j) sum += std::exp(s[static_cast<std::size_t>(j)] - mx);
        lse[(b * a.H + h) * a.T + t] = static_cast<float>(mx + std::log(sum));
      }
  return lse;
}

void check_attention(const AttentionCase& a, DType act, std::mt19937& rng) {
  SCOPED_TRACE("B " + std::to_string(a.B) + " T " + std::to_string(a.T) + " H " + std::to_string(a.H) + " KV " +
               std::to_string(a.kv()) + " D " + std::to_string(a.D));
  const std::int64_t C = a.H * a.D, W = a.width();
  const int n_head = static_cast<int>(a.H), n_kv_head = static_cast<int>(a.KV);
  Host qkv = random_in(act, Shape{a.B, a.T, W}, rng);
  Dev d_qkv = to_device(qkv, act);

  Host out(Shape{a.B, a.T, C});
  Host saved(ops::attention_saved_shape(kCpu, a.B, a.H, a.T));
  ops::attention_forward(out.t, saved.t, qkv.t, n_head, n_kv_head);
  Dev d_out = poisoned(Shape{a.B, a.T, C}, act);
  Dev d_saved = poisoned(ops::attention_saved_shape(kCuda, a.B, a.H, a.T), ops::attention_saved_dtype(kCuda, act));
  ops::attention_forward(d_out.t, d_saved.t, d_qkv.t, n_head, n_kv_head);
  expect_close(d_out.t, out,
               pick(act, kF32Tight, Tolerance{std::ldexp(1.0, -7), std::ldexp(1.0, -7), std::ldexp(1.0, -7)}),
               "attention_forward out");
  expect_close(d_saved.t, reference_lse(qkv, a), Tolerance{1e-5, 5e-5}, "attention_forward lse");

  Host dout = random_in(act, Shape{a.B, a.T, C}, rng);
  Dev d_dout = to_device(dout, act);
  Host dqkv(Shape{a.B, a.T, W});
  ops::attention_backward(dqkv.t, dout.t, qkv.t, out.t, saved.t, n_head, n_kv_head);
  Dev d_dqkv = poisoned(Shape{a.B, a.T, W}, act);
  ops::attention_backward(d_dqkv.t, d_dout.t, d_qkv.t, d_out.t, d_saved.t, n_head, n_kv_head);
  expect_close(d_dqkv.t, dqkv,
               pick(act, kF32Tight, Tolerance{std::ldexp(1.0, -5), std::ldexp(1.0, -5), std::ldexp(1.0, -6)}),
               "attention_backward dqkv");
}

TEST_P(CudaMode, Attention) {
  std::mt19937 rng(9);
  const AttentionCase cases[] = {
      {1, 1, 2, 64},   {2, 17, 3, 64},  {1, 64, 2, 64},  {2, 257, 2, 64}, {1, 1024, 2, 64},
      {2, 17, 2, 32},  {1, 257, 3, 32}, {1, 1024, 1, 32}, {1, 1, 1, 128}, {1, 64, 1, 128},
      {2, 257, 2, 128}, {1, 1024, 1, 128},
  };
  for (const AttentionCase& a : cases) check_attention(a, act(), rng);
  // The f32 path takes any head size (up to 256).
  if (act() == DType::kF32) check_attention({2, 33, 2, 48}, act(), rng);
}

// Grouped-query attention (KV < H): query head h reads key/value head
// h / (H / KV), and dk, dv are the sums over each group (the built-in kernels
// sum the group inside one block; cuDNN, where it runs the shape, its own way).
// (H, KV) = (4, 2), (4, 1), (6, 2), (8, 2) at every head size of the bf16
// kernels, T = 1 and T past several key tiles.
TEST_P(CudaMode, GroupedQueryAttention) {
  std::mt19937 rng(25);
  const AttentionCase cases[] = {
      {2, 17, 4, 64, 2},  {1, 257, 4, 64, 1},  {2, 65, 6, 32, 2},  {1, 1024, 8, 64, 2},
      {1, 1, 4, 128, 2},  {2, 130, 4, 128, 1}, {1, 300, 8, 32, 2}, {2, 33, 4, 64, 4},
  };
  for (const AttentionCase& a : cases) check_attention(a, act(), rng);
  if (act() == DType::kF32) check_attention({2, 33, 6, 48, 3}, act(), rng);
}

// The f32 path's dK/dV sum the group in one warp, in order: two runs agree
// bit for bit (all of dqkv: the f32 dQ has no atomics either).
TEST_F(Cuda, F32GroupedQueryAttentionBackwardRepeats) {
  std::mt19937 rng(26);
  const std::int64_t B = 2, T = 70, H = 6, KV = 2, D = 32, W = (H + 2 * KV) * D;
  Host qkv = random_host(Shape{B, T, W}, rng), dout = random_host(Shape{B, T, H * D}, rng);
  Dev d_qkv = to_device(qkv, DType::kF32), d_dout = to_device(dout, DType::kF32);
  Dev d_out(Shape{B, T, H * D}, DType::kF32), d_saved(ops::attention_saved_shape(kCuda, B, H, T), DType::kF32);
  ops::attention_forward(d_out.t, d_saved.t, d_qkv.t, H, KV);
  std::vector<Host> runs;
  for (int run = 0; run < 2; ++run) {
    Dev d_dqkv = poisoned(Shape{B, T, W}, DType::kF32);
    ops::attention_backward(d_dqkv.t, d_dout.t, d_qkv.t, d_out.t, d_saved.t, H, KV);
    runs.push_back(to_host(d_dqkv.t));
  }
  EXPECT_EQ(0, std::memcmp(runs[0].v.data(), runs[1].v.data(), runs[0].v.size() * sizeof(float)));
}

TEST_F(Cuda, Bf16AttentionRejectsUnsupportedHeadSizes) {
  // 20: neither cuDNN (head sizes in multiples of 8) nor the built-in kernels
  // (32, 64, 128) take it, so this throws whichever ENGINE_ATTENTION picks.
  const std::int64_t B = 1, T = 8, H = 2, D = 20;
  Dev qkv(Shape{B, T, 3 * H * D}, DType::kBF16), out(Shape{B, T, H * D}, DType::kBF16);
  Dev saved(ops::attention_saved_shape(kCuda, B, H, T), DType::kF32);
  ops::fill(qkv.t, 0.0);
  EXPECT_THROW(ops::attention_forward(out.t, saved.t, qkv.t, static_cast<int>(H)), Error);
}

// ---- classifier ------------------------------------------------------------------------------------

TEST_P(CudaMode, SoftmaxCrossEntropy) {
  std::mt19937 rng(10);
  struct Case {
    std::int64_t N, V, Vp;
  };
  // Vp = 64: 16-byte vector path; Vp = 53: scalar path; a GPT-2 sized row.
  for (const Case& c : {Case{6, 50, 64}, Case{5, 53, 53}, Case{3, 50257, 50304}}) {
    for (const double grad_scale : {0.0, 0.25}) {
      SCOPED_TRACE("N " + std::to_string(c.N) + " V " + std::to_string(c.V) + " Vp " + std::to_string(c.Vp) +
                   " grad_scale " + std::to_string(grad_scale));
      Host logits = random_in(act(), Shape{c.N, c.Vp}, rng, 3.0f);
      std::vector<std::int32_t> targets(static_cast<std::size_t>(c.N));
      std::uniform_int_distribution<int> target(0, static_cast<int>(c.V) - 1);
      for (auto& t : targets) t = target(rng);
      targets[0] = static_cast<std::int32_t>(c.V - 1);  // the last real class
      Dev d_logits = to_device(logits, act());
      Dev d_targets = i32_to_device(targets, Shape{c.N});
      const Tensor h_targets(targets.data(), Shape{c.N}, DType::kI32, kCpu);

      Host losses(Shape{c.N});
      Host want_logits(Shape{c.N, c.Vp});
      ops::copy(want_logits.t, logits.t);
      ops::softmax_cross_entropy(losses.t, want_logits.t, h_targets, c.V, grad_scale);
      Dev d_losses = poisoned(Shape{c.N}, DType::kF32);
      ops::softmax_cross_entropy(d_losses.t, d_logits.t, d_targets.t, c.V, grad_scale);
      expect_close(d_losses.t, losses, Tolerance{1e-5, 1e-5}, "losses");
      // grad_scale 0 leaves the logits untouched; otherwise they hold the gradient.
      expect_close(d_logits.t, grad_scale == 0.0 ? logits : want_logits,
                   grad_scale == 0.0 ? Tolerance{0, 0} : pick(act(), kF32Tight, kBf16Once), "dlogits");
    }
  }
}

// ---- optimizer -------------------------------------------------------------------------------------

TEST_F(Cuda, AdamW) {
  std::mt19937 rng(11);
  ops::AdamWHyper hyper;
  hyper.lr = 1e-3, hyper.weight_decay = 0.1, hyper.grad_scale = 0.5, hyper.step = 3;
  // 1234: the scalar kernel (n % 4 != 0); 4100: the 16-byte vector kernel.
  for (const std::int64_t n : {1234, 4100})
  for (const int working_kind : {0, 1, 2}) {  // none, f32, bf16
    const Shape shape{n};
    SCOPED_TRACE("n " + std::to_string(n) + " working " + std::to_string(working_kind));
    Host params = random_host(shape, rng), grads = random_host(shape, rng), m = random_host(shape, rng, 0.1f);
    Host v = random_host(shape, rng, 0.1f);
    for (float& x : v.v) x = x * x;  // second moments are non-negative
    Dev d_params = to_device(params, DType::kF32), d_grads = to_device(grads, DType::kF32);
    Dev d_m = to_device(m, DType::kF32), d_v = to_device(v, DType::kF32);
    const DType wdt = working_kind == 2 ? DType::kBF16 : DType::kF32;
    Dev d_working = poisoned(shape, wdt);

    ops::adamw_update(params.t, grads.t, m.t, v.t, hyper);
    ops::adamw_update(d_params.t, d_grads.t, d_m.t, d_v.t, hyper, working_kind ? d_working.t : Tensor{});
    const Tolerance exact{1e-6, 1e-7};
    expect_close(d_params.t, params, exact, "params");
    expect_close(d_m.t, m, exact, "m");
    expect_close(d_v.t, v, exact, "v");
    if (working_kind) {
      Host working(shape);
      ops::copy(working.t, params.t);
      round_to(working, wdt);
      expect_close(d_working.t, working, Tolerance{working_kind == 2 ? std::ldexp(1.0, -8) : 1e-6, 0}, "working");
    }
  }
}


// ---- vocabulary-parallel classifier --------------------------------------------------------------
// cross_entropy_partial_max / _partial_sums / _finish over tp column slices
// of (N, Vp) logits, the tensor-parallel all-reduces (MAX, then SUM in rank
// order) emulated on the host, on both backends from the same (pre-rounded)
// values. Tolerances:
//   row_max   exact: a max of identical values, whatever the order.
//   sums      f32 sums of up to 50k positive terms in different orders, with
//             CUDA's __expf (a few ulp): 1e-5 relative (+1e-6 x max for the
//             target-logit row, whose 0 entries are exact on both sides).
//   losses    log of those sums plus an exact (max - target logit): 1e-5,
//             as for softmax_cross_entropy.
//   dlogits   computed in f32 from the same statistics, rounded once to the
//             logits dtype: kF32Tight / kBf16Once, as for the fused op.

// Keeps the statistics tensors of one run alive; on cuda each starts as NaN,
// so an element an op forgets to write fails the comparison.
class StatArena {
 public:
  explicit StatArena(DeviceType device) : device_(device) {}
  Tensor make(Shape shape) {
    if (device_ == kCuda) return dev_.emplace_back(poisoned(shape, DType::kF32)).t;
    Host& h = host_.emplace_back(shape);
    std::fill(h.v.begin(), h.v.end(), std::numeric_limits<float>::quiet_NaN());
    return h.t;
  }

 private:
  DeviceType device_;
  std::deque<Host> host_;
  std::deque<Dev> dev_;
};

struct VocabParallelRun {
  explicit VocabParallelRun(std::int64_t N) : row_max(Shape{N}), sums(Shape{2, N}) {}
  std::vector<Host> row_max_local;  // per rank, before the MAX all-reduce
  Host row_max, sums;               // all-reduced
  std::vector<Host> losses;         // per rank
  std::vector<Host> logits;         // per rank, after finish
};

// The three steps on `slices` (each (N, V_local), rank r holding global
// columns [r V_local, (r + 1) V_local)); the slices are updated in place.
VocabParallelRun run_vocab_parallel(DeviceType device, const std::vector<Tensor>& slices, const Tensor& targets,
                                    std::int64_t vocab_size, double grad_scale) {
  StatArena arena(device);
  const std::int64_t N = slices[0].dim(0), V_local = slices[0].dim(1);
  VocabParallelRun run(N);
  std::fill(run.row_max.v.begin(), run.row_max.v.end(), -std::numeric_limits<float>::infinity());
  for (std::size_t r = 0; r < slices.size(); ++r) {
    const Tensor local = arena.make(Shape{N});
    ops::cross_entropy_partial_max(local, slices[r], static_cast<std::int64_t>(r) * V_local, vocab_size);
    run.row_max_local.push_back(to_host(local));
    for (std::int64_t n = 0; n < N; ++n) run.row_max[n] = std::max(run.row_max[n], run.row_max_local.back()[n]);
  }
  const Tensor row_max = arena.make(Shape{N});
  ops::copy(row_max, run.row_max.t);

  std::fill(run.sums.v.begin(), run.sums.v.end(), 0.0f);
  for (std::size_t r = 0; r < slices.size(); ++r) {
    const Tensor local = arena.make(Shape{2, N});
    ops::cross_entropy_partial_sums(local, slices[r], row_max, targets, static_cast<std::int64_t>(r) * V_local,
                                    vocab_size);
    const Host h = to_host(local);
    for (std::int64_t i = 0; i < 2 * N; ++i) run.sums[i] += h[i];
  }
  const Tensor sums = arena.make(Shape{2, N});
  ops::copy(sums, run.sums.t);

  for (std::size_t r = 0; r < slices.size(); ++r) {
    const Tensor losses = arena.make(Shape{N});
    ops::cross_entropy_finish(losses, slices[r], row_max, sums, targets, static_cast<std::int64_t>(r) * V_local,
                              vocab_size, grad_scale);
    run.losses.push_back(to_host(losses));
    run.logits.push_back(to_host(slices[r]));
  }
  return run;
}

// Columns [first, first + count) of h (N, Vp).
Host columns(const Host& h, std::int64_t first, std::int64_t count) {
  const std::int64_t N = h.t.dim(0), Vp = h.t.dim(1);
  Host out(Shape{N, count});
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t i = 0; i < count; ++i) out[n * count + i] = h[n * Vp + first + i];
  return out;
}

TEST_P(CudaMode, VocabParallelCrossEntropy) {
  std::mt19937 rng(12);
  struct Case {
    std::int64_t N, V, Vp;
    std::vector<int> tps;
  };
  // V_local 64/32/16: 16-byte packs in both dtypes; Vp 60: V_local 60/30/15,
  // the scalar path; {5, 8} at tp 4: slices {0,1} {2,3} {4,5} {6,7}, the
  // last one padding only; a GPT-2 sized vocabulary at tp 1 and 8.
  const Case cases[] = {{6, 50, 64, {1, 2, 4}}, {5, 53, 60, {1, 2, 4}}, {4, 5, 8, {4}}, {3, 50257, 50304, {1, 8}}};
  for (const Case& c : cases) {
    for (const int tp : c.tps) {
      for (const double grad_scale : {0.0, 0.25}) {
        SCOPED_TRACE("N " + std::to_string(c.N) + " V " + std::to_string(c.V) + " Vp " + std::to_string(c.Vp) +
                     " tp " + std::to_string(tp) + " grad_scale " + std::to_string(grad_scale));
        const std::int64_t N = c.N, V_local = c.Vp / tp;
        Host logits = random_in(act(), Shape{N, c.Vp}, rng, 3.0f);
        for (std::int64_t n = 0; n < N; ++n)
          for (std::int64_t i = c.V; i < c.Vp; ++i) logits[n * c.Vp + i] = 8192.0f;  // padding, exact in bf16
        // Random targets, then one in every slice that holds a class.
        std::vector<std::int32_t> targets(static_cast<std::size_t>(N));
        std::uniform_int_distribution<int> target(0, static_cast<int>(c.V) - 1);
        for (auto& t : targets) t = target(rng);
        for (int r = 0; r < tp; ++r) {
          const std::int64_t last = std::min<std::int64_t>((r + 1) * V_local, c.V) - 1;
          if (last >= r * V_local) targets[static_cast<std::size_t>((r + 1) % N)] = static_cast<std::int32_t>(last);
        }
        Dev d_targets = i32_to_device(targets, Shape{N});
        const Tensor h_targets(targets.data(), Shape{N}, DType::kI32, kCpu);

        std::vector<Host> originals, cpu_slices;
        std::vector<Dev> dev_slices;
        std::vector<Tensor> cpu_views, dev_views;
        for (int r = 0; r < tp; ++r) {
          originals.push_back(columns(logits, r * V_local, V_local));
          cpu_slices.push_back(columns(logits, r * V_local, V_local));
          dev_slices.push_back(to_device(originals.back(), act()));
        }
        for (int r = 0; r < tp; ++r) {
          cpu_views.push_back(cpu_slices[r].t);
          dev_views.push_back(dev_slices[r].t);
        }
        const VocabParallelRun want = run_vocab_parallel(kCpu, cpu_views, h_targets, c.V, grad_scale);
        const VocabParallelRun got = run_vocab_parallel(kCuda, dev_views, d_targets.t, c.V, grad_scale);

        for (int r = 0; r < tp; ++r) {
          const std::string rank = " rank " + std::to_string(r);
          if (r * V_local >= c.V) {  // padding only: -inf, the MAX all-reduce's identity
            for (std::int64_t n = 0; n < N; ++n)
              EXPECT_EQ(got.row_max_local[r][n], -std::numeric_limits<float>::infinity()) << rank;
          } else {
            expect_close(got.row_max_local[r].t, want.row_max_local[r], Tolerance{0, 0}, "row_max" + rank);
          }
        }
        expect_close(got.sums.t, want.sums, Tolerance{1e-5, 1e-6}, "sums");
        for (int r = 0; r < tp; ++r) {
          const std::string rank = " rank " + std::to_string(r);
          expect_close(got.losses[r].t, want.losses[r], Tolerance{1e-5, 1e-5}, "losses" + rank);
          EXPECT_EQ(std::memcmp(got.losses[r].v.data(), got.losses[0].v.data(), 4 * N), 0)
              << "ranks disagree on the loss:" << rank;
          // grad_scale 0 leaves the logits untouched; otherwise they hold the gradient.
          if (grad_scale == 0.0)
            expect_close(got.logits[r].t, originals[r], Tolerance{0, 0}, "logits" + rank);
          else
            expect_close(got.logits[r].t, want.logits[r], pick(act(), kF32Tight, kBf16Once), "dlogits" + rank);
        }
      }
    }
  }
}

TEST_F(Cuda, VocabParallelCrossEntropyMarksBadTargetsWithNaN) {
  // As softmax_cross_entropy: no sync to report a bad target, its loss is NaN
  // on every rank (a padding column, beyond Vp, negative); other rows are fine.
  const std::int64_t N = 3, V = 5, Vp = 8, tp = 2, V_local = Vp / tp;
  for (const std::int32_t bad : {5, 9, -1}) {
    SCOPED_TRACE("target " + std::to_string(bad));
    std::mt19937 rng(13);
    const Host logits = random_host(Shape{N, Vp}, rng);
    std::vector<Dev> slices;
    std::vector<Tensor> views;
    for (std::int64_t r = 0; r < tp; ++r) slices.push_back(to_device(columns(logits, r * V_local, V_local), DType::kF32));
    for (const Dev& d : slices) views.push_back(d.t);
    Dev targets = i32_to_device({0, bad, 4}, Shape{N});
    const VocabParallelRun run = run_vocab_parallel(kCuda, views, targets.t, V, 1.0);
    for (std::int64_t r = 0; r < tp; ++r) {
      EXPECT_TRUE(std::isfinite(run.losses[r][0]) && std::isfinite(run.losses[r][2])) << "rank " << r;
      EXPECT_TRUE(std::isnan(run.losses[r][1])) << "rank " << r << ": loss " << run.losses[r][1];
    }
  }
}

}  // namespace
