#include "parallel/comm_cost.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

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

Link axis_link(const Cluster& cluster, Axis axis, int tp, int pp, int dp) {
  ENGINE_CHECK(cluster.devices_per_node >= 1 && tp >= 1 && pp >= 1 && dp >= 1, "axis_link: bad grid or cluster");
  // Members of each (group, node) pair; a rank's coordinates follow
  // ProcessGrid: rank = t + tp * (d + dp * p).
  std::map<std::pair<long long, int>, int> members;
  const long long ranks = static_cast<long long>(tp) * pp * dp;
  for (long long rank = 0; rank < ranks; ++rank) {
    const long long t = rank % tp, d = (rank / tp) % dp, p = rank / (static_cast<long long>(tp) * dp);
    long long group = 0;  // the two coordinates that are not the axis's
    if (axis == Axis::kTp) group = d + dp * p;
    if (axis == Axis::kDp) group = t + tp * p;
    if (axis == Axis::kPp) group = t + tp * d;
    ++members[{group, static_cast<int>(rank / cluster.devices_per_node)}];
  }
  // Whether some group spans nodes, and the fewest members any group has on one node.
  bool crosses = false;
  int fewest = cluster.devices_per_node;
  for (auto it = members.begin(); it != members.end(); ++it) {
    const auto next = std::next(it);
    const bool same_group_continues = next != members.end() && next->first.first == it->first.first;
    const bool same_group_before = it != members.begin() && std::prev(it)->first.first == it->first.first;
    if (same_group_continues || same_group_before) {
      crosses = true;
      fewest = std::min(fewest, it->second);
    }
  }
  if (!crosses) return cluster.intra_node;
  Link link = cluster.inter_node;
  if (fewest > 1 && axis != Axis::kPp)  // the ring's hops inside a node bound it too
    link.bandwidth_bytes_per_second =
        std::max(link.bandwidth_bytes_per_second,
                 std::min(cluster.intra_node.bandwidth_bytes_per_second, fewest * link.bandwidth_bytes_per_second));
  return link;
}

}  // namespace parallel
