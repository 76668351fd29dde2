// attention_forward / attention_backward: naive double reference (per head,
// per query, per key) and finite differences, at several (T, H, D) including
// T = 1 and non-power-of-two T that straddles the kernel's 64-row causal blocks,
// and grouped-query attention (fewer key/value heads than query heads).
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

struct AttnShape {
  std::int64_t B, T, H, D;
  std::int64_t KV = 0;  // key/value heads; 0: KV = H
  std::int64_t kv() const { return KV == 0 ? H : KV; }
  std::int64_t width() const { return (H + 2 * kv()) * D; }  // of a qkv row
};

struct AttnReference {
  std::vector<double> out;   // (B, T, H D)
  std::vector<double> prob;  // (B, H, T, T)
  std::vector<double> dqkv;  // (B, T, (H + 2 KV) D)
};

// qkv (B, T, (H + 2 KV) D) = [q | k | v]: query head h at columns [h D, (h+1) D),
// key head g at [(H + g) D, ...), value head g at [(H + KV + g) D, ...). Query
// head h uses key/value head h / (H / KV): k and v expanded per query head,
// as transformers' repeat_kv does, and dk, dv summed back over each group.
AttnReference reference_attention(const AttnShape& s, const std::vector<double>& qkv,
                                  const std::vector<double>& dout) {
  const std::int64_t B = s.B, T = s.T, H = s.H, D = s.D, KV = s.kv(), C = H * D, W = s.width();
  const double scale = 1.0 / std::sqrt(double(D));
  AttnReference r{std::vector<double>(B * T * C, 0.0), std::vector<double>(B * H * T * T, 0.0),
                  std::vector<double>(B * T * W, 0.0)};
  auto kv_head = [&](std::int64_t h) { return h / (H / KV); };
  auto q_at = [&](std::int64_t b, std::int64_t t, std::int64_t h) { return (b * T + t) * W + h * D; };
  auto k_at = [&](std::int64_t b, std::int64_t t, std::int64_t h) { return (b * T + t) * W + (H + kv_head(h)) * D; };
  auto v_at = [&](std::int64_t b, std::int64_t t, std::int64_t h) {
    return (b * T + t) * W + (H + KV + kv_head(h)) * D;
  };
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t t = 0; t < T; ++t) {
        double* p = &r.prob[((b * H + h) * T + t) * T];
        std::vector<double> score(t + 1);
        double max_score = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j <= t; ++j) {
          double dotqk = 0;
          for (std::int64_t d = 0; d < D; ++d) dotqk += qkv[q_at(b, t, h) + d] * qkv[k_at(b, j, h) + d];
          score[j] = dotqk * scale;
          max_score = std::max(max_score, score[j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j <= t; ++j) sum += std::exp(score[j] - max_score);
        for (std::int64_t j = 0; j <= t; ++j) p[j] = std::exp(score[j] - max_score) / sum;
        for (std::int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (std::int64_t j = 0; j <= t; ++j) o += p[j] * qkv[v_at(b, j, h) + d];
          r.out[(b * T + t) * C + h * D + d] = o;
        }
        // Backward of this query row.
        const double* g = &dout[(b * T + t) * C + h * D];  // (D)
        std::vector<double> dp(t + 1);
        double p_dot_dp = 0;
        for (std::int64_t j = 0; j <= t; ++j) {
          for (std::int64_t d = 0; d < D; ++d) dp[j] += g[d] * qkv[v_at(b, j, h) + d];
          p_dot_dp += p[j] * dp[j];
        }
        for (std::int64_t j = 0; j <= t; ++j) {
          const double ds = p[j] * (dp[j] - p_dot_dp) * scale;
          for (std::int64_t d = 0; d < D; ++d) {
            r.dqkv[q_at(b, t, h) + d] += ds * qkv[k_at(b, j, h) + d];
            r.dqkv[k_at(b, j, h) + d] += ds * qkv[q_at(b, t, h) + d];
            r.dqkv[v_at(b, j, h) + d] += p[j] * g[d];
          }
        }
      }
  return r;
}

template <typename T>
class CpuAttention : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuAttention, FloatTypes);

// Forward and backward at `s` against the reference, in T.
template <typename T>
void check_against_reference(const AttnShape& s) {
  const Tolerance tol = reference_tolerance<T>();
  const std::int64_t B = s.B, Tn = s.T, H = s.H, C = s.H * s.D, W = s.width();
  SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << Tn << " H=" << H << " KV=" << s.kv() << " D=" << s.D);
  // Scores of size ~2 so the softmax is neither uniform nor one-hot.
  std::vector<T> qkv = cast_to<T>(random_values(B * Tn * W, 91, -1.5, 1.5));
  std::vector<T> dout = cast_to<T>(random_values(B * Tn * C, 92));
  std::vector<T> out(B * Tn * C), saved(B * H * Tn * Tn, T(-1));
  std::vector<T> dqkv(B * Tn * W, std::numeric_limits<T>::quiet_NaN());  // must be fully written

  ASSERT_EQ(ops::attention_saved_shape(DeviceType::kCpu, B, H, Tn), (Shape{B, H, Tn, Tn}));
  ASSERT_EQ(ops::attention_saved_dtype(DeviceType::kCpu, dtype_of<T>()), dtype_of<T>());
  ops::attention_forward(view(out, {B, Tn, C}), view(saved, {B, H, Tn, Tn}), view(qkv, {B, Tn, W}), int(H),
                         int(s.KV));
  ops::attention_backward(view(dqkv, {B, Tn, W}), view(dout, {B, Tn, C}), view(qkv, {B, Tn, W}),
                          view(out, {B, Tn, C}), view(saved, {B, H, Tn, Tn}), int(H), int(s.KV));

  const AttnReference ref = reference_attention(s, to_double(qkv), to_double(dout));
  expect_all_close(out, ref.out, tol.rtol, tol.atol, "out");
  expect_all_close(saved, ref.prob, tol.rtol, tol.atol, "saved probabilities");  // upper triangle 0
  // dq, dk sum up to T terms (dk, dv of a group H/KV times as many): the f32
  // absolute error grows like the square root of the count.
  const double terms = double(Tn) * double(H / s.kv());
  expect_all_close(dqkv, ref.dqkv, tol.rtol, tol.atol * std::sqrt(terms), "dqkv");
}

TYPED_TEST(CpuAttention, ForwardAndBackwardMatchReference) {
  const AttnShape shapes[] = {{1, 1, 1, 4}, {2, 5, 2, 3}, {1, 64, 2, 8}, {1, 65, 1, 4}, {2, 130, 3, 16}};
  for (const AttnShape& s : shapes) check_against_reference<TypeParam>(s);
}

// Grouped-query attention (Ainslie et al. 2023): (H, KV) = (4, 4) multi-head
// through the n_kv_head argument, (4, 2) and (6, 2) groups of 2 and 3,
// (4, 1) multi-query; T straddling the 64-row causal blocks.
TYPED_TEST(CpuAttention, GroupedQueryForwardAndBackwardMatchReference) {
  const AttnShape shapes[] = {{2, 5, 4, 3, 4}, {1, 70, 4, 8, 2}, {2, 33, 4, 4, 1}, {1, 130, 6, 8, 2},
                              {1, 1, 4, 2, 1}, {2, 9, 6, 2, 2}};
  for (const AttnShape& s : shapes) check_against_reference<TypeParam>(s);
}

TEST(CpuAttention, BackwardMatchesFiniteDifferences) {
  // {1, 70, 1, 2} crosses a causal block boundary (64) in both directions;
  // the last four are grouped-query: (H, KV) = (4, 4), (4, 2), (4, 1), (6, 2),
  // so dk and dv are the sums over each group's query heads.
  const AttnShape shapes[] = {{1, 1, 1, 3}, {2, 5, 2, 3},    {1, 7, 3, 2},    {1, 70, 1, 2},
                              {1, 6, 4, 2, 4}, {2, 5, 4, 2, 2}, {1, 7, 4, 3, 1}, {1, 66, 6, 2, 2}};
  for (const AttnShape& s : shapes) {
    const std::int64_t B = s.B, Tn = s.T, H = s.H, C = s.H * s.D, W = s.width();
    SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << Tn << " H=" << H << " KV=" << s.kv() << " D=" << s.D);
    auto qkv = random_values(B * Tn * W, 93, -1.5, 1.5);
    const auto R = random_values(B * Tn * C, 94);
    std::vector<double> out(B * Tn * C), saved(B * H * Tn * Tn), dqkv(qkv.size()), dout = R;
    auto loss = [&] {  // L = sum(out * R)
      ops::attention_forward(view(out, {B, Tn, C}), view(saved, {B, H, Tn, Tn}), view(qkv, {B, Tn, W}), int(H),
                             int(s.KV));
      return dot(out, R);
    };
    loss();
    ops::attention_backward(view(dqkv, {B, Tn, W}), view(dout, {B, Tn, C}), view(qkv, {B, Tn, W}),
                            view(out, {B, Tn, C}), view(saved, {B, H, Tn, Tn}), int(H), int(s.KV));
    expect_gradient_matches(dqkv, numeric_gradient(qkv, loss), "dqkv");
  }
}

// n_kv_head = 0 means KV = H: bit for bit what n_kv_head = H computes.
TEST(CpuAttention, ZeroKeyValueHeadsMeansMultiHead) {
  const std::int64_t B = 2, T = 9, H = 3, D = 4, C = H * D;
  std::vector<float> qkv = cast_to<float>(random_values(B * T * 3 * C, 95));
  std::vector<float> dout = cast_to<float>(random_values(B * T * C, 96));
  std::vector<float> results[2];
  for (const int kv : {0, int(H)}) {
    std::vector<float> out(B * T * C), saved(B * H * T * T), dqkv(B * T * 3 * C);
    ops::attention_forward(view(out, {B, T, C}), view(saved, {B, H, T, T}), view(qkv, {B, T, 3 * C}), int(H), kv);
    ops::attention_backward(view(dqkv, {B, T, 3 * C}), view(dout, {B, T, C}), view(qkv, {B, T, 3 * C}),
                            view(out, {B, T, C}), view(saved, {B, H, T, T}), int(H), kv);
    out.insert(out.end(), dqkv.begin(), dqkv.end());
    results[kv == 0 ? 0 : 1] = out;
  }
  EXPECT_EQ(results[0], results[1]);
}

}  // namespace
