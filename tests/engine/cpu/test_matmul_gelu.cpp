// matmul_forward / matmul_backward (with and without bias, with the fused
// GELU epilogue and fused GELU dgrad) and standalone gelu_forward/_backward.
#include <cmath>
#include <string>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

// GELU exactly as GPT-2 writes it (tanh form), in double.
double ref_gelu(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}
double ref_gelu_grad(double x) {  // llm.c's gelu_backward, in double
  const double s = std::sqrt(2.0 / M_PI);
  const double u = s * (x + 0.044715 * x * x * x);
  const double sech = 1.0 / std::cosh(u);
  return 0.5 * (1.0 + std::tanh(u)) + x * 0.5 * sech * sech * s * (1.0 + 3.0 * 0.044715 * x * x);
}

// out = inp @ W^T + b (b may be empty).   inp (N,C), W (OC,C)
std::vector<double> ref_linear(std::int64_t N, std::int64_t C, std::int64_t OC, const std::vector<double>& inp,
                               const std::vector<double>& W, const std::vector<double>& b) {
  std::vector<double> out(N * OC);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < OC; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (std::int64_t c = 0; c < C; ++c) s += inp[n * C + c] * W[o * C + c];
      out[n * OC + o] = s;
    }
  return out;
}

struct MatmulShape {
  std::int64_t B, T, C, OC;
};
const MatmulShape kShapes[] = {{1, 1, 1, 1}, {2, 3, 5, 7}, {4, 16, 96, 80}};

template <typename T>
class CpuMatmul : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuMatmul, FloatTypes);

TYPED_TEST(CpuMatmul, ForwardMatchesReference) {
  using T = TypeParam;
  const Tolerance tol = reference_tolerance<T>();
  for (const MatmulShape& s : kShapes)
    for (bool with_bias : {false, true})
      for (bool with_gelu : {false, true}) {
        const std::int64_t N = s.B * s.T;
        SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << s.C << " OC=" << s.OC << " bias=" << with_bias
                                        << " gelu=" << with_gelu);
        std::vector<T> inp = cast_to<T>(random_values(N * s.C, 51)), W = cast_to<T>(random_values(s.OC * s.C, 52)),
                       b = cast_to<T>(random_values(s.OC, 53)), out(N * s.OC), pre(N * s.OC);
        ops::matmul_forward(view(out, {s.B, s.T, s.OC}), view(inp, {s.B, s.T, s.C}), view(W, {s.OC, s.C}),
                            with_bias ? view(b, {s.OC}) : Tensor{},
                            with_gelu ? view(pre, {s.B, s.T, s.OC}) : Tensor{});
        std::vector<double> expected =
            ref_linear(N, s.C, s.OC, to_double(inp), to_double(W), with_bias ? to_double(b) : std::vector<double>{});
        // The dot products have C terms of size <= 1: scale the absolute tolerance.
        const double atol = tol.atol * std::sqrt(double(s.C));
        if (with_gelu) {
          expect_all_close(pre, expected, tol.rtol, atol, "pre_gelu");
          for (double& v : expected) v = ref_gelu(v);
        }
        expect_all_close(out, expected, tol.rtol, atol, "out");
      }
}

// The residual add folded into the projection: out = residual + inp W^T + b,
// exactly what matmul_forward followed by add gives (the same roundings).
TYPED_TEST(CpuMatmul, ForwardAddMatchesReferenceAndTheUnfusedPair) {
  using T = TypeParam;
  const Tolerance tol = reference_tolerance<T>();
  for (const MatmulShape& s : kShapes)
    for (bool with_bias : {false, true}) {
      const std::int64_t N = s.B * s.T;
      SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << s.C << " OC=" << s.OC << " bias=" << with_bias);
      std::vector<T> inp = cast_to<T>(random_values(N * s.C, 61)), W = cast_to<T>(random_values(s.OC * s.C, 62)),
                     b = cast_to<T>(random_values(s.OC, 63)), r = cast_to<T>(random_values(N * s.OC, 64)),
                     out(N * s.OC), branch(N * s.OC), unfused(N * s.OC);
      const Tensor bias = with_bias ? view(b, {s.OC}) : Tensor{};
      ops::matmul_forward_add(view(out, {N, s.OC}), view(inp, {N, s.C}), view(W, {s.OC, s.C}), bias,
                              view(r, {N, s.OC}));
      std::vector<double> expected =
          ref_linear(N, s.C, s.OC, to_double(inp), to_double(W), with_bias ? to_double(b) : std::vector<double>{});
      for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += static_cast<double>(r[i]);
      expect_all_close(out, expected, tol.rtol, tol.atol * std::sqrt(double(s.C)), "out");

      ops::matmul_forward(view(branch, {N, s.OC}), view(inp, {N, s.C}), view(W, {s.OC, s.C}), bias);
      ops::add(view(unfused, {N, s.OC}), view(r, {N, s.OC}), view(branch, {N, s.OC}));
      EXPECT_EQ(out, unfused) << "the fused op must round exactly as matmul_forward + add";
    }
}

TEST(CpuMatmulForwardAdd, RefusesAnOutputOverlappingTheResidual) {
  std::vector<float> inp(4 * 8, 0.5f), W(8 * 8, 0.25f), storage(5 * 8, 1.0f);
  const Tensor residual(storage.data(), Shape{4, 8}, DType::kF32, DeviceType::kCpu);
  const Tensor out(storage.data() + 8, Shape{4, 8}, DType::kF32, DeviceType::kCpu);  // one row into residual
  try {
    ops::matmul_forward_add(out, view(inp, {4, 8}), view(W, {8, 8}), Tensor{}, residual);
    FAIL() << "an overlapping out was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overlaps residual"), std::string::npos) << e.what();
  }
}

TYPED_TEST(CpuMatmul, BackwardMatchesReference) {
  using T = TypeParam;
  const Tolerance tol = reference_tolerance<T>();
  for (const MatmulShape& s : kShapes)
    for (bool with_gelu_pre : {false, true}) {
      const std::int64_t N = s.B * s.T, C = s.C, OC = s.OC;
      SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C << " OC=" << OC << " gelu_pre=" << with_gelu_pre);
      std::vector<T> inp = cast_to<T>(random_values(N * C, 61)), W = cast_to<T>(random_values(OC * C, 62)),
                     dout = cast_to<T>(random_values(N * OC, 63)), pre = cast_to<T>(random_values(N * C, 64, -3, 3));
      const auto dW0 = random_values(OC * C, 65), db0 = random_values(OC, 66);
      std::vector<T> dinp(N * C, T(7)), dW = cast_to<T>(dW0), db = cast_to<T>(db0);  // dinp: overwritten
      ops::matmul_backward(view(dinp, {N, C}), view(dW, {OC, C}), view(db, {OC}), view(dout, {N, OC}),
                           view(inp, {N, C}), view(W, {OC, C}), with_gelu_pre ? view(pre, {N, C}) : Tensor{});

      std::vector<double> dinp_exp(N * C, 0.0), dW_exp = to_double(cast_to<T>(dW0)),
                          db_exp = to_double(cast_to<T>(db0));
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t o = 0; o < OC; ++o) {
          const double g = double(dout[n * OC + o]);
          db_exp[o] += g;
          for (std::int64_t c = 0; c < C; ++c) {
            dinp_exp[n * C + c] += g * double(W[o * C + c]);
            dW_exp[o * C + c] += g * double(inp[n * C + c]);
          }
        }
      if (with_gelu_pre)
        for (std::int64_t i = 0; i < N * C; ++i) dinp_exp[i] *= ref_gelu_grad(double(pre[i]));
      expect_all_close(dinp, dinp_exp, tol.rtol, tol.atol * std::sqrt(double(OC)), "dinp");
      expect_all_close(dW, dW_exp, tol.rtol, tol.atol * std::sqrt(double(N)), "dweight");
      expect_all_close(db, db_exp, tol.rtol, tol.atol * std::sqrt(double(N)), "dbias");
    }
}

TYPED_TEST(CpuMatmul, BackwardSkipsEmptyOutputs) {
  using T = TypeParam;
  const std::int64_t N = 3, C = 4, OC = 2;
  std::vector<T> inp = cast_to<T>(random_values(N * C, 67)), W = cast_to<T>(random_values(OC * C, 68)),
                 dout = cast_to<T>(random_values(N * OC, 69)), dW(OC * C, T(0)), db(OC, T(0)), dinp(N * C, T(0));
  ops::matmul_backward(Tensor{}, view(dW, {OC, C}), Tensor{}, view(dout, {N, OC}), view(inp, {N, C}),
                       view(W, {OC, C}));
  ops::matmul_backward(Tensor{}, Tensor{}, view(db, {OC}), view(dout, {N, OC}), view(inp, {N, C}), view(W, {OC, C}));
  ops::matmul_backward(view(dinp, {N, C}), Tensor{}, Tensor{}, view(dout, {N, OC}), view(inp, {N, C}),
                       view(W, {OC, C}));
  double expect_db0 = 0;
  for (std::int64_t n = 0; n < N; ++n) expect_db0 += double(dout[n * OC]);
  EXPECT_NEAR(db[0], expect_db0, 1e-5);
  EXPECT_NE(dW[0], T(0));
  EXPECT_NE(dinp[0], T(0));
}

TYPED_TEST(CpuMatmul, WeightGradEqualsTheWeightHalfOfTheBackward) {
  // matmul_weight_grad (the W pass of a zero-bubble pipeline) is the very
  // GEMM and column sum matmul_backward runs for dweight and dbias: equal to
  // the last bit, and it reads no weight.
  using T = TypeParam;
  for (const MatmulShape& s : kShapes) {
    const std::int64_t N = s.B * s.T, C = s.C, OC = s.OC;
    SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C << " OC=" << OC);
    std::vector<T> inp = cast_to<T>(random_values(N * C, 71)), W = cast_to<T>(random_values(OC * C, 72)),
                   dout = cast_to<T>(random_values(N * OC, 73));
    std::vector<T> dW = cast_to<T>(random_values(OC * C, 74)), db = cast_to<T>(random_values(OC, 75));
    std::vector<T> dW_split = dW, db_split = db, dinp(N * C);
    ops::matmul_backward(view(dinp, {N, C}), view(dW, {OC, C}), view(db, {OC}), view(dout, {N, OC}),
                         view(inp, {N, C}), view(W, {OC, C}));
    ops::matmul_weight_grad(view(dW_split, {OC, C}), view(db_split, {OC}), view(dout, {N, OC}), view(inp, {N, C}));
    EXPECT_EQ(dW_split, dW);
    EXPECT_EQ(db_split, db);
  }
  std::vector<T> inp(6), dout(4), dW(6);
  EXPECT_THROW(ops::matmul_weight_grad(view(dW, {2, 3}), Tensor{}, view(dout, {2, 2}), view(inp, {3, 2})),
               engine::Error);  // inp rows of 2, the weight's of 3
}

// Two fused layers, the way the MLP uses them:
//   h = gelu(inp @ W1^T + b1)   (matmul_forward with pre_gelu)
//   y = h @ W2^T + b2,  L = sum(y * R)
// Backward: matmul_backward of layer 2 with gelu_pre = pre gives dL/dpre
// directly; layer 1's backward then gives dinp, dW1, db1.
TEST(CpuMatmul, FusedGeluLayersMatchFiniteDifferences) {
  const std::int64_t N = 4, C = 3, H = 5, OC = 2;
  auto inp = random_values(N * C, 71), W1 = random_values(H * C, 72), b1 = random_values(H, 73);
  auto W2 = random_values(OC * H, 74), b2 = random_values(OC, 75);
  const auto R = random_values(N * OC, 76);
  std::vector<double> pre(N * H), h(N * H), y(N * OC);
  auto forward = [&] {
    ops::matmul_forward(view(h, {N, H}), view(inp, {N, C}), view(W1, {H, C}), view(b1, {H}), view(pre, {N, H}));
    ops::matmul_forward(view(y, {N, OC}), view(h, {N, H}), view(W2, {OC, H}), view(b2, {OC}));
  };
  auto loss = [&] {
    forward();
    return dot(y, R);
  };
  forward();
  std::vector<double> dy = R, dpre(N * H), dinp(N * C);
  std::vector<double> dW1(H * C, 0.0), db1(H, 0.0), dW2(OC * H, 0.0), db2(OC, 0.0);
  ops::matmul_backward(view(dpre, {N, H}), view(dW2, {OC, H}), view(db2, {OC}), view(dy, {N, OC}), view(h, {N, H}),
                       view(W2, {OC, H}), view(pre, {N, H}));
  ops::matmul_backward(view(dinp, {N, C}), view(dW1, {H, C}), view(db1, {H}), view(dpre, {N, H}),
                       view(inp, {N, C}), view(W1, {H, C}));
  expect_gradient_matches(dinp, numeric_gradient(inp, loss), "dinp");
  expect_gradient_matches(dW1, numeric_gradient(W1, loss), "dW1");
  expect_gradient_matches(db1, numeric_gradient(b1, loss), "db1");
  expect_gradient_matches(dW2, numeric_gradient(W2, loss), "dW2");
  expect_gradient_matches(db2, numeric_gradient(b2, loss), "db2");
}

TYPED_TEST(CpuMatmul, GeluMatchesTanhFormula) {
  using T = TypeParam;
  // f32: fast_exp is within ~1e-7 relative, plus a few roundings; the tanh
  // and sigmoid forms agree to ~1e-15 in f64.
  const double rtol = std::is_same_v<T, float> ? 1e-5 : 1e-13, atol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  const std::int64_t n = 20000;  // includes the saturated tails
  std::vector<T> x = cast_to<T>(random_values(n, 81, -12, 12)), out(n), dx(n);
  x[0] = T(0);
  std::vector<T> dout = cast_to<T>(random_values(n, 82));
  ops::gelu_forward(view(out, {n}), view(x, {n}));
  ops::gelu_backward(view(dx, {n}), view(x, {n}), view(dout, {n}));
  std::vector<double> out_exp(n), dx_exp(n);
  for (std::int64_t i = 0; i < n; ++i) {
    out_exp[i] = ref_gelu(double(x[i]));
    dx_exp[i] = double(dout[i]) * ref_gelu_grad(double(x[i]));
  }
  expect_all_close(out, out_exp, rtol, atol, "gelu");
  expect_all_close(dx, dx_exp, rtol, atol, "gelu_backward");
}

TEST(CpuMatmul, GeluBackwardMatchesFiniteDifferences) {
  const std::int64_t n = 64;
  auto x = random_values(n, 83, -4, 4);
  const auto R = random_values(n, 84);
  std::vector<double> out(n), dx(n), dout = R;
  auto loss = [&] {
    ops::gelu_forward(view(out, {n}), view(x, {n}));
    return dot(out, R);
  };
  ops::gelu_backward(view(dx, {n}), view(x, {n}), view(dout, {n}));
  expect_gradient_matches(dx, numeric_gradient(x, loss), "gelu dinp");
}

}  // namespace
