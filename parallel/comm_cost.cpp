#include "parallel/comm_cost.h"

#include <algorithm>
#include <cmath>

#include "engine/check.h"

namespace parallel {

namespace {
const std::vector<BandwidthAtSize>& curve_of(const Link& link, Collective collective) {
  switch (collective) {
    case Collective::kAllReduce: return link.all_reduce_by_size;
    case Collective::kAllGather: return link.all_gather_by_size;
    case Collective::kReduceScatter: return link.reduce_scatter_by_size;
  }
  ENGINE_FAIL("unknown collective");
}
double single_figure(const Link& link, Collective collective) {
  if (collective == Collective::kAllGather) return link.all_gather_bytes_per_second;
  if (collective == Collective::kReduceScatter) return link.reduce_scatter_bytes_per_second;
  return 0;
}
}  // namespace

double bandwidth_at_size(const std::vector<BandwidthAtSize>& curve, double bytes) {
  ENGINE_CHECK(!curve.empty(), "bandwidth_at_size: an empty curve");
  if (bytes <= curve.front().bytes) return curve.front().bytes_per_second;
  if (bytes >= curve.back().bytes) return curve.back().bytes_per_second;
  const auto above = std::upper_bound(curve.begin(), curve.end(), bytes,
                                      [](double b, const BandwidthAtSize& p) { return b < p.bytes; });
  const BandwidthAtSize& hi = *above;
  const BandwidthAtSize& lo = *(above - 1);
  // Bandwidth grows with size about as a power of it between measured sizes.
  const double t = std::log(bytes / lo.bytes) / std::log(hi.bytes / lo.bytes);
  return std::exp(std::log(lo.bytes_per_second) + t * (std::log(hi.bytes_per_second) - std::log(lo.bytes_per_second)));
}

double bus_bandwidth(const Link& link, Collective collective, double bytes) {
  const std::vector<BandwidthAtSize>& curve = curve_of(link, collective);
  if (!curve.empty()) return bandwidth_at_size(curve, bytes);
  const double single = single_figure(link, collective);
  if (single > 0) return single;
  ENGINE_CHECK(link.bandwidth_bytes_per_second > 0, "a link needs a positive bandwidth");
  return link.bandwidth_bytes_per_second;
}

double all_reduce_seconds(double bytes, int ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double n = ranks;
  return 2 * (n - 1) * link.latency_seconds + 2 * (n - 1) / n * bytes / bus_bandwidth(link, Collective::kAllReduce, bytes);
}

double reduce_scatter_seconds(double bytes, int ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double n = ranks;
  return (n - 1) * link.latency_seconds + (n - 1) / n * bytes / bus_bandwidth(link, Collective::kReduceScatter, bytes);
}

double all_gather_seconds(double bytes, int ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double n = ranks;
  return (n - 1) * link.latency_seconds + (n - 1) / n * bytes / bus_bandwidth(link, Collective::kAllGather, bytes);
}

double send_seconds(double bytes, const Link& link) {
  ENGINE_CHECK(link.bandwidth_bytes_per_second > 0, "a link needs a positive bandwidth");
  return link.latency_seconds + bytes / link.bandwidth_bytes_per_second;
}

Link axis_link(const Cluster& cluster, Axis axis, int tp, int pp, int dp) {
  ENGINE_CHECK(cluster.devices_per_node >= 1, "axis_link: the cluster needs devices_per_node >= 1");
  const ProcessGrid grid(tp * pp * dp, 0, tp, pp, dp);  // the engine's own rank order
  const auto coordinate = [axis](Coords& c) -> int& { return axis == Axis::kTp ? c.tp : axis == Axis::kDp ? c.dp : c.pp; };
  // Walk each group from its first member: its ranks grow with the axis
  // coordinate, so the members on one node are consecutive.
  bool crosses = false;
  int fewest = cluster.devices_per_node;  // fewest members a crossing group has on one of its nodes
  for (int first = 0; first < grid.world_size(); ++first) {
    Coords c = grid.coords_of(first);
    if (coordinate(c) != 0) continue;
    int node = first / cluster.devices_per_node, on_node = 0, smallest_run = cluster.devices_per_node;
    bool group_crosses = false;
    for (int k = 0; k < grid.size(axis); ++k) {
      coordinate(c) = k;
      const int n = grid.rank_of(c) / cluster.devices_per_node;
      if (n != node) {
        group_crosses = true;
        smallest_run = std::min(smallest_run, on_node);
        node = n;
        on_node = 0;
      }
      ++on_node;
    }
    if (group_crosses) {
      crosses = true;
      fewest = std::min({fewest, smallest_run, on_node});
    }
  }
  if (!crosses) return cluster.intra_node;
  Link link = cluster.inter_node;
  if (fewest > 1 && axis != Axis::kPp) {  // the ring's hops inside a node bound it too
    const auto widened = [&](double Link::*field) {
      if (link.*field > 0)
        link.*field = std::max(link.*field, std::min(cluster.intra_node.*field > 0 ? cluster.intra_node.*field
                                                                                  : cluster.intra_node.bandwidth_bytes_per_second,
                                                     fewest * link.*field));
    };
    widened(&Link::bandwidth_bytes_per_second);
    widened(&Link::all_gather_bytes_per_second);
    widened(&Link::reduce_scatter_bytes_per_second);
    // A curve's every size alike, bounded by the node's own link at that size.
    for (const Collective k : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter}) {
      std::vector<BandwidthAtSize>& curve = k == Collective::kAllReduce   ? link.all_reduce_by_size
                                            : k == Collective::kAllGather ? link.all_gather_by_size
                                                                          : link.reduce_scatter_by_size;
      for (BandwidthAtSize& p : curve)
        p.bytes_per_second = std::max(p.bytes_per_second,
                                      std::min(bus_bandwidth(cluster.intra_node, k, p.bytes), fewest * p.bytes_per_second));
    }
  }
  return link;
}

}  // namespace parallel
