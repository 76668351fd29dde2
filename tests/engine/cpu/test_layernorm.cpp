// layernorm_forward / layernorm_backward: reference loops and finite differences.
#include <algorithm>
#include <cmath>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

constexpr double kEps = 1e-5;  // GPT-2's

struct LnReference {
  std::vector<double> out, mean, rstd;
};

LnReference reference_forward(std::int64_t N, std::int64_t C, const std::vector<double>& x,
                              const std::vector<double>& w, const std::vector<double>& b, double eps = kEps) {
  LnReference r{std::vector<double>(N * C), std::vector<double>(N), std::vector<double>(N)};
  for (std::int64_t n = 0; n < N; ++n) {
    double mean = 0, var = 0;
    for (std::int64_t c = 0; c < C; ++c) mean += x[n * C + c] / C;
    for (std::int64_t c = 0; c < C; ++c) var += (x[n * C + c] - mean) * (x[n * C + c] - mean) / C;
    const double rstd = 1 / std::sqrt(var + eps);
    for (std::int64_t c = 0; c < C; ++c) r.out[n * C + c] = (x[n * C + c] - mean) * rstd * w[c] + b[c];
    r.mean[n] = mean;
    r.rstd[n] = rstd;
  }
  return r;
}

struct LnShape {
  std::int64_t B, T, C;
};
// Small shapes, plus one above the parallel threshold (N*C >= 16384).
const LnShape kShapes[] = {{1, 1, 5}, {2, 3, 13}, {4, 16, 384}};

template <typename T>
class CpuLayerNorm : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuLayerNorm, FloatTypes);

TYPED_TEST(CpuLayerNorm, ForwardAndBackwardMatchReference) {
  using T = TypeParam;
  const Tolerance tol = reference_tolerance<T>();
  for (const LnShape& s : kShapes) {
    const std::int64_t N = s.B * s.T, C = s.C;
    SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C);
    // An offset mean checks the variance is not computed as E[x^2] - E[x]^2.
    std::vector<T> x = cast_to<T>(random_values(N * C, 31, 3, 5)), w = cast_to<T>(random_values(C, 32)),
                   b = cast_to<T>(random_values(C, 33)), out(N * C), mean(N), rstd(N);
    ops::layernorm_forward(view(out, {s.B, s.T, C}), view(mean, {s.B, s.T}), view(rstd, {s.B, s.T}),
                           view(x, {s.B, s.T, C}), view(w, {C}), view(b, {C}), kEps);
    const LnReference ref = reference_forward(N, C, to_double(x), to_double(w), to_double(b));
    expect_all_close(out, ref.out, tol.rtol, tol.atol, "out");
    expect_all_close(mean, ref.mean, tol.rtol, tol.atol, "mean");
    // rstd ~ 1.7 here; its f32 rounding is relative.
    expect_all_close(rstd, ref.rstd, tol.rtol, tol.atol, "rstd");

    // Backward vs the analytic formula evaluated in double (llm.c's).
    const auto dout_d = random_values(N * C, 34), dinp0 = random_values(N * C, 35);
    const auto dw0 = random_values(C, 36), db0 = random_values(C, 37);
    std::vector<T> dout = cast_to<T>(dout_d), dinp = cast_to<T>(dinp0), dw = cast_to<T>(dw0), db = cast_to<T>(db0);
    ops::layernorm_backward(view(dinp, {N, C}), view(dw, {C}), view(db, {C}), view(dout, {N, C}), view(x, {N, C}),
                            view(w, {C}), view(mean, {N}), view(rstd, {N}));
    std::vector<double> dinp_exp = to_double(cast_to<T>(dinp0)), dw_exp = to_double(cast_to<T>(dw0)),
                        db_exp = to_double(cast_to<T>(db0));
    for (std::int64_t n = 0; n < N; ++n) {
      double g_mean = 0, gn_mean = 0;
      for (std::int64_t c = 0; c < C; ++c) {
        const double norm = (double(x[n * C + c]) - ref.mean[n]) * ref.rstd[n];
        const double g = double(w[c]) * double(dout[n * C + c]);
        g_mean += g / C;
        gn_mean += g * norm / C;
        dw_exp[c] += double(dout[n * C + c]) * norm;
        db_exp[c] += double(dout[n * C + c]);
      }
      for (std::int64_t c = 0; c < C; ++c) {
        const double norm = (double(x[n * C + c]) - ref.mean[n]) * ref.rstd[n];
        dinp_exp[n * C + c] += ref.rstd[n] * (double(w[c]) * double(dout[n * C + c]) - g_mean - norm * gn_mean);
      }
    }
    expect_all_close(dinp, dinp_exp, tol.rtol, tol.atol, "dinp");
    // dweight/dbias sum N terms: the f32 error grows like sqrt(N) * eps.
    expect_all_close(dw, dw_exp, tol.rtol, tol.atol * std::sqrt(double(N)), "dweight");
    expect_all_close(db, db_exp, tol.rtol, tol.atol * std::sqrt(double(N)), "dbias");
  }
}

// eps is the caller's (a config.json's layer_norm_epsilon): on rows whose
// variance is near eps, 1e-5 and 1e-3 give visibly different outputs, and
// each must match the reference computed with the same eps.
TEST(CpuLayerNorm, EpsIsTheCallers) {
  const std::int64_t N = 3, C = 8;
  std::vector<double> x = random_values(N * C, 41), w = random_values(C, 42), b = random_values(C, 43);
  for (double& v : x) v *= 1e-2;  // variance ~3e-5: eps is a third of it or more
  std::vector<double> out_small(N * C), out_large(N * C), mean(N), rstd(N);
  for (const double eps : {1e-5, 1e-3}) {
    std::vector<double>& out = eps == 1e-5 ? out_small : out_large;
    ops::layernorm_forward(view(out, {N, C}), view(mean, {N}), view(rstd, {N}), view(x, {N, C}), view(w, {C}),
                           view(b, {C}), eps);
    const LnReference ref = reference_forward(N, C, x, w, b, eps);
    expect_all_close(out, ref.out, 1e-12, 1e-12, "out");
    expect_all_close(rstd, ref.rstd, 1e-12, 0, "rstd");
  }
  double largest = 0;
  for (std::int64_t i = 0; i < N * C; ++i) largest = std::max(largest, std::abs(out_small[i] - out_large[i]));
  EXPECT_GT(largest, 0.1) << "eps 1e-5 and 1e-3 should normalise these rows differently";
  std::vector<double> out(N * C);
  EXPECT_THROW(ops::layernorm_forward(view(out, {N, C}), view(mean, {N}), view(rstd, {N}), view(x, {N, C}),
                                      view(w, {C}), view(b, {C}), 0.0),
               Error);
}

TEST(CpuLayerNorm, BackwardMatchesFiniteDifferencesAndAccumulatesDinp) {
  const std::int64_t N = 6, C = 13;
  auto x = random_values(N * C, 41), w = random_values(C, 42, 0.5, 1.5), b = random_values(C, 43);
  const auto R = random_values(N * C, 44);
  std::vector<double> out(N * C), mean(N), rstd(N);
  auto forward = [&] {
    ops::layernorm_forward(view(out, {N, C}), view(mean, {N}), view(rstd, {N}), view(x, {N, C}), view(w, {C}),
                           view(b, {C}), kEps);
  };
  auto loss = [&] {  // L = sum(out * R)
    forward();
    return dot(out, R);
  };
  forward();
  const auto dinp0 = random_values(N * C, 45), dw0 = random_values(C, 46), db0 = random_values(C, 47);
  std::vector<double> dinp = dinp0, dw = dw0, db = db0, dout = R;
  ops::layernorm_backward(view(dinp, {N, C}), view(dw, {C}), view(db, {C}), view(dout, {N, C}), view(x, {N, C}),
                          view(w, {C}), view(mean, {N}), view(rstd, {N}));
  // All three accumulate: subtract what was there before.
  for (std::size_t i = 0; i < dinp.size(); ++i) dinp[i] -= dinp0[i];
  for (std::int64_t c = 0; c < C; ++c) {
    dw[c] -= dw0[c];
    db[c] -= db0[c];
  }
  expect_gradient_matches(dinp, numeric_gradient(x, loss), "dinp");
  expect_gradient_matches(dw, numeric_gradient(w, loss), "dweight");
  expect_gradient_matches(db, numeric_gradient(b, loss), "dbias");
}

}  // namespace
