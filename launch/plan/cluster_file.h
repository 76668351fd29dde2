// Cluster files: the hardware description of parallel/cluster.h as JSON in
// the units people quote (data sheets, nccl-tests, STREAM), so a file can be
// written by hand from published figures (examples/scaling/clusters/) or by
// `plan --calibrate` (launch/plan/calibrate.h), and read by the planner.
//
//   {
//     "name": "selene-a100-80gb",
//     "device": "cuda",                       // or "cpu": the engine backend that runs there
//     "devices_per_node": 8,                  // integer >= 1
//     "peak_tflops": 312,                     // dense matmul peak of one device, 1e12 FLOP/s
//     "memory_gib": 80,                       // usable memory of one device, 2^30 bytes
//     "gemm_efficiency": 0.8,                 // in (0, 1]: achieved fraction of peak on training's matmuls
//     "memory_bandwidth_gb_per_s": 2039,      // one device's memory bandwidth, 1e9 bytes/s
//     "op_overhead_us": 5,                    // fixed cost of one op, microseconds
//     "intra_node": {"bandwidth_gb_per_s": 230, "latency_us": 10,
//                    "all_gather_gb_per_s": 180, "reduce_scatter_gb_per_s": 170},   // the last two optional
//     "inter_node": {"bandwidth_gb_per_s": 23, "latency_us": 15},
//     "storage_write_gb_per_s": 2,            // optional; 0 or absent = unknown
//     "fp8_gemm_speedup": 1.6,                // optional, in [0, 4]: the blocks' linear layers in FP8 over bf16; 0 or absent = not measured
//     "gemm_rates": [{"m": 8192, "n": 6144, "k": 2048, "efficiency": 0.74}, ...],   // optional
//     "sources": {"peak_tflops": "why this value, and where it was read", ...}   // optional
//   }
//
// "gemm_rates" (parallel::GemmRate): efficiencies measured shape by shape,
// D (m x n) = A (m x k) B (k x n); a product within a factor of 2 of a listed
// shape in every dimension runs at the nearest one's rate, any other at
// gemm_efficiency (model/step_cost.h). `plan --calibrate` writes the shapes of
// the model it is given: one GEMM's rate can be a quarter below another's.
//
// GB = 1e9 bytes (as bandwidths are quoted), GiB = 2^30 bytes (as memory
// is). Every figure is per device; links are parallel::Link's (the bandwidth
// one device sends at while receiving as much, i.e. an all-reduce's bus
// bandwidth, and the latency of one message; optionally an all-gather's and
// a reduce-scatter's bus bandwidth of a ZeRO unit's size, which the planner
// then uses for those collectives).
//
// The file is checked strictly, because a planner's every prediction rests on
// it: a key given twice, an unknown key, a missing required key, a value of
// the wrong JSON type, a non-positive figure, gemm_efficiency or a gemm_rates
// efficiency outside (0, 1], or a gemm_rates dimension that is not a positive
// integer is refused with one line (an engine::Error) naming the file and the
// key. "sources" holds free text per key: its keys must be keys of the file
// ("peak_tflops", "intra_node", or "intra_node.bandwidth_gb_per_s").
#pragma once

#include <map>
#include <string>

#include "parallel/cluster.h"

namespace launch {

struct ClusterFile {
  parallel::Cluster cluster;
  std::map<std::string, std::string> sources;  // key of the file -> why its value is what it is
};

// Reads and checks `path`; throws engine::Error naming the file and the key.
ClusterFile read_cluster_file_and_sources(const std::string& path);
// The same checks on a file's text; `where` names it in messages.
ClusterFile parse_cluster_file(const std::string& text, const std::string& where);
parallel::Cluster read_cluster_file(const std::string& path);

// Writes `cluster` and `sources` to `path` atomically (launch/files/atomic_file.h),
// after the checks a reader makes, each figure as the shortest decimal that
// reads back as exactly the same double. One exists for every figure that
// came from a file or from rounded_for_file (so file -> cluster -> file is
// exact); for other doubles the unit conversion may land an ulp away.
// Throws engine::Error.
void write_cluster_file(const std::string& path, const parallel::Cluster& cluster,
                        const std::map<std::string, std::string>& sources);

// `cluster` with every figure rounded to `digits` significant digits in the
// file's units (a measurement is not known to more): written, the file reads
// 12.34 GB/s rather than 12.338471192, and reads back exactly as returned.
parallel::Cluster rounded_for_file(const parallel::Cluster& cluster, int digits);

// The checks of a file, on a cluster in SI units; `where` starts each
// message ("cluster file 'a.json'"). Throws engine::Error naming the file's key.
void check_cluster(const parallel::Cluster& cluster, const std::string& where);

}  // namespace launch
