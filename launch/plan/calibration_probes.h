// The measurements behind `plan --calibrate` (launch/plan/calibrate.h), each one
// figure of parallel::Cluster taken through the engine's own code paths
// (engine::ops, parallel::Communicator), so the planner is calibrated on
// what training runs, not on a vendor benchmark.
//
// The per-rank probes (matmul, memory, op overhead, storage) run on one rank
// and know nothing of the others: calibrate.cpp starts them on every rank of
// a node at once, because training keeps every device of a node busy at once
// and shared resources (cores, memory channels, caches, disks) are measured
// under that load. The link probe is collective.
#pragma once

#include "parallel/cluster.h"

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "launch/hardware/cpu_peak.h"

namespace launch {

// ---- compute --------------------------------------------------------------------

// The linear layers of one GPT block (Radford et al. 2019; the engine's
// model/): qkv C->3C, attention projection C->C, MLP C->4C and 4C->C, each
// run forward and backward (dinp and dweight, 3x the forward FLOPs, as MFU
// counts them; ARCHITECTURE.md "Numbers and conventions") on `tokens` token positions.
struct MatmulShapes {
  std::int64_t channels = 512;  // C
  std::int64_t tokens = 2048;   // B*T
  std::string describe() const;  // "the 4 linear layers of a GPT block with C=512 on 2048 tokens (...)"
};
// The shapes calibrate uses on `device`: a small GPT of what trains there.
MatmulShapes default_matmul_shapes(engine::DeviceType device);

struct MatmulProbe {
  double flops = 0;    // achieved FLOP/s of this rank
  double seconds = 0;  // measured time
  int layers_run = 0;  // forward + backward of one layer counts one
};
// Cycles through the block's layers (fp32 on the CPU, bf16 with fp32
// accumulation on CUDA) for about `seconds`, and at least once through all
// four; the first layer is run once untimed first (thread pools, page faults).
MatmulProbe probe_matmul(engine::DeviceType device, const MatmulShapes& shapes, double seconds);

// Each product of the block's linear layers timed alone (parallel::GemmRate
// shapes): for a layer of `in` inputs and `out` outputs on N tokens, forward
// (N, out, in), input gradient (N, in, out) and weight gradient (out, in,
// N), through ops::matmul_forward, matmul_backward (input gradient only) and
// matmul_weight_grad. Each repeated for about seconds / (its count), at
// least 3 times after an untimed run; the median.
struct GemmShapeProbe {
  std::int64_t m = 0, n = 0, k = 0;
  double flops = 0;  // achieved FLOP/s of this rank
};
std::vector<GemmShapeProbe> probe_gemm_shapes(engine::DeviceType device, const MatmulShapes& shapes, double seconds);

// ---- memory ---------------------------------------------------------------------

// STREAM's "add" kernel (McCalpin 1995) as the engine runs it: ops::add
// (c = a + b) over f32 arrays of `elements` each, counting 12 bytes per
// element (two reads, one write; STREAM's convention, which does not count a
// write-allocate). Repeated for about `seconds`; the median repetition.
struct MemoryProbe {
  double bytes_per_second = 0;
  int repetitions = 0;
};
MemoryProbe probe_memory_bandwidth(engine::DeviceType device, std::int64_t elements, double seconds);

// The largest cache of this machine in bytes (sysfs, else sysconf), 0 if unknown.
std::size_t largest_cache_bytes();

// The fixed cost of one op: the intercept of an op's time against its size,
// from ops::add at two sizes just above the CPU backend's threshold for
// OpenMP (so the fork/join is in it when a rank runs several threads), each
// the median over batches of back-to-back ops (one device synchronisation per
// batch on CUDA: launch throughput, as a training step issues its kernels).
// Never below the median time of a 1024-element add.
struct OpOverheadProbe {
  double seconds = 0;
  double tiny_seconds = 0;  // the 1024-element add
};
OpOverheadProbe probe_op_overhead(engine::DeviceType device, double seconds);

// ---- links (collective) ---------------------------------------------------------

// barrier_sleeping (launch/hardware/cpu_peak.h) keeps waiting ranks off the cores
// that others are measuring on.

// One kind of link, measured over two groups (collective over `world`; every
// rank passes its own groups, MPI_COMM_NULL where it has none):
//  - `pair`: this rank and one partner (size 2; size 1 or null: sits out):
//    a ping-pong through parallel::Communicator::send/recv, of 8 bytes (the
//    latency: half the round trip) and of `large_bytes` (the one-way
//    bandwidth). Every pair at once.
//  - `group`: an all-reduce of `large_bytes` f32 over the group (size 1 or
//    null: sits out), its bus bandwidth 2 (n-1)/n x bytes / time (nccl-tests'
//    "busbw", Patarasuk & Yuan 2009): what one rank sends while receiving as
//    much along a ring, parallel::Link's bandwidth. Every group at once.
// Repetition counts come from a pilot and are agreed over `world`, so
// partners always post matching messages. Values are means over the ranks
// that measured them; 0 where no rank did.
struct LinkProbe {
  double latency_seconds = 0;
  double pingpong_bytes_per_second = 0;
  double allreduce_busbw = 0;
  // (n-1)/n x bytes / time of an all-gather and of a reduce-scatter of
  // unit_bytes over the group (0 without unit_bytes or a group).
  double allgather_busbw = 0, reduce_scatter_busbw = 0;
  // Each collective's bus bandwidth at each of curve_sizes (bytes of the
  // whole buffer), as parallel::Link's curves, the all-reduce's ending with
  // the large all-reduce; empty without a group.
  std::vector<parallel::BandwidthAtSize> all_reduce_by_size, all_gather_by_size, reduce_scatter_by_size;
  int pairs = 0;         // pairs that ping-ponged
  int group_size = 0;    // largest all-reduce group
  int groups = 0;        // all-reduce groups of size >= 2
  std::string backend;   // the communicator used ("mpi", "nccl")
};
// unit_bytes > 0: also an all-gather and a reduce-scatter of that many
// bytes (a ZeRO unit's), each repeated for about seconds / 4.
// curve_sizes: also every collective at each of these sizes (bytes, each
// rounded down to a multiple of 4 x the group's size), together for about
// `seconds`: the link's bandwidth by message size.
LinkProbe probe_link(MPI_Comm world, MPI_Comm pair, MPI_Comm group, engine::DeviceType device,
                     std::size_t large_bytes, double seconds, std::size_t unit_bytes = 0,
                     const std::vector<std::size_t>& curve_sizes = {});
// The sizes `plan --calibrate` times the collectives at: 64 KiB to 16 MiB,
// by 4x (a ZeRO unit of a small model to a large model's bucket).
std::vector<std::size_t> default_curve_sizes();

// ---- storage --------------------------------------------------------------------

// Writes `bytes` of incompressible data to a new file in `dir` in 8 MiB
// writes, fsyncs and closes it, then removes it: the seconds from open to the
// end of fsync (a checkpoint's write, launch/files/atomic_file.h).
double probe_storage_write_seconds(const std::string& dir, std::size_t bytes, int rank);

}  // namespace launch
