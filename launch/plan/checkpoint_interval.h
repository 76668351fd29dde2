// How often to checkpoint, and what fraction of the wall time then trains.
//
// A job on `devices` devices, each failing `failures_per_device_day` times a
// day on average (independently, exponentially distributed), fails every
//
//     M = 86400 / (failures_per_device_day x devices)   seconds (its MTBF).
//
// Saving a checkpoint costs delta seconds of stalled training; a failure
// costs the restart R plus the work since the last checkpoint. Young (1974,
// "A first order approximation to the optimum checkpoint interval", CACM
// 17(9)) put the best interval of work between checkpoints at sqrt(2 delta M);
// Daly (2006, "A higher order estimate of the optimum checkpoint interval
// for restart dumps", FGCS 22(3)) refined it to
//
//     tau = sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta   for delta < 2M,
//     tau = M                                                                    otherwise.
//
// The expected goodput (training time over wall time) at interval tau, to
// first order (a save every tau seconds of work; each failure costs the
// restart and on average half an interval of work plus half a save):
//
//     goodput(tau) = max(0, 1 - (R + (tau + delta) / 2) / M) / (1 + delta / tau)
//
// the same model as examples/benchmarks/goodput.py, which checks it against
// real runs with injected failures; keep the two in step.
#pragma once

#include <cstdint>

namespace launch {

// M in seconds. Throws engine::Error unless the rate is positive and finite
// and devices >= 1.
double job_mtbf_seconds(double failures_per_device_day, std::int64_t devices);

// Young's first-order interval sqrt(2 delta M), seconds of work between saves.
double young_interval_seconds(double save_seconds, double mtbf_seconds);

// Daly's higher-order interval (above), seconds of work between saves.
double daly_interval_seconds(double save_seconds, double mtbf_seconds);

// The first-order expected goodput in [0, 1) of checkpointing every
// `interval_seconds` of work (above).
double expected_goodput(double interval_seconds, double save_seconds, double restart_seconds, double mtbf_seconds);

// `interval_seconds` as a whole number of steps of `step_seconds` (the
// trainer's --checkpoint-interval): the nearest, at least 1 (goodput is flat
// near the optimum, so rounding costs nothing measurable).
std::int64_t interval_in_steps(double interval_seconds, double step_seconds);

// All of it for one job.
struct CheckpointPlan {
  double mtbf_seconds = 0;      // M
  double interval_seconds = 0;  // Daly's tau
  double goodput = 0;           // expected at tau
};
CheckpointPlan plan_checkpoints(double failures_per_device_day, std::int64_t devices, double save_seconds,
                                double restart_seconds);

}  // namespace launch
