// A stable CPU peak for MFU (DESIGN.md, "Numbers"): the FLOP/s a node's
// cores reach in fp32 GEMMs, measured once per machine and thread count and
// cached, and shared by the ranks that share the node's cores.
//
// Why measured, and why cached: the theoretical bound (cores x clock x FLOPs
// per cycle of the instruction set) needs the clock, which a VM often does
// not expose (no cpufreq, no MHz), and turbo makes the base clock an unsafe
// bound anyway. A measurement at every start-up, on the other hand, varies
// with whatever else the machine is doing (35 to 312 GFLOP/s were seen on one
// machine), and MFU with it. So the node's local rank 0 measures once, with
// the node's threads, while the node's other ranks sleep (OpenMPI's blocking
// waits busy-poll and would steal the very cores being measured), and writes
// the result to a cache that later starts read:
//
//   ${ENGINE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpt-engine}/cpu_peak.json
//
// keyed by the CPU's model name, its vector ISA and the node's thread count.
// Delete the file (or the entry) to measure again; --peak-tflops overrides it.
//
// A measurement taken while other processes used the same cores (more than
// kBusyShare of their time, from /proc/stat) would be cached too low for
// good, so such an entry is marked busy and measured again at later starts,
// keeping the best, until one start finds the cores quiet.
//
// A node's threads: the job's ranks on the node (MPI_COMM_TYPE_SHARED) may
// run on the union of their affinity masks (its popcount: the node's cores,
// logical CPUs) and ask for the sum of their OpenMP threads; the node runs
// min(the two) at once. Each rank's MFU denominator is the sum of the node
// peaks over the world size, so ranks that share a node's cores share its
// peak (4 ranks on 2 cores get half a core's worth each, not a core each).
#pragma once

#include <mpi.h>

#include <optional>
#include <string>
#include <vector>

namespace launch {

// A barrier whose early arrivals sleep (1 ms polls) instead of busy-polling
// as OpenMPI's blocking waits do, which would steal the cores of ranks still
// measuring on the same node (the CPU peak here, launch/plan/calibrate.h).
void barrier_sleeping(MPI_Comm comm);

// The CPU as the cache tells machines apart.
struct CpuIdentity {
  std::string model;  // /proc/cpuinfo's "model name" (ARM: implementer and part), else "unknown CPU"
  std::string isa;    // widest vector ISA: avx512f, avx2, avx, sse4.2, sve, neon or generic
};
CpuIdentity this_cpu();

// This job's share of one node. Collective over `node` (the job's ranks on one node).
struct NodeShare {
  int local_rank = 0;     // this rank among the job's ranks on the node
  int local_ranks = 1;    // the job's ranks on the node
  int cores = 1;          // logical CPUs in the union of their affinity masks
  int threads = 1;        // min(cores, sum of their omp_get_max_threads())
  std::vector<int> cpus;  // that union, to pin the measurement to
};
NodeShare node_share(MPI_Comm node);

// The cache file's path (see above); "" when neither ENGINE_CACHE_DIR,
// XDG_CACHE_HOME nor HOME is set.
std::string cpu_peak_cache_path();

// Other processes' share of the measured cores' time above which a
// measurement counts as taken on a busy machine.
constexpr double kBusyShare = 0.1;

// One node peak as the cache holds it.
struct CachedPeak {
  double flops = 0;     // FLOP/s of the node's threads together
  std::string date;     // YYYY-MM-DD (UTC) of the measurement
  bool raised = false;  // since raised to a step's achieved rate (see PeakFlops)
  double busy = 0;      // other processes' share of the cores while it was measured
};

// The cache file. Readers never trust a damaged file: anything that is not
// the expected JSON, or an entry without a positive finite rate, reads as no
// entry (and the next store replaces the file).
class CpuPeakCache {
 public:
  explicit CpuPeakCache(std::string path) : path_(std::move(path)) {}
  // "Intel(R) Xeon(R) Processor | avx512f | 2 threads"
  static std::string key(const CpuIdentity& cpu, int threads);
  // The entry under `key`, or nothing; `problem` (if given) then says why
  // when the file exists but could not be used ("" when it is just absent).
  std::optional<CachedPeak> find(const std::string& key, std::string* problem = nullptr) const;
  // Writes `entry` under `key`, keeping the file's other valid entries,
  // atomically (launch/files/atomic_file.h), creating the folder. Throws engine::Error.
  void store(const std::string& key, const CpuIdentity& cpu, int threads, const CachedPeak& entry) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Best FLOP/s of fp32 matmuls (1024^3 and 2048^3, repeated for about
// `seconds`) on `threads` OpenMP threads pinned to `cpus` (empty: unpinned).
// Runs on a thread of its own, whose OpenMP team (the OpenMP build of
// OpenBLAS runs its GEMMs on it) takes the thread count and affinity from
// it: the caller's OpenMP settings and affinity are untouched, nothing to
// restore.
struct GemmMeasurement {
  double flops = 0;
  double busy = 0;  // other processes' share of the cpus' time meanwhile (/proc/stat; 0 if unknown)
};
GemmMeasurement measure_gemm_flops(int threads, const std::vector<int>& cpus, double seconds = 1.0);

// The peak of a job's CPUs.
struct CpuPeak {
  double per_rank = 0;    // FLOP/s: the sum of the node peaks / world size
  double node = 0;        // FLOP/s of this rank's node
  int nodes = 1;
  int world_size = 1;
  NodeShare share;        // this rank's node
  CpuIdentity cpu;        // this node's CPU
  std::string date;       // of the node's measurement
  bool measured_now = false;  // the value in use was measured at this start
  bool checked_now = false;   // measured again at this start (the entry was busy), no better than the entry
  bool raised = false;        // the cached value was raised to a step's rate
  double busy = 0;        // other processes' share of the cores during the measurement kept
  std::string cache_path;     // "" when there is none
  std::string cache_problem;  // why the cache was not read or not written ("" = fine)
  bool writes_cache = false;  // this rank keeps the node's cache entry (its node's local rank 0)

  // The start-up line ("peak       312.4 GFLOP/s fp32 for this node's 2 cores ...").
  std::string describe() const;
};

struct CpuPeakOptions {
  std::string cache_path = cpu_peak_cache_path();
  double measure_seconds = 1.0;
};

// Collective over `world`: each node's local rank 0 reads its cache entry,
// or measures (its node's other ranks sleeping meanwhile) and stores it
// (also when the entry was measured on a busy machine: the better of the two
// is kept); then every rank learns the per-rank peak. A failed measurement
// is an error on every rank; a cache that cannot be written is only reported.
CpuPeak resolve_cpu_peak(MPI_Comm world, const CpuPeakOptions& options = {});

}  // namespace launch
