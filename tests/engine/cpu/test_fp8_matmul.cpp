// The CPU's FP8 linear layers (ops::MatmulFormat::kFp8E4M3,
// engine/cpu/fp8_matmul.cpp): the quantise-dequantise reference that the CUDA
// FP8 ops are held to. Each op is checked against a double-precision product
// of E4M3 images built here from fp8_e4m3.h's scalar functions (themselves
// checked against the format's definition in test_fp8_e4m3.cpp), so the test
// pins down which operands are quantised, with which scale, and that the bias
// gradient sums the unquantised output gradient.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/check.h"
#include "engine/cpu/fp8_e4m3.h"
#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

constexpr ops::MatmulFormat kFp8 = ops::MatmulFormat::kFp8E4M3;

// The E4M3 image of x under per-tensor current scaling, dequantised, in double.
std::vector<double> e4m3_image(const std::vector<float>& x) {
  const float scale = cpu::e4m3_scale(cpu::e4m3_amax(x.data(), static_cast<std::int64_t>(x.size())));
  const double scale_inv = cpu::e4m3_scale_inv(scale);
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = cpu::e4m3_to_float(cpu::e4m3_from_float(x[i] * scale)) * scale_inv;
  return out;
}

double ref_gelu(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}
double ref_gelu_grad(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  const double u = s * (x + 0.044715 * x * x * x);
  const double sech = 1.0 / std::cosh(u);
  return 0.5 * (1.0 + std::tanh(u)) + x * 0.5 * sech * sech * s * (1.0 + 3.0 * 0.044715 * x * x);
}

// out[n][o] = sum_c a[n][c] * b[o][c]    a (N,K), b (O,K)
std::vector<double> product_nt(std::int64_t N, std::int64_t K, std::int64_t O, const std::vector<double>& a,
                               const std::vector<double>& b) {
  std::vector<double> out(N * O, 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < O; ++o) {
      double s = 0;
      for (std::int64_t k = 0; k < K; ++k) s += a[n * K + k] * b[o * K + k];
      out[n * O + o] = s;
    }
  return out;
}

std::vector<double> transpose(const std::vector<double>& x, std::int64_t rows, std::int64_t cols) {
  std::vector<double> t(x.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return m;
}

// f32 BLAS over at most a few hundred E4M3-valued terms: errors near 1e-6 of
// the values' scale (cpu_test_util.h's reference_tolerance for f32).
void expect_matches(const std::vector<float>& actual, const std::vector<double>& expected, const std::string& what) {
  expect_all_close(actual, expected, 1e-5, 1e-5 * max_abs(expected), what);
}

// Values spread over several binades (as activations are), so the scale and
// the subnormal range both matter.
std::vector<float> spread_values(std::size_t n, std::uint64_t seed, double magnitude) {
  const std::vector<double> u = random_values(n, seed), e = random_values(n, seed + 1, -6.0, 0.0);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(magnitude * u[i] * std::exp2(e[i]));
  return out;
}

struct Fp8MatmulCase : ::testing::Test {
  static constexpr std::int64_t N = 24, C = 48, OC = 40;
  std::vector<float> inp = spread_values(N * C, 11, 3.0), weight = spread_values(OC * C, 12, 0.05),
                     bias = spread_values(OC, 13, 0.5), dout = spread_values(N * OC, 14, 1e-3);
  std::vector<double> q_inp = e4m3_image(inp), q_weight = e4m3_image(weight), q_dout = e4m3_image(dout);
};

TEST_F(Fp8MatmulCase, ForwardMultipliesTheE4M3ImagesAndAddsTheBiasUnquantised) {
  std::vector<float> out(N * OC);
  ops::matmul_forward(view(out, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), view(bias, {OC}), Tensor{}, kFp8);
  std::vector<double> expected = product_nt(N, C, OC, q_inp, q_weight);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < OC; ++o) expected[n * OC + o] += bias[o];
  expect_matches(out, expected, "fp8 forward");

  // Quantisation is really there: the native product differs by far more
  // than f32 rounding, and by no more than E4M3's 3 mantissa bits allow.
  std::vector<float> native(N * OC);
  ops::matmul_forward(view(native, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), view(bias, {OC}));
  double diff2 = 0, ref2 = 0;
  for (std::int64_t i = 0; i < N * OC; ++i) {
    diff2 += (out[i] - native[i]) * (out[i] - native[i]);
    ref2 += native[i] * native[i];
  }
  const double relative = std::sqrt(diff2 / ref2);
  EXPECT_GT(relative, 1e-3) << "the fp8 format changed nothing";
  EXPECT_LT(relative, 0.0625) << "more error than E4M3's 2^-4 relative rounding explains";
}

TEST_F(Fp8MatmulCase, ForwardWithGeluKeepsThePreActivation) {
  std::vector<float> out(N * OC), pre(N * OC);
  ops::matmul_forward(view(out, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), view(bias, {OC}),
                      view(pre, {N, OC}), kFp8);
  std::vector<double> expected_pre = product_nt(N, C, OC, q_inp, q_weight), expected_out(N * OC);
  for (std::int64_t i = 0; i < N * OC; ++i) {
    expected_pre[i] += bias[i % OC];
    expected_out[i] = ref_gelu(expected_pre[i]);
  }
  expect_matches(pre, expected_pre, "fp8 forward pre_gelu");
  expect_matches(out, expected_out, "fp8 forward gelu(pre)");
}

TEST_F(Fp8MatmulCase, ForwardAddLeavesTheResidualUnquantised) {
  const std::vector<float> residual = spread_values(N * OC, 15, 2.0);
  std::vector<float> out(N * OC), res = residual;
  ops::matmul_forward_add(view(out, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), view(bias, {OC}),
                          view(res, {N, OC}), kFp8);
  std::vector<double> expected = product_nt(N, C, OC, q_inp, q_weight);
  for (std::int64_t i = 0; i < N * OC; ++i) expected[i] += bias[i % OC] + residual[i];
  expect_matches(out, expected, "fp8 forward_add");
}

TEST_F(Fp8MatmulCase, BackwardQuantisesEachOperandOnceAndSumsTheBiasGradientExactly) {
  std::vector<float> dinp(N * C), dweight(OC * C, 0.25f), dbias(OC, -0.5f);
  ops::matmul_backward(view(dinp, {N, C}), view(dweight, {OC, C}), view(dbias, {OC}), view(dout, {N, OC}),
                       view(inp, {N, C}), view(weight, {OC, C}), Tensor{}, kFp8);
  // dinp = Q(dout) @ Q(W): (N,OC) x (OC,C), i.e. product_nt with W^T.
  expect_matches(dinp, product_nt(N, OC, C, q_dout, transpose(q_weight, OC, C)), "fp8 dinp");
  // dweight += Q(dout)^T @ Q(inp).
  std::vector<double> expected_dw = product_nt(OC, N, C, transpose(q_dout, N, OC), transpose(q_inp, N, C));
  for (double& v : expected_dw) v += 0.25;
  expect_matches(dweight, expected_dw, "fp8 dweight (accumulated)");
  // dbias += sum_n dout, the output gradient as it is.
  std::vector<double> expected_db(OC, -0.5);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < OC; ++o) expected_db[o] += dout[n * OC + o];
  expect_matches(dbias, expected_db, "fp8 dbias");
}

TEST_F(Fp8MatmulCase, BackwardFusesTheGeluGradientAfterTheQuantisedProduct) {
  const std::vector<float> gelu_pre = spread_values(N * C, 16, 2.0);
  std::vector<float> dinp(N * C), pre = gelu_pre;
  ops::matmul_backward(view(dinp, {N, C}), Tensor{}, Tensor{}, view(dout, {N, OC}), view(inp, {N, C}),
                       view(weight, {OC, C}), view(pre, {N, C}), kFp8);
  std::vector<double> expected = product_nt(N, OC, C, q_dout, transpose(q_weight, OC, C));
  for (std::int64_t i = 0; i < N * C; ++i) expected[i] *= ref_gelu_grad(gelu_pre[i]);
  expect_matches(dinp, expected, "fp8 dinp * gelu'(pre)");
}

// A zero-bubble pipeline splits the backward: the input-gradient pass now,
// the weight-gradient pass later. Together they must give the fused
// backward's numbers bit for bit (the same quantisation of the same tensors).
TEST_F(Fp8MatmulCase, SplitBackwardEqualsTheFusedOneBitForBit) {
  std::vector<float> dinp_fused(N * C), dw_fused(OC * C, 0.f), db_fused(OC, 0.f);
  ops::matmul_backward(view(dinp_fused, {N, C}), view(dw_fused, {OC, C}), view(db_fused, {OC}), view(dout, {N, OC}),
                       view(inp, {N, C}), view(weight, {OC, C}), Tensor{}, kFp8);
  std::vector<float> dinp_split(N * C), dw_split(OC * C, 0.f), db_split(OC, 0.f);
  ops::matmul_backward(view(dinp_split, {N, C}), Tensor{}, Tensor{}, view(dout, {N, OC}), view(inp, {N, C}),
                       view(weight, {OC, C}), Tensor{}, kFp8);
  ops::matmul_weight_grad(view(dw_split, {OC, C}), view(db_split, {OC}), view(dout, {N, OC}), view(inp, {N, C}), kFp8);
  EXPECT_EQ(dinp_split, dinp_fused);
  EXPECT_EQ(dw_split, dw_fused);
  EXPECT_EQ(db_split, db_fused);
}

// ---- amax slots (ops::Fp8Options::inp_amax, dout_amax, out_amax, dinp_amax) -----

float max_abs(const std::vector<float>& x) { return cpu::e4m3_amax(x.data(), static_cast<std::int64_t>(x.size())); }

// A slot filled by the op holds the operand's amax; a ready slot is what the
// op scales by: the true amax gives the very numbers the op finds by itself,
// a wrong one other numbers (so the slot is really read, not recomputed).
TEST_F(Fp8MatmulCase, ForwardFillsTheInputSlotAndScalesByAReadyOne) {
  std::vector<float> own(N * OC);
  ops::matmul_forward(view(own, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), view(bias, {OC}), Tensor{}, kFp8);

  std::vector<float> slot{-1.f};
  ops::Fp8Options fill;
  fill.inp_amax = view(slot, {1});
  std::vector<float> filled(N * OC);
  ops::matmul_forward(view(filled, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), view(bias, {OC}), Tensor{},
                      kFp8, &fill);
  EXPECT_EQ(slot[0], max_abs(inp));
  EXPECT_EQ(filled, own);

  ops::Fp8Options ready = fill;
  ready.inp_amax_ready = true;
  std::vector<float> from_slot(N * OC);
  ops::matmul_forward(view(from_slot, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), view(bias, {OC}), Tensor{},
                      kFp8, &ready);
  EXPECT_EQ(from_slot, own);
  slot[0] *= 3.f;  // a coarser grid
  ops::matmul_forward(view(from_slot, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), view(bias, {OC}), Tensor{},
                      kFp8, &ready);
  EXPECT_NE(from_slot, own) << "a ready slot was not read";
}

TEST_F(Fp8MatmulCase, ForwardWritesTheOutputsAmaxForTheNextLayer) {
  std::vector<float> out(N * OC), pre(N * OC);
  std::vector<float> slot{-1.f};
  ops::Fp8Options options;
  options.out_amax = view(slot, {1});
  ops::matmul_forward(view(out, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), view(bias, {OC}),
                      view(pre, {N, OC}), kFp8, &options);
  EXPECT_EQ(slot[0], max_abs(out));  // of GELU's output, not its input
  EXPECT_NE(slot[0], max_abs(pre));
  std::vector<float> res = spread_values(N * OC, 15, 2.0);
  ops::matmul_forward_add(view(out, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), view(bias, {OC}),
                          view(res, {N, OC}), kFp8, &options);
  EXPECT_EQ(slot[0], max_abs(out));
}

TEST_F(Fp8MatmulCase, BackwardReadsReadySlotsAndWritesTheInputGradientsAmax) {
  std::vector<float> gelu_pre = spread_values(N * C, 16, 2.0);
  std::vector<float> dinp_own(N * C), dw_own(OC * C, 0.f);
  ops::matmul_backward(view(dinp_own, {N, C}), view(dw_own, {OC, C}), Tensor{}, view(dout, {N, OC}),
                       view(inp, {N, C}), view(weight, {OC, C}), view(gelu_pre, {N, C}), kFp8);

  std::vector<float> inp_slot{max_abs(inp)}, dout_slot{max_abs(dout)}, dinp_slot{-1.f};
  ops::Fp8Options options;
  options.inp_amax = view(inp_slot, {1});
  options.inp_amax_ready = true;
  options.dout_amax = view(dout_slot, {1});
  options.dinp_amax = view(dinp_slot, {1});
  std::vector<float> dinp(N * C), dw(OC * C, 0.f);
  ops::matmul_backward(view(dinp, {N, C}), view(dw, {OC, C}), Tensor{}, view(dout, {N, OC}), view(inp, {N, C}),
                       view(weight, {OC, C}), view(gelu_pre, {N, C}), kFp8, &options);
  EXPECT_EQ(dinp, dinp_own);
  EXPECT_EQ(dw, dw_own);
  EXPECT_EQ(dinp_slot[0], max_abs(dinp));  // after the GELU gradient

  // Each ready slot is read: a wrong one moves the products it scales.
  dout_slot[0] *= 3.f;
  std::fill(dw.begin(), dw.end(), 0.f);
  ops::matmul_backward(view(dinp, {N, C}), view(dw, {OC, C}), Tensor{}, view(dout, {N, OC}), view(inp, {N, C}),
                       view(weight, {OC, C}), view(gelu_pre, {N, C}), kFp8, &options);
  EXPECT_NE(dinp, dinp_own) << "dout's ready slot was not read";
  dout_slot[0] = max_abs(dout);
  inp_slot[0] *= 3.f;
  std::fill(dw.begin(), dw.end(), 0.f);
  ops::matmul_weight_grad(view(dw, {OC, C}), Tensor{}, view(dout, {N, OC}), view(inp, {N, C}), kFp8, &options);
  EXPECT_NE(dw, dw_own) << "the input's ready slot was not read by the weight gradient";
}

TEST(Fp8Matmul, RefusesMalformedSlotsAndNormsFillTheirs) {
  std::vector<float> inp(16 * 32, 0.5f), weight(8 * 32, 0.5f), out(16 * 8);
  std::vector<float> two(2);
  ops::Fp8Options options;
  options.inp_amax = view(two, {2});
  EXPECT_THROW(ops::matmul_forward(view(out, {16, 8}), view(inp, {16, 32}), view(weight, {8, 32}), Tensor{}, Tensor{},
                                   kFp8, &options),
               engine::Error);
  options.inp_amax = Tensor{};
  options.inp_amax_ready = true;  // ready, but no slot
  EXPECT_THROW(ops::matmul_forward(view(out, {16, 8}), view(inp, {16, 32}), view(weight, {8, 32}), Tensor{}, Tensor{},
                                   kFp8, &options),
               engine::Error);

  // The norms' out_amax: max |out| as written, whatever the normalisation.
  const std::int64_t R = 6, W = 40;
  std::vector<float> x = spread_values(R * W, 21, 4.0), gain = spread_values(W, 22, 1.5),
                     shift = spread_values(W, 23, 0.3);
  std::vector<float> y(R * W), mean(R), rstd(R);
  std::vector<float> slot{-1.f};
  ops::layernorm_forward(view(y, {R, W}), view(mean, {R}), view(rstd, {R}), view(x, {R, W}), view(gain, {W}),
                         view(shift, {W}), 1e-5, view(slot, {1}));
  EXPECT_EQ(slot[0], max_abs(y));
  ops::rmsnorm_forward(view(y, {R, W}), view(rstd, {R}), view(x, {R, W}), view(gain, {W}), 1e-6, view(slot, {1}));
  EXPECT_EQ(slot[0], max_abs(y));
}

// ---- block scaling (ops::Fp8Scaling::kBlock) -------------------------------------

// The block image of x (rows, cols), built here block by block from the
// per-tensor image of each block alone.
std::vector<double> block_image(const std::vector<float>& x, std::int64_t rows, std::int64_t cols,
                                std::int64_t br, std::int64_t bc) {
  std::vector<double> out(x.size());
  for (std::int64_t r0 = 0; r0 < rows; r0 += br)
    for (std::int64_t c0 = 0; c0 < cols; c0 += bc) {
      std::vector<float> block;
      for (std::int64_t r = r0; r < std::min(rows, r0 + br); ++r)
        for (std::int64_t c = c0; c < std::min(cols, c0 + bc); ++c) block.push_back(x[r * cols + c]);
      const std::vector<double> q = e4m3_image(block);
      std::size_t k = 0;
      for (std::int64_t r = r0; r < std::min(rows, r0 + br); ++r)
        for (std::int64_t c = c0; c < std::min(cols, c0 + bc); ++c) out[r * cols + c] = q[k++];
    }
  return out;
}

// Dimensions past one block, with partial edge blocks: 160 tokens (128 + 32),
// C 200 (128 + 72), OC 136 (128 + 8). Rows of very different magnitudes, so
// per-block scales differ from the tensor's.
struct Fp8BlockCase : ::testing::Test {
  static constexpr std::int64_t N = 160, C = 200, OC = 136;
  static std::vector<float> rows_of_magnitudes(std::int64_t rows, std::int64_t cols, std::uint64_t seed, double m) {
    std::vector<float> v = spread_values(rows * cols, seed, m);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) v[r * cols + c] *= static_cast<float>(std::exp2(r % 7 - 3));
    return v;
  }
  std::vector<float> inp = rows_of_magnitudes(N, C, 31, 3.0), weight = rows_of_magnitudes(OC, C, 32, 0.05),
                     bias = spread_values(OC, 33, 0.5), dout = rows_of_magnitudes(N, OC, 34, 1e-3);
  ops::Fp8Options block;
  Fp8BlockCase() { block.scaling = ops::Fp8Scaling::kBlock; }
};

TEST_F(Fp8BlockCase, ForwardTilesTheInputAlongCAndTheWeightIn128Blocks) {
  std::vector<float> out(N * OC);
  ops::matmul_forward(view(out, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), view(bias, {OC}), Tensor{}, kFp8,
                      &block);
  std::vector<double> expected = product_nt(N, C, OC, block_image(inp, N, C, 1, 128),
                                            block_image(weight, OC, C, 128, 128));
  for (std::int64_t i = 0; i < N * OC; ++i) expected[i] += bias[i % OC];
  expect_matches(out, expected, "block fp8 forward");
  // Not per-tensor scaling: the blocks' finer grids move the result.
  std::vector<float> tensor(N * OC);
  ops::matmul_forward(view(tensor, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), view(bias, {OC}), Tensor{},
                      kFp8);
  EXPECT_NE(out, tensor);
}

TEST_F(Fp8BlockCase, BackwardTilesEachOperandAlongItsOwnGemmsReduction) {
  std::vector<float> dinp(N * C), dweight(OC * C, 0.25f), dbias(OC, 0.f);
  ops::matmul_backward(view(dinp, {N, C}), view(dweight, {OC, C}), view(dbias, {OC}), view(dout, {N, OC}),
                       view(inp, {N, C}), view(weight, {OC, C}), Tensor{}, kFp8, &block);
  // dinp = Q(dout; 1 x 128 along OC) @ Q(W; 128 x 128).
  expect_matches(dinp, product_nt(N, OC, C, block_image(dout, N, OC, 1, 128),
                                  transpose(block_image(weight, OC, C, 128, 128), OC, C)),
                 "block fp8 dinp");
  // dweight += Q(dout; 128 x 1 along the tokens)^T @ Q(inp; 128 x 1 along the tokens).
  std::vector<double> expected_dw = product_nt(OC, N, C, transpose(block_image(dout, N, OC, 128, 1), N, OC),
                                               transpose(block_image(inp, N, C, 128, 1), N, C));
  for (double& v : expected_dw) v += 0.25;
  expect_matches(dweight, expected_dw, "block fp8 dweight");
  std::vector<double> expected_db(OC, 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < OC; ++o) expected_db[o] += dout[n * OC + o];
  expect_matches(dbias, expected_db, "block fp8 dbias (unquantised)");

  // The split backward of a zero-bubble schedule: the same numbers.
  std::vector<float> dinp_split(N * C), dw_split(OC * C, 0.25f), db_split(OC, 0.f);
  ops::matmul_backward(view(dinp_split, {N, C}), Tensor{}, Tensor{}, view(dout, {N, OC}), view(inp, {N, C}),
                       view(weight, {OC, C}), Tensor{}, kFp8, &block);
  ops::matmul_weight_grad(view(dw_split, {OC, C}), view(db_split, {OC}), view(dout, {N, OC}), view(inp, {N, C}), kFp8,
                          &block);
  EXPECT_EQ(dinp_split, dinp);
  EXPECT_EQ(dw_split, dweight);
  EXPECT_EQ(db_split, dbias);
}

TEST_F(Fp8BlockCase, ACachedBlockWeightGivesTheSameNumbers) {
  std::vector<float> storage(OC * C, 0.f), plain(N * OC), cached(N * OC);
  ops::Fp8WeightCache cache;
  cache.storage = view(storage, {OC * C});
  ops::Fp8Options with_cache = block;
  with_cache.weight_cache = &cache;
  ops::matmul_forward(view(plain, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), Tensor{}, Tensor{}, kFp8, &block);
  for (int use = 0; use < 2; ++use) {
    ops::matmul_forward(view(cached, {N, OC}), view(inp, {N, C}), view(weight, {OC, C}), Tensor{}, Tensor{}, kFp8,
                        &with_cache);
    EXPECT_EQ(cached, plain) << "use " << use;
  }
}

// Under tensor parallelism a rank quantises its own shard. Where every shard
// holds whole 128-blocks, its blocks are the whole tensor's, so a
// column-parallel rank's output is the whole product's columns and the
// row-parallel ranks' partial products sum to the whole product, up to the
// order of the f32 sums, not the size of an E4M3 step.
TEST(Fp8Scaling, BlocksOfAlignedShardsAreTheWholeTensors) {
  const std::int64_t N = 32, C = 256, OC = 256, half = 128;
  std::vector<float> x = spread_values(N * C, 41, 2.0), w = spread_values(OC * C, 42, 0.05);
  ops::Fp8Options block;
  block.scaling = ops::Fp8Scaling::kBlock;
  std::vector<float> whole(N * OC);
  ops::matmul_forward(view(whole, {N, OC}), view(x, {N, C}), view(w, {OC, C}), Tensor{}, Tensor{}, kFp8, &block);
  double max_whole = 0;
  for (float v : whole) max_whole = std::max(max_whole, std::fabs(static_cast<double>(v)));
  const double tolerance = 1e-6 * max_whole;  // f32 order; one E4M3 step moves a product by ~1e-3 of it

  // Column-parallel: rank r holds weight rows [r half, (r + 1) half).
  for (std::int64_t r = 0; r < 2; ++r) {
    std::vector<float> w_r(w.begin() + r * half * C, w.begin() + (r + 1) * half * C), out_r(N * half);
    ops::matmul_forward(view(out_r, {N, half}), view(x, {N, C}), view(w_r, {half, C}), Tensor{}, Tensor{}, kFp8,
                        &block);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t o = 0; o < half; ++o)
        ASSERT_NEAR(out_r[n * half + o], whole[n * OC + r * half + o], tolerance) << "column shard " << r;
  }
  // Row-parallel: rank r holds weight columns and input columns [r half, (r + 1) half).
  std::vector<double> sum(N * OC, 0.0);
  for (std::int64_t r = 0; r < 2; ++r) {
    std::vector<float> w_r(OC * half), x_r(N * half), partial(N * OC);
    for (std::int64_t o = 0; o < OC; ++o)
      for (std::int64_t c = 0; c < half; ++c) w_r[o * half + c] = w[o * C + r * half + c];
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t c = 0; c < half; ++c) x_r[n * half + c] = x[n * C + r * half + c];
    ops::matmul_forward(view(partial, {N, OC}), view(x_r, {N, half}), view(w_r, {OC, half}), Tensor{}, Tensor{},
                        kFp8, &block);
    for (std::int64_t i = 0; i < N * OC; ++i) sum[i] += partial[i];
  }
  for (std::int64_t i = 0; i < N * OC; ++i) ASSERT_NEAR(sum[i], whole[i], tolerance) << "row shards, element " << i;
}

TEST(Fp8Scaling, ParsesAndNamesItsValues) {
  for (ops::Fp8Scaling s : {ops::Fp8Scaling::kTensor, ops::Fp8Scaling::kBlock})
    EXPECT_EQ(ops::parse_fp8_scaling(ops::fp8_scaling_name(s)), s);
  try {
    ops::parse_fp8_scaling("row");
    FAIL() << "row was accepted";
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--fp8-scaling row"), std::string::npos) << e.what();
  }
}

// A tensor of zeros has amax 0: its scale is 1 and the product is exactly 0.
TEST(Fp8Matmul, ZeroOperandGivesAnExactZero) {
  std::vector<float> inp(16 * 32, 0.f), weight(8 * 32, 0.5f), out(16 * 8, 7.f);
  ops::matmul_forward(view(out, {16, 8}), view(inp, {16, 32}), view(weight, {8, 32}), Tensor{}, Tensor{}, kFp8);
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(Fp8Matmul, RefusesDoublePrecisionNaming) {
  std::vector<double> inp(4 * 8, 1.0), weight(2 * 8, 1.0), out(4 * 2);
  try {
    ops::matmul_forward(view(out, {4, 2}), view(inp, {4, 8}), view(weight, {2, 8}), Tensor{}, Tensor{}, kFp8);
    FAIL() << "an f64 operand was accepted";
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("quantises f32 tensors"), std::string::npos) << e.what();
  }
}

}  // namespace
