// `train --layout auto` without --cluster: the job measures its own machine
// once (the measurements of `plan --calibrate`, at the model's width) and
// keeps the cluster file in the engine's cache, so later jobs on the same
// hosts plan at once. The "a calibration it runs and caches".
//
// The cache file is
//   ${ENGINE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpt-engine}/cluster-<key hash>.json
// keyed by what the measurement depends on: the job's hosts and ranks on
// each, the device kind (and GPUs visible), the OpenMP threads per rank and
// the matmul width. The key's
// hash also ends the cluster's name and is compared on reading, so a file
// renamed or edited into another key is measured again, as is one that does
// not read as a cluster file (launch/plan/cluster_file.h checks every figure).
// Rank 0 reads it and every rank parses the same text (the cache folder may
// be on rank 0's host only). A cache that
// cannot be written is reported, not fatal: the job plans with what it measured.
// Delete the file (or give --cluster) to measure again.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "parallel/cluster.h"

namespace launch {

struct CachedCalibration {
  parallel::Cluster cluster;
  std::string path;      // the cache file ("" when there is no cache folder)
  bool measured = false; // measured by this call, else read from the cache
  std::string note;      // one line for the start-up log: where the figures came from
};

// The key of a calibration: what `cached_calibration` measures depends on.
// `hosts`: each rank's host name, in rank order; `gpus` and `threads`: the
// GPUs visible and OpenMP threads per rank over the ranks ("8", or "4-8").
std::string calibration_cache_key(const std::vector<std::string>& hosts, engine::DeviceType device,
                                  const std::string& gpus, const std::string& threads, std::int64_t matmul_channels);

// Collective over `world` (every rank calls it with the same arguments).
// `device`: the run's (none: CUDA when a GPU is visible, as calibrate()
// decides). `seconds`: each measurement's budget when one is needed. The
// same result on every rank; a failure throws engine::Error on every rank.
CachedCalibration cached_calibration(MPI_Comm world, std::int64_t matmul_channels,
                                     std::optional<engine::DeviceType> device, double seconds);

}  // namespace launch
