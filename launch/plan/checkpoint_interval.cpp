#include "launch/plan/checkpoint_interval.h"

#include <algorithm>
#include <cmath>

#include "engine/check.h"

namespace launch {
namespace {

constexpr double kSecondsPerDay = 86400;

void check_positive(double v, const char* what) {
  ENGINE_CHECK(std::isfinite(v) && v > 0, what, " must be a positive number of seconds, got ", v);
}

}  // namespace

double job_mtbf_seconds(double failures_per_device_day, std::int64_t devices) {
  ENGINE_CHECK(std::isfinite(failures_per_device_day) && failures_per_device_day > 0,
               "failures per device-day must be positive, got ", failures_per_device_day,
               " (with no failures there is no interval to choose)");
  ENGINE_CHECK(devices >= 1, "the device count must be at least 1, got ", devices);
  return kSecondsPerDay / (failures_per_device_day * static_cast<double>(devices));
}

double young_interval_seconds(double save_seconds, double mtbf_seconds) {
  check_positive(save_seconds, "the checkpoint save time");
  check_positive(mtbf_seconds, "the job's MTBF");
  return std::sqrt(2 * save_seconds * mtbf_seconds);
}

double daly_interval_seconds(double save_seconds, double mtbf_seconds) {
  check_positive(save_seconds, "the checkpoint save time");
  check_positive(mtbf_seconds, "the job's MTBF");
  // Daly 2006: the series is derived for delta < 2M; beyond it a save
  // takes longer than the expected time to the next failure, and the best
  // one can do is checkpoint once per MTBF.
  if (save_seconds >= 2 * mtbf_seconds) return mtbf_seconds;
  const double x = save_seconds / (2 * mtbf_seconds);
  return std::sqrt(2 * save_seconds * mtbf_seconds) * (1 + std::sqrt(x) / 3 + x / 9) - save_seconds;
}

double expected_goodput(double interval_seconds, double save_seconds, double restart_seconds, double mtbf_seconds) {
  check_positive(interval_seconds, "the checkpoint interval");
  check_positive(mtbf_seconds, "the job's MTBF");
  ENGINE_CHECK(std::isfinite(save_seconds) && save_seconds >= 0,
               "the checkpoint save time must be a non-negative number of seconds, got ", save_seconds);
  ENGINE_CHECK(std::isfinite(restart_seconds) && restart_seconds >= 0,
               "the restart time must be a non-negative number of seconds, got ", restart_seconds);
  // Useful work per unit of failure-free time (saves stall training) times
  // the share of time not lost to failures (restart plus half an interval
  // and half a save of lost work, once per MTBF); examples/benchmarks/goodput.py.
  const double kept = std::max(0.0, 1 - (restart_seconds + (interval_seconds + save_seconds) / 2) / mtbf_seconds);
  return kept / (1 + save_seconds / interval_seconds);
}

std::int64_t interval_in_steps(double interval_seconds, double step_seconds) {
  check_positive(interval_seconds, "the checkpoint interval");
  check_positive(step_seconds, "the step time");
  const double steps = interval_seconds / step_seconds;
  constexpr double kMost = 1e15;  // far beyond any run, and exact in a double
  return static_cast<std::int64_t>(std::clamp(std::round(steps), 1.0, kMost));
}

CheckpointPlan plan_checkpoints(double failures_per_device_day, std::int64_t devices, double save_seconds,
                                double restart_seconds) {
  CheckpointPlan plan;
  plan.mtbf_seconds = job_mtbf_seconds(failures_per_device_day, devices);
  plan.interval_seconds = daly_interval_seconds(save_seconds, plan.mtbf_seconds);
  plan.goodput = expected_goodput(plan.interval_seconds, save_seconds, restart_seconds, plan.mtbf_seconds);
  return plan;
}

}  // namespace launch
