// The communication side of the cost model: how long a collective or a
// point-to-point message of a layout takes, by the alpha-beta (Hockney)
// model over the link its group crosses. Used by the planner
// (launch/plan/planner.h); model/step_cost.h is the compute side.
//
// Collectives are timed as the bandwidth-optimal ring algorithms whose
// volume Communicator::bytes_sent counts (parallel/communicator.h; Patarasuk
// & Yuan 2009, Thakur et al. 2005), for n ranks and B bytes of the full
// tensor:
//   all_reduce       2 (n-1) alpha + 2 (n-1)/n B / bw
//   reduce_scatter     (n-1) alpha +   (n-1)/n B / bw
//   all_gather         (n-1) alpha +   (n-1)/n B / bw
//   send                     alpha +           B / bw
// where bw is the link's ring (bus) bandwidth (parallel/cluster.h), or for
// an all-gather and a reduce-scatter the link's own figure for that
// collective where it has one, or, where the link has a curve by message
// size for the collective, the curve's bandwidth at B (bus_bandwidth). A group
// whose ring leaves a node runs at the inter-node link's speed (its slowest
// hop); NCCL's trees and NVLS cut the latency term at scale, which this
// model ignores (it matters only for small messages).
#pragma once

#include "parallel/cluster.h"
#include "parallel/process_grid.h"

namespace parallel {

enum class Collective { kAllReduce, kAllGather, kReduceScatter };
// The bus bandwidth `link` gives a `collective` of `bytes` (the whole
// buffer): its curve by size where it has one (log-log interpolation
// between the two sizes around `bytes`, the nearest end's outside them),
// else its single figure for the collective, else its bandwidth.
double bus_bandwidth(const Link& link, Collective collective, double bytes);
// The curve alone: bandwidth at `bytes` (the curve must be non-empty,
// sorted by strictly growing size, every figure positive).
double bandwidth_at_size(const std::vector<BandwidthAtSize>& curve, double bytes);

double all_reduce_seconds(double bytes, int ranks, const Link& link);
double reduce_scatter_seconds(double bytes, int ranks, const Link& link);
double all_gather_seconds(double bytes, int ranks, const Link& link);
double send_seconds(double bytes, const Link& link);

// The link the groups of `axis` cross in a tp x pp x dp grid laid out in
// Megatron-LM's rank order (tensor parallel fastest, then data, then
// pipeline: parallel/process_grid.h) on nodes of cluster.devices_per_node
// consecutive ranks: the intra-node link when no group leaves its node, else
// the inter-node link with the bandwidth of as many NICs as the group has
// members on its sparsest node. The cluster's inter-node bandwidth is per
// device (one NIC per GPU, as on a DGX); NCCL spreads a ring's channels over
// the NICs of the GPUs it uses on a node, so a ring with m members on each
// node crosses between nodes m times as fast, up to the intra-node bus
// bandwidth (NVIDIA measures 192 GB/s all-reduce bus bandwidth across DGX
// A100 nodes with 8 HDR NICs of 24 GB/s each: github.com/NVIDIA/nccl/issues/812).
// Pipeline groups exchange point-to-point messages, each through its own
// device's NIC: their link is never widened.
Link axis_link(const Cluster& cluster, Axis axis, int tp, int pp, int dp);

}  // namespace parallel
