// Tensor views, arenas and the counter-based RNG.
#include <gtest/gtest.h>

#include <vector>

#include "engine/buffer.h"
#include "engine/rng.h"
#include "engine/tensor.h"

using namespace engine;

TEST(Tensor, ViewsAndSlices) {
  std::vector<float> data(24);
  Tensor t(data.data(), Shape{2, 3, 4}, DType::kF32, DeviceType::kCpu);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_EQ(t.rows(1, 1).data_as<float>(), data.data() + 12);
  EXPECT_EQ(t.flat_slice(5, 3).data_as<float>(), data.data() + 5);
  EXPECT_THROW(t.view(Shape{5, 5}), Error);
  EXPECT_THROW(t.flat_slice(20, 5), Error);
  EXPECT_EQ(t.describe(), "f32(2, 3, 4)@cpu");
}

TEST(Arena, PlanningMatchesRealAllocation) {
  auto sequence = [](Arena& a) {
    a.allocate(Shape{3, 5}, DType::kF32);
    a.allocate(Shape{7}, DType::kBF16);
    return a.allocate(Shape{2, 2}, DType::kF64);
  };
  Arena plan = Arena::planning(DeviceType::kCpu);
  sequence(plan);
  Arena real(DeviceType::kCpu, plan.used());
  Tensor last = sequence(real);
  EXPECT_EQ(real.used(), plan.used());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(last.data()) % Arena::kAlignment, 0u);
  EXPECT_THROW(real.allocate(Shape{1}, DType::kF32), Error);  // full: overflow is an error
}

TEST(Arena, MemoryStatsCountBuffers) {
  const auto before = memory_stats(DeviceType::kCpu).current;
  {
    Buffer b(DeviceType::kCpu, 1 << 20);
    EXPECT_EQ(memory_stats(DeviceType::kCpu).current, before + (1u << 20));
    EXPECT_GE(memory_stats(DeviceType::kCpu).peak, before + (1u << 20));
  }
  EXPECT_EQ(memory_stats(DeviceType::kCpu).current, before);
}

TEST(Rng, SliceDrawsEqualFullDraws) {
  // A rank holding elements [40, 100) of a tensor draws what one process draws there.
  const auto key = rng_key(1234, "h.0.attn.qkv.weight");
  std::vector<float> full(100), part(60);
  fill_normal(full.data(), 100, key, 0, 0.0, 0.02);
  fill_normal(part.data(), 60, key, 40, 0.0, 0.02);
  for (int i = 0; i < 60; ++i) EXPECT_EQ(part[i], full[40 + i]);
}

TEST(Rng, NormalMomentsAndKeysDiffer) {
  const int n = 200000;
  std::vector<double> x(n);
  fill_normal(x.data(), n, rng_key(7, "a"), 0, 1.0, 2.0);
  double mean = 0, var = 0;
  for (double v : x) mean += v;
  mean /= n;
  for (double v : x) var += (v - mean) * (v - mean);
  var /= n;
  EXPECT_NEAR(mean, 1.0, 0.02);       // 4 sigma of the mean's standard error (2/sqrt(n) = 0.0045)
  EXPECT_NEAR(var, 4.0, 0.06);        // ~4 sigma of the variance's standard error
  EXPECT_NE(rng_key(7, "a"), rng_key(7, "b"));
  EXPECT_NE(rng_key(7, "a"), rng_key(8, "a"));
}
