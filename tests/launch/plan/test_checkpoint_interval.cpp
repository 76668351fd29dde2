// Checkpoint intervals (launch/plan/checkpoint_interval.h): Young's and Daly's
// optimum, the first-order goodput, and the step interval. The expected
// values were computed with examples/benchmarks/goodput.py's daly_interval
// and predicted_goodput, so the two implementations cannot drift apart.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/check.h"
#include "launch/plan/checkpoint_interval.h"

using namespace launch;

namespace {
constexpr double kDay = 86400;
constexpr double kTol = 1e-9;  // relative
#define EXPECT_REL(a, b) EXPECT_NEAR((a), (b), kTol * std::abs(b))
}  // namespace

TEST(CheckpointInterval, JobMtbf) {
  EXPECT_DOUBLE_EQ(job_mtbf_seconds(1, 1), kDay);
  EXPECT_DOUBLE_EQ(job_mtbf_seconds(0.5, 4), kDay / 2);
  // One failure per 1000 device-days on 1024 GPUs: a failure every 23.4 hours.
  EXPECT_DOUBLE_EQ(job_mtbf_seconds(1e-3, 1024), 84375);
}

TEST(CheckpointInterval, DalyMatchesGoodputPy) {
  // delta = 60 s, M = one day.
  EXPECT_REL(young_interval_seconds(60, kDay), 3219.937887599697);
  EXPECT_REL(daly_interval_seconds(60, kDay), 3180.0621135984475);
  EXPECT_REL(expected_goodput(3180.0621135984475, 60, 300, kDay), 0.9596707762158275);
  EXPECT_REL(daly_interval_seconds(1, kDay), 415.02579444165525);
  EXPECT_REL(expected_goodput(415.02579444165525, 1, 300, kDay), 0.9917306571940238);
  EXPECT_REL(daly_interval_seconds(600, kDay), 9786.266020092877);
  EXPECT_REL(expected_goodput(9786.266020092877, 600, 300, kDay), 0.8823262838113534);

  const CheckpointPlan plan = plan_checkpoints(1e-3, 1024, 120, 600);
  EXPECT_DOUBLE_EQ(plan.mtbf_seconds, 84375);
  EXPECT_REL(plan.interval_seconds, 4420.355555555556);
  EXPECT_REL(plan.goodput, 0.9404524852733162);
}

TEST(CheckpointInterval, Limits) {
  // A save far shorter than the MTBF: Daly tends to Young (relative terms vanish).
  const double young = young_interval_seconds(1e-3, 1e9);
  EXPECT_NEAR(daly_interval_seconds(1e-3, 1e9) / young, 1.0, 1e-5);
  // A save of twice the MTBF or more: checkpoint once per MTBF.
  EXPECT_DOUBLE_EQ(daly_interval_seconds(200, 90), 90);
  EXPECT_DOUBLE_EQ(daly_interval_seconds(180, 90), 90);
  // Continuous just below the boundary: the series at delta = 2M is sqrt(4M^2)(1 + 1/3 + 1/9) - 2M = 8M/9.
  EXPECT_NEAR(daly_interval_seconds(180 - 1e-9, 90), 80, 1e-6);
  // Daly's tau is the optimum of the first-order goodput to within a fraction of a percent.
  const double tau = daly_interval_seconds(60, kDay);
  const double best = expected_goodput(tau, 60, 300, kDay);
  for (const double factor : {0.5, 0.8, 1.25, 2.0}) EXPECT_LT(expected_goodput(tau * factor, 60, 300, kDay), best);
  // No failures in sight and free saves: everything trains.
  EXPECT_NEAR(expected_goodput(3600, 0, 0, 1e15), 1.0, 1e-9);
  // Failures faster than restarts: nothing trains (not a negative goodput).
  EXPECT_EQ(expected_goodput(10, 1, 100, 50), 0);
  // Goodput falls as devices are added at the same per-device failure rate.
  EXPECT_GT(plan_checkpoints(1e-3, 64, 60, 300).goodput, plan_checkpoints(1e-3, 4096, 60, 300).goodput);
}

TEST(CheckpointInterval, Steps) {
  EXPECT_EQ(interval_in_steps(3180.06, 1.5), 2120);
  EXPECT_EQ(interval_in_steps(10, 4), 3);  // 2.5 rounds away from zero
  EXPECT_EQ(interval_in_steps(0.2, 5), 1);  // at least one step
  EXPECT_EQ(interval_in_steps(1e300, 1e-300), static_cast<std::int64_t>(1e15));
}

TEST(CheckpointInterval, RefusesBadInput) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_THROW(job_mtbf_seconds(0, 8), engine::Error);
  EXPECT_THROW(job_mtbf_seconds(-1, 8), engine::Error);
  EXPECT_THROW(job_mtbf_seconds(nan, 8), engine::Error);
  EXPECT_THROW(job_mtbf_seconds(1, 0), engine::Error);
  EXPECT_THROW(daly_interval_seconds(0, kDay), engine::Error);
  EXPECT_THROW(daly_interval_seconds(-5, kDay), engine::Error);
  EXPECT_THROW(daly_interval_seconds(60, 0), engine::Error);
  EXPECT_THROW(daly_interval_seconds(60, inf), engine::Error);
  EXPECT_THROW(young_interval_seconds(nan, kDay), engine::Error);
  EXPECT_THROW(expected_goodput(0, 60, 300, kDay), engine::Error);
  EXPECT_THROW(expected_goodput(100, -1, 300, kDay), engine::Error);
  EXPECT_THROW(expected_goodput(100, 60, -1, kDay), engine::Error);
  EXPECT_THROW(interval_in_steps(100, 0), engine::Error);
  EXPECT_THROW(interval_in_steps(-1, 1), engine::Error);
  EXPECT_THROW(plan_checkpoints(1e-3, 8, 0, 300), engine::Error);
  try {
    job_mtbf_seconds(1, -3);
    FAIL();
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("got -3"), std::string::npos) << e.what();
  }
}
