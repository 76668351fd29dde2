// `plan --calibrate`: measures the machine an mpirun job runs on, as the
// cost model and the planner see hardware (parallel/cluster.h), and writes it
// as a cluster file (launch/plan/cluster_file.h) whose "sources" say how each
// figure was taken, where, when and at what shapes.
//
// Every figure is measured the way training uses the machine: every rank of
// a node busy at once (ranks that finish early sleep rather than spin), the
// engine's own ops and communicators, its training dtypes. Per device:
//
//   devices_per_node   the job's ranks per node (MPI_COMM_TYPE_SHARED)
//   device             cuda when the engine is built with CUDA and a GPU is
//                      visible to every rank, else cpu
//   peak_flops         MFU's denominator (launch/run/peak_flops.h): the GPU's
//                      dense bf16 peak from the device table, or the CPU's
//                      measured and cached peak over the node's ranks
//                      (launch/hardware/cpu_peak.h); options.peak_flops overrides
//   memory_bytes       the GPU's memory, or the node's memory (the cgroup's
//                      limit if lower) over its ranks
//   gemm_efficiency    achieved matmul FLOP/s at a GPT block's shapes
//                      (launch/plan/calibration_probes.h) over peak_flops, in (0, 1]:
//                      the planned model's shapes where given (matmul_channels,
//                      matmul_tokens; `plan --calibrate --model`), because the
//                      rate moves with the shapes: on one H100 GPT-2's products
//                      ran a quarter below a large square's, on this project's CPU
//                      C 128 ran 7.5% below C 512 (RESULTS.md)
//   gemm_rates         each of those twelve products (4 layers x forward,
//                      input gradient, weight gradient; products of one shape,
//                      such as the square projection's forward and input
//                      gradient, are one entry at their mean time) timed alone: its own
//                      rate, which the planner takes for products of (about)
//                      that shape (model/step_cost.h gemm_efficiency_at); on
//                      this project's CPU GPT-2's products ran 60-160 GFLOP/s
//                      by shape (RESULTS.md)
//   memory_bandwidth   STREAM "add" through ops::add on arrays well beyond
//                      the caches
//   op_overhead        the intercept of a small op's time against its size
//   intra_node         8-byte ping-pong latency between two ranks of a node;
//                      bandwidth: the bus bandwidth of a large all-reduce
//                      over the node's ranks (one-way ping-pong bandwidth in
//                      the sources beside it); all_gather and reduce_scatter:
//                      their bus bandwidths at a ZeRO unit's size (one
//                      block's f32 parameters at the matmul probe's width)
//   inter_node         the same between ranks of different nodes (each rank
//                      with its counterpart on the other nodes, all at
//                      once); copied from intra_node on one node, as the
//                      sources then say
//   storage_write      a checkpoint-sized write with fsync into
//                      options.storage_dir by every rank of a node at once,
//                      per node; 0 (unknown) without a folder
//
// With one rank there is no link to measure: a copy within the device stands
// in (memory bandwidth, op overhead), as the sources say.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>

#include "engine/tensor.h"
#include "launch/hardware/cpu_peak.h"
#include "parallel/cluster.h"

namespace launch {

struct CalibrateOptions {
  double seconds = 1.0;                       // budget of each measurement (the whole: about 8x this)
  std::string output_path;                    // the cluster file rank 0 writes; "" = none
  std::string storage_dir;                    // where to time a checkpoint-like write; "" = not measured
  std::size_t storage_bytes = std::size_t{256} << 20;  // written per node, split over its ranks
  std::string name;                           // the cluster's name; "" = "<host>-calibrated"
  double peak_flops = 0;                      // FLOP/s per device; 0 = the engine's (GPU table, CPU cache)
  CpuPeakOptions cpu_peak;                    // where the CPU's peak is cached
  std::optional<engine::DeviceType> device;   // none: cuda where built with it and a GPU is visible, else cpu
  // The matmul probe's shapes: 0 = default_matmul_shapes(device)'s.
  std::int64_t matmul_channels = 0;           // C of the block
  std::int64_t matmul_tokens = 0;             // token positions (micro-batch x sequence)
  std::ostream* log = nullptr;                // rank 0 writes one line per measurement here
};

struct Calibration {
  parallel::Cluster cluster;
  std::map<std::string, std::string> sources;  // as the cluster file's "sources"
};

// Collective over `world`; the same result on every rank. Rank 0 writes
// options.output_path (if given). A failure on any rank throws engine::Error
// on every rank.
Calibration calibrate(MPI_Comm world, const CalibrateOptions& options);
parallel::Cluster calibrate_cluster(MPI_Comm world, const CalibrateOptions& options);

}  // namespace launch
