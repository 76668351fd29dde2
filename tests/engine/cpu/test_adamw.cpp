// adamw_update vs a reference loop over several steps: with and without
// weight decay, with a grad_scale, with f32 / bf16 working copies.
#include <cmath>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

struct AdamCase {
  double weight_decay, grad_scale;
};

template <typename T>
class CpuAdamW : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuAdamW, FloatTypes);

TYPED_TEST(CpuAdamW, StepsMatchReference) {
  using T = TypeParam;
  // The reference keeps p, m, v in double; the op stores them as T after
  // each step. f32 storage then differs by ~6e-8 relative per stored value,
  // and 5 steps with lr 1e-2 keep that near 1e-7: 1e-6 leaves margin.
  const double rtol = std::is_same_v<T, float> ? 1e-6 : 1e-13, atol = std::is_same_v<T, float> ? 1e-7 : 1e-15;
  for (std::int64_t n : {std::int64_t{1000}, std::int64_t{40000}})
    for (const AdamCase c : {AdamCase{0.0, 1.0}, AdamCase{0.1, 0.5}}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " wd=" << c.weight_decay << " grad_scale=" << c.grad_scale);
      auto p_ref = random_values(n, 121);
      std::vector<double> m_ref(n, 0.0), v_ref(n, 0.0);
      std::vector<T> p = cast_to<T>(p_ref), m(n, T(0)), v(n, T(0));
      std::vector<float> working_f32(n);
      std::vector<std::uint16_t> working_bf16(n);
      p_ref = to_double(p);

      ops::AdamWHyper hyper;
      hyper.lr = 1e-2;
      hyper.beta1 = 0.9;
      hyper.beta2 = 0.95;
      hyper.eps = 1e-8;
      hyper.weight_decay = c.weight_decay;
      hyper.grad_scale = c.grad_scale;
      for (std::int64_t step = 1; step <= 5; ++step) {
        hyper.step = step;
        std::vector<T> g = cast_to<T>(random_values(n, 130 + step));
        const bool bf16 = step % 2 == 0;  // alternate the working copy's dtype
        ops::adamw_update(view(p, {n}), view(g, {n}), view(m, {n}), view(v, {n}), hyper,
                          bf16 ? view(working_bf16, {n}) : view(working_f32, {n}));
        for (std::int64_t i = 0; i < n; ++i) {
          const double gi = c.grad_scale * double(g[i]);
          m_ref[i] = 0.9 * m_ref[i] + 0.1 * gi;
          v_ref[i] = 0.95 * v_ref[i] + 0.05 * gi * gi;
          const double m_hat = m_ref[i] / (1 - std::pow(0.9, step)), v_hat = v_ref[i] / (1 - std::pow(0.95, step));
          p_ref[i] -= 1e-2 * (m_hat / (std::sqrt(v_hat) + 1e-8) + c.weight_decay * p_ref[i]);
        }
        expect_all_close(p, p_ref, rtol, atol, "params step " + std::to_string(step));
        expect_all_close(m, m_ref, rtol, atol, "m step " + std::to_string(step));
        expect_all_close(v, v_ref, rtol, atol, "v step " + std::to_string(step));
        for (std::int64_t i = 0; i < n; ++i) {
          if (bf16) {
            ASSERT_EQ(working_bf16[i], reference_bf16(double(p[i]))) << "bf16 working copy at " << i;
          } else {
            ASSERT_EQ(working_f32[i], static_cast<float>(p[i])) << "f32 working copy at " << i;
          }
        }
      }
    }
}

TEST(CpuAdamW, WithoutWorkingCopy) {
  std::vector<float> p = {1.0f}, g = {0.5f}, m = {0.0f}, v = {0.0f};
  ops::AdamWHyper hyper;
  hyper.lr = 0.1;
  ops::adamw_update(view(p, {1}), view(g, {1}), view(m, {1}), view(v, {1}), hyper);
  // First step: m_hat = g, v_hat = g^2, so the update is lr * g / (|g| + eps) = 0.1.
  EXPECT_NEAR(p[0], 0.9f, 1e-7);
  EXPECT_NEAR(m[0], 0.05f, 1e-8);
  EXPECT_NEAR(v[0], 0.05f * 0.25f, 1e-9);
}

}  // namespace
