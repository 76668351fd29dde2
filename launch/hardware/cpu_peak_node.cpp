// A node's ranks: what they share of its cores (node_share), and waiting for
// them without stealing those cores (barrier_sleeping); cpu_peak.h.
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "engine/check.h"
#include "launch/hardware/cpu_peak.h"

namespace launch {

void barrier_sleeping(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibarrier(comm, &request);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

NodeShare node_share(MPI_Comm node) {
  NodeShare share;
  MPI_Comm_rank(node, &share.local_rank);
  MPI_Comm_size(node, &share.local_ranks);
  // The union of the ranks' affinity masks, as 64-bit words OR-reduced.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ENGINE_CHECK(sched_getaffinity(0, sizeof mine, &mine) == 0, "sched_getaffinity failed");
  constexpr int kWords = CPU_SETSIZE / 64;
  std::uint64_t words[kWords] = {};
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mine)) words[cpu / 64] |= std::uint64_t{1} << (cpu % 64);
  MPI_Allreduce(MPI_IN_PLACE, words, kWords, MPI_UINT64_T, MPI_BOR, node);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (words[cpu / 64] >> (cpu % 64) & 1) share.cpus.push_back(cpu);
  share.cores = std::max(1, static_cast<int>(share.cpus.size()));
  int threads = omp_get_max_threads();
  MPI_Allreduce(MPI_IN_PLACE, &threads, 1, MPI_INT, MPI_SUM, node);
  share.threads = std::max(1, std::min(share.cores, threads));
  return share;
}

}  // namespace launch
