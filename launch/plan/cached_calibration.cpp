#include "launch/plan/cached_calibration.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/check.h"
#include "engine/device.h"
#include "launch/files/cache_dir.h"
#include "launch/files/checksum.h"
#include "launch/plan/calibrate.h"
#include "launch/plan/cluster_file.h"
#include "launch/resilience/rank_agreement.h"
#include "parallel/mpi_communicator.h"

namespace launch {

namespace {

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "unknown-host";
  return name;
}

}  // namespace

std::string calibration_cache_key(const std::vector<std::string>& hosts, engine::DeviceType device,
                                  const std::string& gpus, const std::string& threads, std::int64_t matmul_channels) {
  // Ranks per host, hosts in name order: the same job shape keys the same
  // whichever rank lands on which host.
  std::map<std::string, int> ranks;
  for (const std::string& h : hosts) ++ranks[h];
  std::ostringstream key;
  key << "calibration v1; hosts";
  for (const auto& [host, count] : ranks) key << " " << host << " x" << count;
  key << "; device " << engine::device_name(device);
  if (device == engine::DeviceType::kCuda) key << " (" << gpus << " visible)";
  key << "; threads per rank " << threads << "; matmul width " << matmul_channels;
  return key.str();
}

CachedCalibration cached_calibration(MPI_Comm world, std::int64_t matmul_channels,
                                     std::optional<engine::DeviceType> device, double seconds) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  parallel::MpiCommunicator control(world, "calibration cache");
  // Everything in the key is the same on every rank (gathered or reduced),
  // so every rank makes the same decisions below.
  const std::vector<std::string> hosts = all_gather_strings(control, this_host());
  // The device calibrate() would choose: CUDA when every rank sees a GPU
  // (under --device cpu no GPU is looked for).
  const bool cpu_asked = device && *device == engine::DeviceType::kCpu;
  const int gpus = !cpu_asked && engine::built_with_cuda() ? engine::cuda_device_count() : 0;
  const bool gpu_everywhere = all_ranks_ok(control, gpus > 0);
  const engine::DeviceType kind = device ? *device : gpu_everywhere ? engine::DeviceType::kCuda : engine::DeviceType::kCpu;
  // The figures move with the OpenMP threads per rank (the CPU's peak and
  // matmul rates) and the GPUs a node shows: their range over the ranks.
  const auto range = [&](int mine) {
    int lo = mine, hi = mine;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, world);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, world);
    return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
  };
  const std::string gpu_range = range(gpus), thread_range = range(omp_get_max_threads());
  const std::string key = calibration_cache_key(hosts, kind, gpu_range, thread_range, matmul_channels);
  const std::string dir = engine_cache_dir();

  CachedCalibration result;
  const std::string tag = " [" + checksum_of(key) + "]";  // in the cluster's name: which key it was measured for
  if (!dir.empty()) result.path = (std::filesystem::path(dir) / ("cluster-" + checksum_of(key) + ".json")).string();
  // Rank 0 reads the cache (its folder may be on rank 0's host only); every
  // rank parses the same text and so plans with the same figures.
  std::string text;
  if (rank == 0 && !result.path.empty()) {
    try {  // nothing here may leave rank 0 early: the others wait in the broadcast
      std::error_code ec;
      if (std::filesystem::exists(result.path, ec)) {
        std::ifstream in(result.path, std::ios::binary);
        std::ostringstream bytes;
        bytes << in.rdbuf();
        text = bytes.str();
      }
    } catch (const std::exception&) {
      text.clear();  // unreadable: measured again, and the write below says why if it fails too
    }
  }
  text = broadcast_string(control, text);
  std::string why_not;
  if (!text.empty()) {
    try {
      ClusterFile file = parse_cluster_file(text, "cached cluster file '" + result.path + "'");
      const std::string& name = file.cluster.name;
      if (name.size() < tag.size() || name.compare(name.size() - tag.size(), tag.size(), tag) != 0)
        why_not = "its name '" + name + "' does not carry this job's key" + tag;
      else
        result.cluster = file.cluster;
    } catch (const std::exception& e) {
      why_not = std::string("it does not read as a cluster file: ") + e.what();
    }
    if (why_not.empty()) {
      result.note = "this machine's cached calibration " + result.path + " (delete it to measure again)";
      return result;
    }
  }

  CalibrateOptions options;
  options.seconds = seconds;
  options.matmul_channels = matmul_channels;
  options.device = device;
  options.name = hosts.front() + "-calibrated" + tag;  // rank 0's host, on every rank
  const auto start = std::chrono::steady_clock::now();
  Calibration measured = calibrate(world, options);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.cluster = measured.cluster;
  result.measured = true;
  std::ostringstream note;
  note << "this machine, calibrated now in " << static_cast<int>(took + 0.5) << " s";
  if (!why_not.empty()) note << " (the cached file was not used: " << why_not << ")";
  // Rank 0 keeps it; a cache that cannot be written only loses the saving.
  std::string write_problem;
  if (rank == 0) {
    if (result.path.empty()) {
      write_problem = "no cache folder (set ENGINE_CACHE_DIR, XDG_CACHE_HOME or HOME)";
    } else {
      try {
        std::filesystem::create_directories(std::filesystem::path(result.path).parent_path());
        write_cluster_file(result.path, measured.cluster, measured.sources);
      } catch (const std::exception& e) {
        write_problem = e.what();
      }
    }
  }
  write_problem = broadcast_string(control, write_problem);
  if (write_problem.empty())
    note << ", cached at " << result.path;
  else
    note << "; not cached: " << write_problem;
  result.note = note.str();
  return result;
}

}  // namespace launch
