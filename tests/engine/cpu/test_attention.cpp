// attention_forward / attention_backward: naive double reference (per head,
// per query, per key) and finite differences, at several (T, H, D) including
// T = 1 and non-power-of-two T that straddles the kernel's 64-row causal blocks.
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

struct AttnShape {
  std::int64_t B, T, H, D;
};

struct AttnReference {
  std::vector<double> out;   // (B, T, C)
  std::vector<double> prob;  // (B, H, T, T)
  std::vector<double> dqkv;  // (B, T, 3C)
};

// qkv (B, T, 3C) = [q | k | v], head h at columns [h*D, (h+1)*D) of each.
AttnReference reference_attention(const AttnShape& s, const std::vector<double>& qkv,
                                  const std::vector<double>& dout) {
  const std::int64_t B = s.B, T = s.T, H = s.H, D = s.D, C = H * D;
  const double scale = 1.0 / std::sqrt(double(D));
  AttnReference r{std::vector<double>(B * T * C, 0.0), std::vector<double>(B * H * T * T, 0.0),
                  std::vector<double>(B * T * 3 * C, 0.0)};
  auto q = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) {
    return qkv[(b * T + t) * 3 * C + h * D + d];
  };
  auto k = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) {
    return qkv[(b * T + t) * 3 * C + C + h * D + d];
  };
  auto v = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) {
    return qkv[(b * T + t) * 3 * C + 2 * C + h * D + d];
  };
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t t = 0; t < T; ++t) {
        double* p = &r.prob[((b * H + h) * T + t) * T];
        std::vector<double> score(t + 1);
        double max_score = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j <= t; ++j) {
          double dotqk = 0;
          for (std::int64_t d = 0; d < D; ++d) dotqk += q(b, t, h, d) * k(b, j, h, d);
          score[j] = dotqk * scale;
          max_score = std::max(max_score, score[j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j <= t; ++j) sum += std::exp(score[j] - max_score);
        for (std::int64_t j = 0; j <= t; ++j) p[j] = std::exp(score[j] - max_score) / sum;
        for (std::int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (std::int64_t j = 0; j <= t; ++j) o += p[j] * v(b, j, h, d);
          r.out[(b * T + t) * C + h * D + d] = o;
        }
        // Backward of this query row.
        const double* g = &dout[(b * T + t) * C + h * D];  // (D)
        std::vector<double> dp(t + 1);
        double p_dot_dp = 0;
        for (std::int64_t j = 0; j <= t; ++j) {
          for (std::int64_t d = 0; d < D; ++d) dp[j] += g[d] * v(b, j, h, d);
          p_dot_dp += p[j] * dp[j];
        }
        for (std::int64_t j = 0; j <= t; ++j) {
          const double ds = p[j] * (dp[j] - p_dot_dp) * scale;
          for (std::int64_t d = 0; d < D; ++d) {
            r.dqkv[(b * T + t) * 3 * C + h * D + d] += ds * k(b, j, h, d);
            r.dqkv[(b * T + j) * 3 * C + C + h * D + d] += ds * q(b, t, h, d);
            r.dqkv[(b * T + j) * 3 * C + 2 * C + h * D + d] += p[j] * g[d];
          }
        }
      }
  return r;
}

template <typename T>
class CpuAttention : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuAttention, FloatTypes);

TYPED_TEST(CpuAttention, ForwardAndBackwardMatchReference) {
  using T = TypeParam;
  const Tolerance tol = reference_tolerance<T>();
  const AttnShape shapes[] = {{1, 1, 1, 4}, {2, 5, 2, 3}, {1, 64, 2, 8}, {1, 65, 1, 4}, {2, 130, 3, 16}};
  for (const AttnShape& s : shapes) {
    const std::int64_t B = s.B, Tn = s.T, H = s.H, C = s.H * s.D;
    SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << Tn << " H=" << H << " D=" << s.D);
    // Scores of size ~2 so the softmax is neither uniform nor one-hot.
    std::vector<T> qkv = cast_to<T>(random_values(B * Tn * 3 * C, 91, -1.5, 1.5));
    std::vector<T> dout = cast_to<T>(random_values(B * Tn * C, 92));
    std::vector<T> out(B * Tn * C), saved(B * H * Tn * Tn, T(-1));
    std::vector<T> dqkv(B * Tn * 3 * C, std::numeric_limits<T>::quiet_NaN());  // must be fully written

    ASSERT_EQ(ops::attention_saved_shape(DeviceType::kCpu, B, H, Tn), (Shape{B, H, Tn, Tn}));
    ASSERT_EQ(ops::attention_saved_dtype(DeviceType::kCpu, dtype_of<T>()), dtype_of<T>());
    ops::attention_forward(view(out, {B, Tn, C}), view(saved, {B, H, Tn, Tn}), view(qkv, {B, Tn, 3 * C}), int(H));
    ops::attention_backward(view(dqkv, {B, Tn, 3 * C}), view(dout, {B, Tn, C}), view(qkv, {B, Tn, 3 * C}),
                            view(out, {B, Tn, C}), view(saved, {B, H, Tn, Tn}), int(H));

    const AttnReference ref = reference_attention(s, to_double(qkv), to_double(dout));
    expect_all_close(out, ref.out, tol.rtol, tol.atol, "out");
    expect_all_close(saved, ref.prob, tol.rtol, tol.atol, "saved probabilities");  // upper triangle 0
    // dq, dk sum up to T terms: the f32 absolute error grows like sqrt(T).
    expect_all_close(dqkv, ref.dqkv, tol.rtol, tol.atol * std::sqrt(double(Tn)), "dqkv");
  }
}

TEST(CpuAttention, BackwardMatchesFiniteDifferences) {
  // {1, 70, 1, 2} crosses a causal block boundary (64) in both directions.
  const AttnShape shapes[] = {{1, 1, 1, 3}, {2, 5, 2, 3}, {1, 7, 3, 2}, {1, 70, 1, 2}};
  for (const AttnShape& s : shapes) {
    const std::int64_t B = s.B, Tn = s.T, H = s.H, C = s.H * s.D;
    SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << Tn << " H=" << H << " D=" << s.D);
    auto qkv = random_values(B * Tn * 3 * C, 93, -1.5, 1.5);
    const auto R = random_values(B * Tn * C, 94);
    std::vector<double> out(B * Tn * C), saved(B * H * Tn * Tn), dqkv(qkv.size()), dout = R;
    auto loss = [&] {  // L = sum(out * R)
      ops::attention_forward(view(out, {B, Tn, C}), view(saved, {B, H, Tn, Tn}), view(qkv, {B, Tn, 3 * C}), int(H));
      return dot(out, R);
    };
    loss();
    ops::attention_backward(view(dqkv, {B, Tn, 3 * C}), view(dout, {B, Tn, C}), view(qkv, {B, Tn, 3 * C}),
                            view(out, {B, Tn, C}), view(saved, {B, H, Tn, Tn}), int(H));
    expect_gradient_matches(dqkv, numeric_gradient(qkv, loss), "dqkv");
  }
}

}  // namespace
