// 1-bit Adam's local arithmetic against hand references, and the optimizer on
// one process (a size-1 MPI communicator): warm-up bit-identical to AdamW,
// then the first compression step against a hand computation. The
// multi-rank behaviour is tested in tests/launch/run/test_onebit_adam.cpp.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "optim/adamw.h"
#include "optim/onebit_adam.h"
#include "parallel/mpi_communicator.h"

using namespace optim;

namespace {

engine::Tensor t(std::vector<float>& x) {
  return engine::Tensor(x.data(), engine::Shape{static_cast<std::int64_t>(x.size())}, engine::DType::kF32,
                        engine::DeviceType::kCpu);
}

}  // namespace

TEST(OneBitAdamLocal, MomentumUpdateMatchesReference) {
  std::vector<float> m = {0.5f, -0.25f, 0.0f, 1e-3f}, g = {1.0f, 2.0f, -3.0f, 0.0f};
  const double b1 = 0.9, gs = 0.5;
  std::vector<float> expected(m.size());
  for (std::size_t i = 0; i < m.size(); ++i) expected[i] = static_cast<float>(b1 * m[i] + (1 - b1) * gs * g[i]);
  onebit_momentum_update(m.data(), g.data(), static_cast<std::int64_t>(m.size()), b1, gs);
  EXPECT_EQ(m, expected);
}

TEST(OneBitAdamLocal, ParamUpdateUsesFrozenCorrectedVarianceAndHoldsUntrainedElements) {
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, m = {0.1f, -0.2f, 0.3f}, v = {0.04f, 0.01f, 0.0f}, w(3, 0.0f);
  OneBitUpdateHyper h;
  h.lr = 0.01;
  h.eps = 1e-8;
  h.weight_decay = 0.1;
  h.bias1 = 1 - std::pow(0.9, 7);   // step 7
  h.bias2 = 1 - std::pow(0.95, 5);  // frozen at step 5
  std::vector<double> ref(3);
  for (int i = 0; i < 3; ++i) {
    const double adam = v[i] > 0 ? (m[i] / h.bias1) / (std::sqrt(v[i] / h.bias2) + h.eps) : 0.0;
    ref[i] = p[i] - h.lr * (adam + h.weight_decay * p[i]);
  }
  onebit_param_update(p.data(), m.data(), v.data(), 3, h, w.data());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(p[i], static_cast<float>(ref[i])) << i;
    EXPECT_EQ(w[i], p[i]) << "the working copy receives the new value";
  }
  // The element with v == 0 moved by weight decay only, as AdamW moves an
  // element that never had a gradient.
  EXPECT_FLOAT_EQ(p[2], 0.5f * (1 - 0.01 * 0.1));
}

// The ratio bound is AdamW's own ceiling: a long run of identical gradients
// (the worst case for |m| / sqrt(v)) approaches it from below and never
// passes it; the clamp leaves ratios under it untouched.
TEST(OneBitAdamLocal, RatioBoundIsAdamsCeilingAndClampsOnlyBeyondIt) {
  const double b1 = 0.9, b2 = 0.95;
  const double bound = adam_ratio_bound(b1, b2);
  EXPECT_NEAR(bound, 0.1 / std::sqrt(0.05 * (1 - 0.81 / 0.95)), 1e-12);
  EXPECT_NEAR(bound, 1.1650, 1e-4);
  EXPECT_NEAR(adam_ratio_bound(0.9, 0.999), 7.2703, 1e-4);
  EXPECT_TRUE(std::isinf(adam_ratio_bound(0.99, 0.9)));
  // AdamW on the gradient sequence that maximises the ratio at step t
  // (g_i proportional to (b1/b2)^(t-i), Cauchy-Schwarz's equality case).
  for (int t : {1, 5, 50, 500}) {
    double m = 0, v = 0;
    for (int i = 1; i <= t; ++i) {
      const double g = std::pow(b1 / b2, t - i);
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
    }
    const double ratio = (m / (1 - std::pow(b1, t))) / std::sqrt(v / (1 - std::pow(b2, t)));
    EXPECT_LE(ratio, bound + 1e-12) << "t = " << t;
    if (t == 500) EXPECT_GT(ratio, 0.99 * bound) << "t = " << t << ": the bound is tight";
  }
  // Clamped: an element whose momentum dwarfs its frozen variance (the
  // attention key bias: gradient ~1e-11) steps by lr * bound, not ~1e5 lr.
  std::vector<float> p = {0.0f, 0.0f, 0.0f}, m = {1e-3f, -1e-3f, 1e-4f}, v = {1e-22f, 1e-22f, 1e-7f};
  OneBitUpdateHyper h;
  h.lr = 0.01;
  h.max_ratio = bound;
  onebit_param_update(p.data(), m.data(), v.data(), 3, h, nullptr);
  EXPECT_FLOAT_EQ(p[0], static_cast<float>(-0.01 * bound));
  EXPECT_FLOAT_EQ(p[1], static_cast<float>(0.01 * bound));
  // 1e-4 / sqrt(1e-7) = 0.316: under the bound, the plain update.
  EXPECT_FLOAT_EQ(p[2], static_cast<float>(-0.01 * (1e-4 / (std::sqrt(1e-7) + 1e-8))));
}

TEST(OneBitAdam, WarmupIsAdamWThenFirstCompressionStepMatchesHand) {
  // 70 elements (three sign words, the last partly used), decay on the first 40.
  const int n = 70;
  std::vector<float> p(n), g(n), p_ref(n);
  for (int i = 0; i < n; ++i) p[i] = p_ref[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  const std::vector<ParamSegment> segments = {{0, 40, true}, {40, 30, false}};
  const AdamWConfig adam{0.9, 0.95, 1e-8, 0.1};
  OneBitAdamConfig cfg;
  cfg.adam = adam;
  cfg.freeze_step = 3;
  parallel::MpiCommunicator self(MPI_COMM_SELF, "dp");
  OneBitAdam onebit(FlatParams{t(p), t(g), engine::Tensor{}}, segments, cfg, self, {{"all", {{0, n}}}});
  std::vector<float> g_ref(n);
  AdamW reference(FlatParams{t(p_ref), t(g_ref), engine::Tensor{}}, segments, adam);
  auto set_grads = [&](int step) {
    for (int i = 0; i < n; ++i) g[i] = g_ref[i] = std::sin(0.37f * static_cast<float>(i + 11 * step));
  };
  for (int step = 1; step <= 3; ++step) {
    ASSERT_FALSE(onebit.compressing());
    set_grads(step);
    onebit.step(1e-2, 0.5);
    reference.step(1e-2, 0.5);
    ASSERT_EQ(std::memcmp(p.data(), p_ref.data(), n * sizeof(float)), 0) << "warm-up step " << step;
  }
  ASSERT_TRUE(onebit.compressing());
  EXPECT_EQ(onebit.compressed_bytes_per_step(), 0u) << "one rank sends nothing";

  // Step 4 by hand. One rank: the worker compresses m_local (its error is
  // still 0) to rms * sign over its single chunk; the server's mean of that is
  // +-rms, whose rms is rms again: the result is rms(m_local) * sign(m_local).
  set_grads(4);
  std::vector<double> m_local(n);
  double sumsq = 0;
  for (int i = 0; i < n; ++i) {
    const float local = static_cast<float>(0.9 * reference.m().data_as<float>()[i] + (1.0 - 0.9) * 0.5 * g[i]);
    m_local[i] = local;
    sumsq += m_local[i] * m_local[i];
  }
  const float scale = static_cast<float>(std::sqrt(sumsq / n));
  std::vector<float> expected(p);
  const double bias1 = 1 - std::pow(0.9, 4), bias2 = 1 - std::pow(0.95, 3);
  const float* v = reference.v().data_as<float>();
  for (int i = 0; i < n; ++i) {
    const double m = m_local[i] >= 0 ? scale : -scale;
    const double wd = i < 40 ? 0.1 : 0.0;
    expected[i] = static_cast<float>(p[i] - 1e-2 * ((m / bias1) / (std::sqrt(v[i] / bias2) + 1e-8) + wd * p[i]));
  }
  onebit.step(1e-2, 0.5);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(std::fabs(onebit.m().data_as<float>()[i]), scale) << i;
    EXPECT_NEAR(p[i], expected[i], 1e-6 * std::fabs(expected[i]) + 1e-9) << i;
  }
  // The variance stayed frozen.
  EXPECT_EQ(std::memcmp(onebit.v().data_as<float>(), v, n * sizeof(float)), 0);
}

TEST(OneBitAdam, RejectsGroupsThatDoNotTileTheLayout) {
  std::vector<float> p(64), g(64);
  OneBitAdamConfig cfg;
  parallel::MpiCommunicator self(MPI_COMM_SELF, "dp");
  EXPECT_THROW(OneBitAdam(FlatParams{t(p), t(g), engine::Tensor{}}, {{0, 64, true}}, cfg, self, {{"a", {{0, 32}}}}),
               engine::Error);
  EXPECT_THROW(OneBitAdam(FlatParams{t(p), t(g), engine::Tensor{}}, {{0, 64, true}}, cfg, self,
                          {{"a", {{0, 40}}}, {"b", {{32, 32}}}}),
               engine::Error);
  cfg.freeze_step = 0;
  EXPECT_THROW(OneBitAdam(FlatParams{t(p), t(g), engine::Tensor{}}, {{0, 64, true}}, cfg, self, {{"a", {{0, 64}}}}),
               engine::Error);
}
