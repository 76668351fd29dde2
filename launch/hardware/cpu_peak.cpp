// The job's peak: each node's local rank 0 reads its cache entry or
// measures, the node's ranks and then the world learn the result
// (resolve_cpu_peak), and the start-up line that says it (CpuPeak::describe).
#include "launch/hardware/cpu_peak.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <exception>
#include <optional>
#include <string>

#include "engine/check.h"
#include "launch/hardware/cpu_peak_internal.h"

namespace launch {

using cpu_peak_internal::kHow;
using cpu_peak_internal::plural;

namespace {

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &tm);
  return text;
}

std::string format_gflops(double flops) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", flops / 1e9);
  return text;
}

// Rank `root`'s text on every rank of `comm`.
std::string broadcast_text(MPI_Comm comm, const std::string& text, int root = 0) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int size = static_cast<int>(text.size());
  MPI_Bcast(&size, 1, MPI_INT, root, comm);
  std::string out = rank == root ? text : std::string(static_cast<std::size_t>(size), '\0');
  if (size > 0) MPI_Bcast(out.data(), size, MPI_CHAR, root, comm);
  return out;
}

}  // namespace

CpuPeak resolve_cpu_peak(MPI_Comm world, const CpuPeakOptions& options) {
  int world_rank = 0;
  MPI_Comm_rank(world, &world_rank);
  CpuPeak peak;
  MPI_Comm_size(world, &peak.world_size);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  peak.share = node_share(node);
  peak.cpu = this_cpu();
  peak.cache_path = options.cache_path;
  peak.writes_cache = peak.share.local_rank == 0 && !peak.cache_path.empty();

  // The node's local rank 0 reads its entry or measures; the others sleep.
  std::string error;
  if (peak.share.local_rank == 0) {
    try {
      const CpuPeakCache cache(peak.cache_path);
      const std::string key = CpuPeakCache::key(peak.cpu, peak.share.threads);
      std::optional<CachedPeak> cached;
      if (peak.cache_path.empty())
        peak.cache_problem = "no cache folder (set ENGINE_CACHE_DIR, XDG_CACHE_HOME or HOME)";
      else
        cached = cache.find(key, &peak.cache_problem);
      if (cached) {
        peak.node = cached->flops;
        peak.date = cached->date;
        peak.raised = cached->raised;
        peak.busy = cached->busy;
      }
      if (!cached || cached->busy > kBusyShare) {  // none yet, or one taken on a busy machine
        const GemmMeasurement m = measure_gemm_flops(peak.share.threads, peak.share.cpus, options.measure_seconds);
        if (!cached || m.flops > cached->flops) {
          peak.measured_now = true;
          peak.node = m.flops;
          peak.date = today_utc();
          peak.raised = false;
          peak.busy = m.busy;
        } else {
          peak.checked_now = true;
          peak.busy = std::min(peak.busy, m.busy);  // a quiet start that did no better confirms the entry
        }
        if (!peak.cache_path.empty()) {
          try {
            cache.store(key, peak.cpu, peak.share.threads, CachedPeak{peak.node, peak.date, peak.raised, peak.busy});
          } catch (const std::exception& e) {
            peak.cache_problem = std::string("not cached: ") + e.what();
            peak.writes_cache = false;
          }
        }
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  barrier_sleeping(node);

  // Every rank of the node gets what its local rank 0 found.
  double values[6] = {peak.node,        peak.measured_now ? 1.0 : 0.0, peak.checked_now ? 1.0 : 0.0,
                      peak.raised ? 1.0 : 0.0, peak.busy,                    error.empty() ? 0.0 : 1.0};
  MPI_Bcast(values, 6, MPI_DOUBLE, 0, node);
  peak.node = values[0];
  peak.measured_now = values[1] != 0;
  peak.checked_now = values[2] != 0;
  peak.raised = values[3] != 0;
  peak.busy = values[4];
  peak.date = broadcast_text(node, peak.date);
  peak.cache_problem = broadcast_text(node, peak.cache_problem);
  error = broadcast_text(node, error);
  MPI_Comm_free(&node);

  // The world: the sum of the node peaks (each rank adds its share of its
  // node's), the number of nodes, and whether any node failed.
  double sums[3] = {error.empty() ? peak.node / peak.share.local_ranks : 0.0, peak.share.local_rank == 0 ? 1.0 : 0.0,
                    error.empty() ? 0.0 : 1.0};
  MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, world);
  ENGINE_CHECK(error.empty(), "measuring the CPU's peak FLOP/s failed: ", error);
  ENGINE_CHECK(sums[2] == 0, "measuring the CPU's peak FLOP/s failed on another node");
  peak.nodes = static_cast<int>(std::lround(sums[1]));
  peak.per_rank = sums[0] / peak.world_size;
  return peak;
}

std::string CpuPeak::describe() const {
  const std::string cores = plural(share.cores, "core");
  const std::string what = share.threads == share.cores ? "this node's " + cores
                                                        : plural(share.threads, "thread") + " on this node's " + cores;
  std::string line = "peak       ";
  if (nodes > 1)
    line += format_gflops(per_rank) + " GFLOP/s fp32 per rank (the " + std::to_string(nodes) +
            " nodes' peaks over " + plural(world_size, "rank") + "); this node: " + format_gflops(node) +
            " GFLOP/s for " + what;
  else
    line += format_gflops(node) + " GFLOP/s fp32 for " + what;
  if (share.local_ranks > 1)
    line += " (" + std::to_string(share.local_ranks) + " ranks share it, " + format_gflops(node / share.local_ranks) +
            " GFLOP/s each)";
  if (measured_now)
    line += ", measured now (" + std::string(kHow) + ")";
  else
    line += ", measured " + date + (checked_now ? " (measured again now: no better)" : "");
  if (raised) line += ", since raised to a step's achieved rate";
  if (cache_path.empty() || cache_problem.rfind("not cached", 0) == 0)
    line += "; " + (cache_problem.empty() ? std::string("not cached") : cache_problem) +
            " (give --peak-tflops for a fixed peak)";
  else
    line += " and cached in " + cache_path + (cache_problem.empty() ? "" : ", replacing what was there (" +
                                                                               cache_problem + ")") +
            " (delete it to re-measure, or give --peak-tflops)";
  if (busy > kBusyShare) {
    char note[200];
    std::snprintf(note, sizeof note,
                  "; other processes used %.0f%% of these cores during that measurement, so it may be low: it is "
                  "measured again at each start, the best kept, until they are quiet",
                  busy * 100);
    line += note;
  }
  return line;
}

}  // namespace launch
