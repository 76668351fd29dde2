// softmax_cross_entropy: losses and in-place gradients vs a double reference,
// padded vocabulary, stability for large logits, finite differences.
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

std::vector<std::int32_t> random_targets(std::int64_t N, std::int64_t V, std::uint64_t seed) {
  const auto u = random_values(N, seed, 0, 1);
  std::vector<std::int32_t> t(N);
  for (std::int64_t n = 0; n < N; ++n) t[n] = static_cast<std::int32_t>(u[n] * V);
  return t;
}

struct CeReference {
  std::vector<double> losses, dlogits;
};

// logits (N, Vp); only the first V columns are classes.
CeReference reference_ce(std::int64_t N, std::int64_t Vp, std::int64_t V, const std::vector<double>& logits,
                         const std::vector<std::int32_t>& targets, double grad_scale) {
  CeReference r{std::vector<double>(N), std::vector<double>(N * Vp, 0.0)};
  for (std::int64_t n = 0; n < N; ++n) {
    const double* x = &logits[n * Vp];
    double max_x = x[0];
    for (std::int64_t i = 1; i < V; ++i) max_x = std::max(max_x, x[i]);
    double sum = 0;
    for (std::int64_t i = 0; i < V; ++i) sum += std::exp(x[i] - max_x);
    r.losses[n] = std::log(sum) + max_x - x[targets[n]];
    for (std::int64_t i = 0; i < V; ++i)
      r.dlogits[n * Vp + i] = grad_scale * (std::exp(x[i] - max_x) / sum - (i == targets[n] ? 1.0 : 0.0));
  }
  return r;
}

struct CeShape {
  std::int64_t N, Vp, V;
  double offset;  // added to every logit: stability check
};
const CeShape kShapes[] = {{1, 1, 1, 0}, {6, 13, 10, 0}, {4, 16, 16, 0}, {5, 24, 19, 1000}, {64, 512, 500, 0}};

template <typename T>
class CpuCrossEntropy : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuCrossEntropy, FloatTypes);

TYPED_TEST(CpuCrossEntropy, LossesAndGradientsMatchReference) {
  using T = TypeParam;
  const Tolerance tol = reference_tolerance<T>();
  for (const CeShape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " Vp=" << s.Vp << " V=" << s.V << " offset=" << s.offset);
    auto logits_d = random_values(s.N * s.Vp, 101, -4, 4);
    for (std::int64_t n = 0; n < s.N; ++n) {
      for (std::int64_t i = 0; i < s.V; ++i) logits_d[n * s.Vp + i] += s.offset;
      for (std::int64_t i = s.V; i < s.Vp; ++i) logits_d[n * s.Vp + i] = 1e4;  // padding must be ignored
    }
    const auto targets = random_targets(s.N, s.V, 102);
    std::vector<std::int32_t> targets_v = targets;
    const std::vector<T> logits0 = cast_to<T>(logits_d);
    // Reference from the logits as T holds them (offset 1000 in f32 is rounded).
    const double grad_scale = 0.37;
    const CeReference ref = reference_ce(s.N, s.Vp, s.V, to_double(logits0), targets, grad_scale);
    // Losses are O(log V); a logit offset of 1000 in f32 carries 6e-5 of
    // rounding into the max subtraction, so the loss tolerance scales with it.
    const double loss_atol = tol.atol + (std::is_same_v<T, float> ? 1e-7 * s.offset : 0.0);

    // grad_scale = 0: losses only, logits untouched.
    std::vector<T> logits = logits0, losses(s.N);
    ops::softmax_cross_entropy(view(losses, {s.N}), view(logits, {s.N, s.Vp}), view(targets_v, {s.N}), s.V, 0.0);
    expect_all_close(losses, ref.losses, tol.rtol, loss_atol, "losses (no grad)");
    EXPECT_EQ(logits, logits0) << "logits changed with grad_scale = 0";

    // grad_scale != 0: logits become dlogits, padding columns 0.
    ops::softmax_cross_entropy(view(losses, {s.N}), view(logits, {s.N, s.Vp}), view(targets_v, {s.N}), s.V,
                               grad_scale);
    expect_all_close(losses, ref.losses, tol.rtol, loss_atol, "losses");
    expect_all_close(logits, ref.dlogits, tol.rtol, tol.atol, "dlogits");
    for (std::int64_t n = 0; n < s.N; ++n)
      for (std::int64_t i = s.V; i < s.Vp; ++i) ASSERT_EQ(logits[n * s.Vp + i], T(0)) << "padding " << n << "," << i;
  }
}

TEST(CpuCrossEntropy, GradientMatchesFiniteDifferences) {
  const std::int64_t N = 5, Vp = 9, V = 7;
  const double grad_scale = 1.0 / N;  // mean loss
  auto logits = random_values(N * Vp, 111, -3, 3);
  auto targets = random_targets(N, V, 112);
  std::vector<double> scratch(N * Vp), losses(N);
  auto loss = [&] {  // L = grad_scale * sum_n losses[n]
    scratch = logits;
    ops::softmax_cross_entropy(view(losses, {N}), view(scratch, {N, Vp}), view(targets, {N}), V, 0.0);
    double total = 0;
    for (double l : losses) total += l;
    return grad_scale * total;
  };
  std::vector<double> dlogits = logits;
  ops::softmax_cross_entropy(view(losses, {N}), view(dlogits, {N, Vp}), view(targets, {N}), V, grad_scale);
  // The padding columns do not enter the loss: their numeric gradient is 0 too.
  expect_gradient_matches(dlogits, numeric_gradient(logits, loss), "dlogits");
}

TEST(CpuCrossEntropy, RejectsTargetsOutsideTheVocabulary) {
  const std::int64_t N = 3, Vp = 8, V = 6;
  std::vector<float> logits(N * Vp, 0.0f), losses(N);
  for (std::int32_t bad : {6, 7, -1}) {
    std::vector<std::int32_t> targets = {0, bad, 2};
    try {
      ops::softmax_cross_entropy(view(losses, {N}), view(logits, {N, Vp}), view(targets, {N}), V, 1.0);
      ADD_FAILURE() << "target " << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("target " + std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

}  // namespace
