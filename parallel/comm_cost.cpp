#include "parallel/comm_cost.h"

#include "engine/check.h"

namespace parallel {

namespace {
double transfer(double bytes, const Link& link) {
  ENGINE_CHECK(link.bandwidth_bytes_per_second > 0, "a link needs a positive bandwidth");
  return bytes / link.bandwidth_bytes_per_second;
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
  return (n - 1) * link.latency_seconds + transfer((n - 1) / n * bytes, link);
}

double all_gather_seconds(double bytes, int ranks, const Link& link) { return reduce_scatter_seconds(bytes, ranks, link); }

double send_seconds(double bytes, const Link& link) { return link.latency_seconds + transfer(bytes, link); }

const Link& axis_link(const Cluster& cluster, Axis axis, int tp, int pp, int dp) {
  // How many consecutive ranks one group of the axis spans.
  int span = tp;
  if (axis == Axis::kDp) span = tp * dp;
  if (axis == Axis::kPp) span = tp * dp * pp;
  // Inside a node only if every group is: groups of `span` consecutive ranks
  // tile the nodes exactly when span divides devices_per_node.
  const bool inside = span <= cluster.devices_per_node && cluster.devices_per_node % span == 0;
  return inside ? cluster.intra_node : cluster.inter_node;
}

}  // namespace parallel
