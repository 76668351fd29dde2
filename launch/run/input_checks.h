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

// --resume latest (or DIR) with nothing to resume from, or --resume auto over a
// `latest` with no intact checkpoint: refused (bad input) before the job
// writes anything, so that a fresh start in the folder is not then refused as
// another run's (issue 36, item 10). Damage found only by loading a
// checkpoint is the trainer's to handle (Trainer::resume).
void check_resume_source(const TrainConfig& config);

}  // namespace launch
