#include "parallel/comm_cost.h"

#include <algorithm>

#include "engine/check.h"

namespace parallel {

namespace {
// `bytes` at `bandwidth`, or at the link's bandwidth where that is 0 (not measured).
double transfer(double bytes, const Link& link, double bandwidth = 0) {
  ENGINE_CHECK(link.bandwidth_bytes_per_second > 0, "a link needs a positive bandwidth");
  return bytes / (bandwidth > 0 ? bandwidth : link.bandwidth_bytes_per_second);
}
}  // namespace

double all_reduce_seconds(double bytes, int ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double n = ranks;
  return 2 * (n - 1) * link.latency_seconds + transfer(2 * (n - 1) / n * bytes, link);
}

double reduce_scatter_seconds(double bytes, int ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double n = ranks;
  return (n - 1) * link.latency_seconds + transfer((n - 1) / n * bytes, link, link.reduce_scatter_bytes_per_second);
}

double all_gather_seconds(double bytes, int ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double n = ranks;
  return (n - 1) * link.latency_seconds + transfer((n - 1) / n * bytes, link, link.all_gather_bytes_per_second);
}

double send_seconds(double bytes, const Link& link) { return link.latency_seconds + transfer(bytes, link); }

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
  }
  return link;
}

}  // namespace parallel
