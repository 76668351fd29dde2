// `train --layout auto`: the planner (launch/plan/planner.h) chooses the
// parallel layout of the job (Alpa's promise, Zheng et al. 2022, with the
// engine's own cost model instead of a search over the graph): tp, pp, dp,
// micro-batch, ZeRO stage, recomputation, pipeline schedule and sequence
// parallelism for the world size, the global batch (--batch-tokens) and the
// cluster file (--cluster, from `plan --calibrate` or examples/scaling/
// clusters/), or without one the job's own machine, measured once and cached
// (TrainConfig::may_calibrate, launch/plan/cached_calibration.h). Any of these given by hand is kept and the rest chosen around
// it. The choice is the planner's fastest layout that fits in memory; when
// none fits the refusal names the nearest ones and what they would need.
#pragma once

#include <set>
#include <string>

#include "launch/run/train_config.h"

namespace launch {

// The layout flags `--layout auto` may choose (their command-line names).
inline const char* const kAutoLayoutFlags[] = {"--tp", "--pp", "--dp", "--micro-batch", "--zero", "--recompute",
                                              "--pipeline-schedule", "--sequence-parallel"};

// Sets config's layout fields from the plan and records the prediction in
// config.auto_layout; `given` holds the flags of kAutoLayoutFlags the user
// set. Needs config.model, seq_len, batch_tokens and world_size resolved.
// Throws engine::Error (one line) when the request cannot be planned or
// nothing fits.
void choose_layout(TrainConfig& config, const std::set<std::string>& given);

}  // namespace launch
