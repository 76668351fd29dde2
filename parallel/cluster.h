// The hardware a layout runs on, as the cost model (parallel/comm_cost.h,
// model/step_cost.h) and the planner (launch/plan) see it: one kind of device,
// `devices_per_node` of them per node, two kinds of link. Pure data: it is
// read from and written to a cluster file by launch/plan/cluster_file.h and
// measured on this machine by `plan --calibrate` (launch/plan/calibrate.h).
//
// Every figure is per device, in SI units (FLOP/s, bytes, bytes/s, seconds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace parallel {

// A collective's bus bandwidth measured at one message size: `bytes` is the
// whole buffer's (the tensor all-reduced, gathered or scattered).
struct BandwidthAtSize {
  double bytes = 0;
  double bytes_per_second = 0;
  bool operator==(const BandwidthAtSize&) const = default;
};

// A link of the alpha-beta (Hockney) model: sending n bytes to a neighbour
// takes latency + n / bandwidth. `bandwidth` is what one device sends (while
// receiving as much) along a ring of such links: NCCL's bus bandwidth
// ("busbw") of a large all-reduce, or an MPI ping-pong's.
struct Link {
  double latency_seconds = 0;
  double bandwidth_bytes_per_second = 0;
  // Optional: the bus bandwidths of an all-gather and of a reduce-scatter of
  // a ZeRO unit's size (`plan --calibrate` times them at the model's block
  // size), which on a CPU node differ from a large all-reduce's by up to 4x
  // either way (examples/benchmarks/RESULTS.md); 0 = bandwidth_bytes_per_second.
  double all_gather_bytes_per_second = 0;
  double reduce_scatter_bytes_per_second = 0;
  // Optional: each collective's bus bandwidth by message size (`plan
  // --calibrate` times them from 64 KiB to 16 MiB), sorted by size. A
  // message between two sizes runs at their interpolation in log-log, one
  // outside them at the nearest end's; where a curve is given it takes the
  // place of the single figures above for that collective (on this
  // project's CPU VM the MPI collectives ran 0.7-4 GB/s by kind and size:
  // examples/benchmarks/RESULTS.md).
  std::vector<BandwidthAtSize> all_reduce_by_size, all_gather_by_size, reduce_scatter_by_size;
};

// The achieved fraction of peak_flops of one matrix product shape, measured:
// D (m x n) = A (m x k) B (k x n), 2 m n k FLOPs. A linear layer of `in`
// inputs and `out` outputs over N tokens runs three: forward (N, out, in),
// input gradient (N, in, out) and weight gradient (out, in, N).
struct GemmRate {
  std::int64_t m = 0, n = 0, k = 0;
  double efficiency = 0;
};

struct Cluster {
  std::string name;
  engine::DeviceType device = engine::DeviceType::kCuda;  // which backend the engine runs there
  int devices_per_node = 1;
  double peak_flops = 0;        // dense matmul peak of one device in the run's precision (MFU's denominator)
  double memory_bytes = 0;      // usable memory of one device
  double gemm_efficiency = 0;   // achieved fraction of peak_flops on the large matmuls of training
  // Optional: efficiencies measured shape by shape (`plan --calibrate` at a
  // model's own shapes); a product near one of them (model/step_cost.h's
  // gemm_efficiency_at) runs at its rate, any other at gemm_efficiency.
  std::vector<GemmRate> gemm_rates;
  double memory_bandwidth = 0;  // bytes/s one device moves through its memory (memory-bound ops)
  double op_overhead_seconds = 0;  // fixed cost of one op (kernel launch, thread fork/join)
  Link intra_node;              // between devices of one node
  Link inter_node;              // between nodes, per device
  double storage_write_bandwidth = 0;  // bytes/s a node writes checkpoints at (0 = unknown)
  // Optional: how many times faster the transformer blocks' linear layers run
  // with E4M3 operands (--precision fp8) than at their bf16 rate, measured:
  // the GEMMs' ratio on fp8_gemm_bench's summary line (its "(1.6x)", casts
  // apart, since the planner counts those itself); 0 = not measured, and
  // the planner then runs them at the bf16 rate (plus the casts, which it
  // always counts: model/step_cost.h). FP8 tensor cores peak at 2x bf16's.
  double fp8_gemm_speedup = 0;
};

}  // namespace parallel
