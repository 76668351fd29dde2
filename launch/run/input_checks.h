// The start-up checks of a run's inputs and outputs, made before any rank
// communicates or allocates.
#pragma once

#include "launch/run/train_config.h"

namespace launch {

// Checks what can be checked without communicating: the data shards open and
// hold in-vocabulary headers, an --init-from file has the configured shape,
// every output folder (run folder, checkpoints, metrics, model file) exists
// (created if need be) and takes writes, and no other run's outputs are in
// the way (launch/run/run_folder.h).
// Every rank runs it before the job's first collective, so a bad input is
// reported once and every rank exits (train_main.cpp).
void check_inputs(const TrainConfig& config);

}  // namespace launch
