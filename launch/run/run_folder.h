// What a run leaves on disk besides its checkpoints' contents, and the rule
// that keeps two runs from mixing their outputs.
//
// A run folder (--run-dir DIR) holds:
//   config.json      the resolved configuration (train --config accepts it)
//   metrics.jsonl    one JSON object per step and event (unless --log-file)
//   train.log        a copy of the text log rank 0 prints
//   summary.json     what the run did, written when it ends
//   checkpoints/     step_NNNNNNNN/ and `latest` (unless --checkpoint-dir)
//   run.lock         held by the job using the folder (launch/run/run_lock.h)
//
// A new run refuses to start where another run's checkpoints or metrics are
// (a second run would append to the old JSONL and its `latest` could name a
// checkpoint of an incompatible run): --resume continues that run,
// --overwrite deletes its outputs first.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launch/run/train_config.h"

namespace launch {

struct RunPaths {
  std::string config;   // "" where there is no run folder
  std::string text_log;
  std::string summary;
};
RunPaths run_paths(const TrainConfig& config);

// The outputs of an earlier run this one would mix with, one line each
// ("checkpoint step_00000500 in 'runs/a/checkpoints'"); empty when none.
std::vector<std::string> previous_run_outputs(const TrainConfig& config);

// Throws (naming what was found and the flags that allow it) when a fresh
// start would mix with another run's outputs. Every rank runs it with the
// other input checks, before anything is written.
void refuse_to_mix_runs(const TrainConfig& config);

// Throws, naming --log-file, when that file exists, is not empty and holds
// anything but this engine's metrics records (JSON objects with an "event",
// or a "step" with its "loss"): --overwrite would delete it, --resume
// rewrite it, a fresh start append to it. Every rank runs it with the other
// input checks.
void refuse_foreign_log_file(const TrainConfig& config);

// --overwrite: deletes the outputs previous_run_outputs() lists and the run
// folder's config, text log and summary (a --log-file that is not metrics is
// refused, not deleted). Rank 0 only, before it opens any.
void remove_previous_run(const TrainConfig& config);

// Writes `text` to `path` under a temporary name, then renames it.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace launch
