// rmsnorm_forward / rmsnorm_backward: a naive double reference (Hugging Face's
// LlamaRMSNorm written out) and central finite differences.
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

struct RmsReference {
  std::vector<double> out, rstd;
};

// out = x / sqrt(mean_c(x^2) + eps) * w.
RmsReference reference_forward(std::int64_t N, std::int64_t C, const std::vector<double>& x,
                               const std::vector<double>& w, double eps) {
  RmsReference r{std::vector<double>(N * C), std::vector<double>(N)};
  for (std::int64_t n = 0; n < N; ++n) {
    double ms = 0;
    for (std::int64_t c = 0; c < C; ++c) ms += x[n * C + c] * x[n * C + c] / C;
    r.rstd[n] = 1 / std::sqrt(ms + eps);
    for (std::int64_t c = 0; c < C; ++c) r.out[n * C + c] = x[n * C + c] * r.rstd[n] * w[c];
  }
  return r;
}

struct RmsShape {
  std::int64_t B, T, C;
};
// Small shapes, one with C < 64 and not a multiple of the dweight channel
// block (64), and one above the parallel threshold (N*C >= 16384).
const RmsShape kShapes[] = {{1, 1, 5}, {2, 3, 13}, {3, 5, 100}, {4, 16, 384}};

template <typename T>
class CpuRmsNorm : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuRmsNorm, FloatTypes);

TYPED_TEST(CpuRmsNorm, ForwardAndBackwardMatchReference) {
  using T = TypeParam;
  const Tolerance tol = reference_tolerance<T>();
  for (const double eps : {1e-6, 1e-5}) {  // Llama 2/3's and Qwen2's, and Llama 1's
    for (const RmsShape& s : kShapes) {
      const std::int64_t N = s.B * s.T, C = s.C;
      SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C << " eps=" << eps);
      // A non-zero mean: RMSNorm must not subtract it.
      std::vector<T> x = cast_to<T>(random_values(N * C, 51, -1, 3)), w = cast_to<T>(random_values(C, 52, 0.5, 1.5)),
                     out(N * C, std::numeric_limits<T>::quiet_NaN()), rstd(N, std::numeric_limits<T>::quiet_NaN());
      ops::rmsnorm_forward(view(out, {s.B, s.T, C}), view(rstd, {s.B, s.T}), view(x, {s.B, s.T, C}), view(w, {C}),
                           eps);
      const RmsReference ref = reference_forward(N, C, to_double(x), to_double(w), eps);
      expect_all_close(out, ref.out, tol.rtol, tol.atol, "out");
      expect_all_close(rstd, ref.rstd, tol.rtol, tol.atol, "rstd");

      // Backward against the analytic gradient evaluated in double:
      //   dinp += rstd (w g - norm mean_c(w g norm)),  dweight += sum_n g norm,
      // norm = x rstd. Both accumulate into random starting values.
      const auto dout_d = random_values(N * C, 53), dinp0 = random_values(N * C, 54), dw0 = random_values(C, 55);
      std::vector<T> dout = cast_to<T>(dout_d), dinp = cast_to<T>(dinp0), dw = cast_to<T>(dw0);
      ops::rmsnorm_backward(view(dinp, {N, C}), view(dw, {C}), view(dout, {N, C}), view(x, {N, C}), view(w, {C}),
                            view(rstd, {N}));
      std::vector<double> dinp_exp = to_double(cast_to<T>(dinp0)), dw_exp = to_double(cast_to<T>(dw0));
      for (std::int64_t n = 0; n < N; ++n) {
        double wgn_mean = 0;
        for (std::int64_t c = 0; c < C; ++c) {
          const double norm = double(x[n * C + c]) * ref.rstd[n], g = double(dout[n * C + c]);
          wgn_mean += double(w[c]) * g * norm / C;
          dw_exp[c] += g * norm;
        }
        for (std::int64_t c = 0; c < C; ++c) {
          const double norm = double(x[n * C + c]) * ref.rstd[n];
          dinp_exp[n * C + c] += ref.rstd[n] * (double(w[c]) * double(dout[n * C + c]) - norm * wgn_mean);
        }
      }
      expect_all_close(dinp, dinp_exp, tol.rtol, tol.atol, "dinp");
      // dweight sums N terms: the f32 error grows like sqrt(N) * eps.
      expect_all_close(dw, dw_exp, tol.rtol, tol.atol * std::sqrt(double(N)), "dweight");
    }
  }
}

TEST(CpuRmsNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  for (const std::int64_t C : {13, 70}) {  // 70: two channel blocks of the dweight reduction
    SCOPED_TRACE(testing::Message() << "C=" << C);
    const std::int64_t N = 6;
    const double eps = 1e-6;
    auto x = random_values(N * C, 61, -1, 2), w = random_values(C, 62, 0.5, 1.5);
    const auto R = random_values(N * C, 63);
    std::vector<double> out(N * C), rstd(N);
    auto forward = [&] {
      ops::rmsnorm_forward(view(out, {N, C}), view(rstd, {N}), view(x, {N, C}), view(w, {C}), eps);
    };
    auto loss = [&] {  // L = sum(out * R)
      forward();
      return dot(out, R);
    };
    forward();
    const auto dinp0 = random_values(N * C, 64), dw0 = random_values(C, 65);
    std::vector<double> dinp = dinp0, dw = dw0, dout = R;
    ops::rmsnorm_backward(view(dinp, {N, C}), view(dw, {C}), view(dout, {N, C}), view(x, {N, C}), view(w, {C}),
                          view(rstd, {N}));
    // Both accumulate: subtract what was there before.
    for (std::size_t i = 0; i < dinp.size(); ++i) dinp[i] -= dinp0[i];
    for (std::int64_t c = 0; c < C; ++c) dw[c] -= dw0[c];
    expect_gradient_matches(dinp, numeric_gradient(x, loss), "dinp");
    expect_gradient_matches(dw, numeric_gradient(w, loss), "dweight");

    // A second call adds the same gradients again.
    std::vector<double> dinp2 = dinp, dw2 = dw;
    ops::rmsnorm_backward(view(dinp2, {N, C}), view(dw2, {C}), view(dout, {N, C}), view(x, {N, C}), view(w, {C}),
                          view(rstd, {N}));
    std::vector<double> twice_dinp(dinp.size()), twice_dw(dw.size());
    for (std::size_t i = 0; i < dinp.size(); ++i) twice_dinp[i] = 2 * dinp[i];
    for (std::size_t i = 0; i < dw.size(); ++i) twice_dw[i] = 2 * dw[i];
    expect_all_close(dinp2, twice_dinp, 1e-12, 1e-12, "dinp after two calls");
    expect_all_close(dw2, twice_dw, 1e-12, 1e-12, "dweight after two calls");
  }
}

}  // namespace
