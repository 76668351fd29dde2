// Learning-rate schedules, clipping and AdamW over flat buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"

using namespace optim;

TEST(LrSchedule, WarmupThenCosineToFloor) {
  LrSchedule s;
  s.max_lr = 1e-3;
  s.min_lr = 1e-4;
  s.warmup_steps = 10;
  s.total_steps = 110;
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);   // 1/10 of max
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);   // end of warm-up
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);  // cosine starts at max
  EXPECT_NEAR(s.at(60), 0.5 * (1e-3 + 1e-4), 1e-12);  // half way
  EXPECT_NEAR(s.at(110), 1e-4, 1e-15);
  EXPECT_NEAR(s.at(500), 1e-4, 1e-15);
  for (int i = 10; i < 110; ++i) EXPECT_GE(s.at(i), s.at(i + 1));
}

TEST(LrSchedule, ConstantAndValidation) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::kConstant;
  s.max_lr = 3e-4;
  s.total_steps = 5;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.at(i), 3e-4);
  s.min_lr = 1.0;  // above max
  EXPECT_THROW(s.validate(), engine::Error);
  EXPECT_THROW(parse_lr_kind("linear"), engine::Error);
}

TEST(GradClip, FactorOnlyAboveTheBound) {
  EXPECT_EQ(clip_factor(0.5, 1.0), 1.0);
  EXPECT_NEAR(clip_factor(4.0, 1.0), 0.25, 1e-6);
  EXPECT_EQ(clip_factor(100.0, 0.0), 1.0);  // off
  std::vector<float> g = {3, 4};
  EXPECT_DOUBLE_EQ(grad_sum_of_squares(engine::Tensor(g.data(), engine::Shape{2}, engine::DType::kF32,
                                                      engine::DeviceType::kCpu)),
                   25.0);
}

TEST(AdamW, MatchesReferenceWithDecayOnlyWhereMarked) {
  const int n = 6;
  std::vector<float> p = {0.5f, -0.3f, 0.2f, 1.0f, -1.0f, 0.1f}, g(n);
  std::vector<double> ref(p.begin(), p.end()), m(n, 0), v(n, 0);
  auto t = [](std::vector<float>& x) {
    return engine::Tensor(x.data(), engine::Shape{static_cast<std::int64_t>(x.size())}, engine::DType::kF32,
                          engine::DeviceType::kCpu);
  };
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  // First 4 elements decay, last 2 do not.
  AdamW opt(FlatParams{t(p), t(g), engine::Tensor{}}, {{0, 4, true}, {4, 2, false}}, cfg);
  for (int step = 1; step <= 5; ++step) {
    for (int i = 0; i < n; ++i) g[i] = static_cast<float>(std::sin(step * 1.3 + i));
    const double lr = 1e-2 * step, scale = 0.5;
    opt.step(lr, scale);
    for (int i = 0; i < n; ++i) {
      const double gi = g[i] * scale;
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.95 * v[i] + 0.05 * gi * gi;
      const double mh = m[i] / (1 - std::pow(0.9, step)), vh = v[i] / (1 - std::pow(0.95, step));
      ref[i] -= lr * (mh / (std::sqrt(vh) + 1e-8) + (i < 4 ? 0.1 : 0.0) * ref[i]);
    }
    for (int i = 0; i < n; ++i) ASSERT_NEAR(p[i], ref[i], 2e-6) << "step " << step << " element " << i;
  }
  EXPECT_EQ(opt.steps_taken(), 5);
}

TEST(AdamW, RefusesSegmentsOutsideTheBuffer) {
  std::vector<float> p(4), g(4);
  auto t = [](std::vector<float>& x) {
    return engine::Tensor(x.data(), engine::Shape{4}, engine::DType::kF32, engine::DeviceType::kCpu);
  };
  EXPECT_THROW(AdamW(FlatParams{t(p), t(g), {}}, {{2, 4, true}}, AdamWConfig{}), engine::Error);
}
