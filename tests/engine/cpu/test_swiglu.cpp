// swiglu_forward / swiglu_backward: a naive double reference and central
// finite differences. Rows of the input are [gate | up].
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct SwigluShape {
  std::int64_t N, F;
};
// One above the parallel threshold (N*F >= 16384).
const SwigluShape kShapes[] = {{1, 1}, {3, 7}, {64, 300}};

template <typename T>
class CpuSwiglu : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuSwiglu, FloatTypes);

TYPED_TEST(CpuSwiglu, ForwardAndBackwardMatchReference) {
  using T = TypeParam;
  const Tolerance tol = reference_tolerance<T>();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (const SwigluShape& s : kShapes) {
    const std::int64_t N = s.N, F = s.F;
    SCOPED_TRACE(testing::Message() << "N=" << N << " F=" << F);
    auto inp_d = random_values(N * 2 * F, 71, -6, 6);
    // Saturated gates: sigmoid's exp overflows in f32 beyond |x| ~ 88 and
    // must give 0 or x, never NaN.
    inp_d[0] = -100;
    if (F > 1) inp_d[1] = 100;
    std::vector<T> inp = cast_to<T>(inp_d), out(N * F, nan);
    ops::swiglu_forward(view(out, {N, F}), view(inp, {N, 2 * F}));

    const auto dout_d = random_values(N * F, 72);
    std::vector<T> dout = cast_to<T>(dout_d), dinp(N * 2 * F, nan);  // written: every element
    ops::swiglu_backward(view(dinp, {N, 2 * F}), view(dout, {N, F}), view(inp, {N, 2 * F}));

    std::vector<double> out_exp(N * F), dinp_exp(N * 2 * F);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t f = 0; f < F; ++f) {
        const double g = double(inp[n * 2 * F + f]), u = double(inp[n * 2 * F + F + f]), d = double(dout[n * F + f]);
        const double sg = sigmoid(g);
        out_exp[n * F + f] = g * sg * u;
        // d/dg (g sigmoid(g)) = sigmoid(g) + g sigmoid(g) (1 - sigmoid(g))
        dinp_exp[n * 2 * F + f] = d * u * (sg + g * sg * (1 - sg));
        dinp_exp[n * 2 * F + F + f] = d * g * sg;
      }
    expect_all_close(out, out_exp, tol.rtol, tol.atol, "out");
    expect_all_close(dinp, dinp_exp, tol.rtol, tol.atol, "dinp");
  }
}

TEST(CpuSwiglu, BackwardMatchesFiniteDifferences) {
  const std::int64_t N = 5, F = 9;
  auto inp = random_values(N * 2 * F, 73, -4, 4);
  const auto R = random_values(N * F, 74);
  std::vector<double> out(N * F), dout = R, dinp(N * 2 * F);
  auto loss = [&] {  // L = sum(out * R)
    ops::swiglu_forward(view(out, {N, F}), view(inp, {N, 2 * F}));
    return dot(out, R);
  };
  ops::swiglu_backward(view(dinp, {N, 2 * F}), view(dout, {N, F}), view(inp, {N, 2 * F}));
  expect_gradient_matches(dinp, numeric_gradient(inp, loss), "dinp");
}

// The rows may be a (B, T, 2F) activation: only the last dim is split.
TEST(CpuSwiglu, TakesThreeDimensionalRows) {
  const std::int64_t B = 2, T = 3, F = 4;
  std::vector<float> inp = cast_to<float>(random_values(B * T * 2 * F, 75)), out3(B * T * F), out2(B * T * F);
  ops::swiglu_forward(view(out3, {B, T, F}), view(inp, {B, T, 2 * F}));
  ops::swiglu_forward(view(out2, {B * T, F}), view(inp, {B * T, 2 * F}));
  EXPECT_EQ(out3, out2);
}

}  // namespace
