#include "launch/plan/calibrate.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <functional>

#include "engine/check.h"
#include "engine/device.h"
#include "launch/plan/calibration_probes.h"
#include "launch/plan/cluster_file.h"
#include "launch/resilience/rank_agreement.h"
#include "parallel/mpi_communicator.h"

namespace launch {
namespace {

using engine::DeviceType;

// Large enough for the bus bandwidth to approach its plateau (nccl-tests'
// curves flatten from tens of MiB), small enough to repeat in a second.
constexpr std::size_t kLinkBytes = std::size_t{64} << 20;
constexpr double kMiB = 1048576.0;

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "unknown-host";
  return name;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", &tm);
  return text;
}

// "%.*g": the figures of a sentence.
std::string num(double v, int digits = 4) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*g", digits, v);
  return text;
}

// The node's memory: physical, or the cgroup's limit where lower (a container).
struct NodeMemory {
  double bytes = 0;
  std::string how;
};
NodeMemory node_memory() {
  NodeMemory m;
  m.bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  m.how = "physical memory (sysconf)";
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string text;
    if (!(in >> text) || text == "max") continue;
    try {
      const double limit = std::stod(text);
      if (limit > 0 && limit < m.bytes) {
        m.bytes = limit;
        m.how = std::string("the cgroup's memory limit (") + path + ")";
      }
    } catch (const std::exception&) {
    }
  }
  return m;
}

// Mean, min and max of one figure over the ranks of `comm` that pass `counts`.
struct Spread {
  double mean = 0, min = 0, max = 0;
  int n = 0;
  // "6.655 GB/s (mean of 2 ranks at once, 6.652 to 6.659)", "0.26 GB/s (1 node)"
  std::string describe(double unit, const char* unit_name, const std::string& noun) const {
    const std::string value = num(mean / unit) + " " + unit_name;
    if (n <= 1) return value + " (1 " + noun + ")";
    return value + " (mean of " + std::to_string(n) + " " + noun + "s at once, " + num(min / unit) + " to " +
           num(max / unit) + ")";
  }
};
Spread spread(MPI_Comm comm, double value, bool counts = true) {
  double sums[2] = {counts ? value : 0.0, counts ? 1.0 : 0.0};
  double lo = counts ? value : INFINITY, hi = counts ? value : -INFINITY;
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, comm);
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, comm);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, comm);
  Spread s;
  s.n = static_cast<int>(sums[1] + 0.5);
  if (s.n > 0) s.mean = sums[0] / sums[1], s.min = lo, s.max = hi;
  return s;
}

}  // namespace

Calibration calibrate(MPI_Comm world, const CalibrateOptions& o) {
  ENGINE_CHECK(o.seconds > 0 && std::isfinite(o.seconds), "calibrate: seconds per measurement must be positive, got ",
               o.seconds);
  ENGINE_CHECK(o.peak_flops >= 0 && std::isfinite(o.peak_flops), "calibrate: peak_flops must be >= 0, got ",
               o.peak_flops);
  ENGINE_CHECK(o.matmul_channels >= 0 && o.matmul_tokens >= 0,
               "calibrate: matmul channels and tokens must be >= 0 (0 = the default), got C=", o.matmul_channels,
               " and ", o.matmul_tokens, " tokens");
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  parallel::MpiCommunicator control(world, "calibrate");
  auto log = [&](const std::string& line) {
    if (rank == 0 && o.log != nullptr) *o.log << "calibrate  " << line << std::endl;
  };
  // Runs `step` on every rank; a failure on any rank fails every rank, with
  // the words of the lowest failing one. Early finishers sleep at the barrier.
  auto agree = [&](const std::string& what, const std::function<void()>& step) {
    std::string error;
    try {
      step();
    } catch (const std::exception& e) {
      error = e.what();
    }
    barrier_sleeping(world);
    error = first_error(control, error);
    ENGINE_CHECK(error.empty(), "calibration: ", what, " failed: ", error);
  };

  // ---- topology ------------------------------------------------------------------
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  int counts[2] = {local_rank == 0 ? 1 : 0, 0};
  MPI_Allreduce(MPI_IN_PLACE, counts, 1, MPI_INT, MPI_SUM, world);
  const int nodes = counts[0];
  int per_node_min = local_size, per_node_max = local_size;
  MPI_Allreduce(MPI_IN_PLACE, &per_node_min, 1, MPI_INT, MPI_MIN, world);
  MPI_Allreduce(MPI_IN_PLACE, &per_node_max, 1, MPI_INT, MPI_MAX, world);
  const std::string host = broadcast_string(control, hostname());
  const std::string date = broadcast_string(control, utc_now());
  const int threads = omp_get_max_threads();
  const Spread thread_spread = spread(world, threads);

  Calibration result;
  parallel::Cluster& c = result.cluster;
  std::map<std::string, std::string>& why = result.sources;
  c.devices_per_node = per_node_min;
  why["devices_per_node"] = "the job's ranks per node (MPI_COMM_TYPE_SHARED): " + std::to_string(per_node_min) +
                            (per_node_max != per_node_min
                                 ? " (nodes differ, " + std::to_string(per_node_min) + " to " +
                                       std::to_string(per_node_max) + ": the smallest kept)"
                                 : "");

  // ---- device --------------------------------------------------------------------
  int gpu_everywhere = engine::built_with_cuda() && engine::cuda_device_count() > 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &gpu_everywhere, 1, MPI_INT, MPI_MIN, world);
  c.device = o.device ? *o.device : gpu_everywhere ? DeviceType::kCuda : DeviceType::kCpu;
  int gpu = -1;
  std::string gpu_name;
  if (c.device == DeviceType::kCuda) {
    agree("selecting a GPU", [&] {
      const int count = engine::cuda_device_count();
      ENGINE_CHECK(count > 0, "no GPU is visible on host ", hostname());
      gpu = local_rank % count;  // as the trainer picks it: one GPU per rank of a node
      engine::cuda_set_device(gpu);
      gpu_name = engine::cuda_device_name(gpu);
    });
  }
  gpu_name = broadcast_string(control, gpu_name);
  why["device"] = c.device == DeviceType::kCuda
                      ? "cuda: " + gpu_name + ", one per rank (node-local rank modulo the visible GPUs)"
                      : o.device ? "cpu, as asked"
                                 : "cpu: " + std::string(engine::built_with_cuda() ? "no GPU visible to every rank"
                                                                                   : "the engine is built without CUDA");
  const std::string cpu_model = broadcast_string(control, this_cpu().model);
  why["name"] = "measured by `plan --calibrate` (launch/plan/calibrate.cpp) on host " + host + " (" +
                (c.device == DeviceType::kCuda ? gpu_name + " GPUs, " : "") + cpu_model + ") at " + date + " with " +
                std::to_string(size) + " rank" + (size == 1 ? "" : "s") + " on " + std::to_string(nodes) + " node" +
                (nodes == 1 ? "" : "s") + ", " + num(thread_spread.mean, 3) + " OpenMP thread" +
                (thread_spread.mean == 1 ? "" : "s") + " per rank; every figure per device (rank), each measured for "
                "about " + num(o.seconds, 3) + " s with every rank of a node busy at once";
  log(why["name"]);

  // ---- peak ----------------------------------------------------------------------
  if (o.peak_flops > 0) {
    c.peak_flops = o.peak_flops;
    why["peak_tflops"] = "given (--peak-tflops), as MFU's denominator";
  } else if (c.device == DeviceType::kCuda) {
    double peak = 0;
    agree("the GPU's peak", [&] {
      peak = engine::gpu_peak_flops_by_name(gpu_name);
      ENGINE_CHECK(peak > 0, "no peak FLOP/s known for GPU '", gpu_name, "'; give it (--peak-tflops)");
    });
    c.peak_flops = peak;
    why["peak_tflops"] = "dense bf16 peak of " + gpu_name +
                         " from the engine's device table (engine::gpu_peak_flops_by_name, from the vendor's data "
                         "sheet): MFU's denominator";
  } else {
    const CpuPeak cpu = resolve_cpu_peak(world, o.cpu_peak);
    c.peak_flops = cpu.per_rank;
    std::string text = cpu.describe();
    text.erase(0, text.find_first_not_of(' ', text.find(' ')));  // drop the log's "peak       " label
    why["peak_tflops"] = "fp32 GEMM peak per rank, MFU's denominator (launch/hardware/cpu_peak.h): " + text;
  }
  log("peak       " + num(c.peak_flops / 1e9) + " GFLOP/s per device");

  // ---- memory capacity -----------------------------------------------------------
  double memory = 0;
  std::string memory_how;
  if (c.device == DeviceType::kCuda) {
    memory = static_cast<double>(engine::cuda_device_memory_bytes(gpu));
    memory_how = "the GPU's total memory (cudaDeviceProp::totalGlobalMem)";
  } else {
    const NodeMemory m = node_memory();
    memory = m.bytes / local_size;
    memory_how = m.how + " of the node, " + num(m.bytes / 1073741824.0) + " GiB, over its " +
                 std::to_string(local_size) + " rank" + (local_size == 1 ? "" : "s");
  }
  MPI_Allreduce(MPI_IN_PLACE, &memory, 1, MPI_DOUBLE, MPI_MIN, world);
  c.memory_bytes = memory;
  why["memory_gib"] = memory_how + (size > 1 ? " (the smallest over ranks)" : "");

  // ---- matmuls -------------------------------------------------------------------
  MatmulShapes shapes = default_matmul_shapes(c.device);
  if (o.matmul_channels > 0) shapes.channels = o.matmul_channels;
  if (o.matmul_tokens > 0) shapes.tokens = o.matmul_tokens;
  MatmulProbe matmul;
  barrier_sleeping(world);
  agree("the matmul measurement", [&] { matmul = probe_matmul(c.device, shapes, o.seconds); });
  const Spread flops = spread(world, matmul.flops);
  const Spread layers = spread(world, matmul.layers_run);
  const Spread matmul_seconds = spread(world, matmul.seconds);
  const double efficiency = flops.mean / c.peak_flops;
  c.gemm_efficiency = std::min(1.0, efficiency);
  why["gemm_efficiency"] =
      flops.describe(1e9, "GFLOP/s", c.device == DeviceType::kCuda ? "GPU" : "rank") +
      " achieved by engine::ops::matmul_forward and matmul_backward in " +
      (c.device == DeviceType::kCuda ? "bf16 with fp32 accumulation" : "fp32") +
      " on random normal operands (never constants) at " + shapes.describe() +
      ", " + num(layers.mean, 3) + " layer passes in " + num(matmul_seconds.mean, 3) +
      " s per rank (mean), over peak_tflops";
  if (efficiency > 1) {
    // A measured CPU peak that training's own matmuls beat was an unlucky
    // measurement: raise it to the achieved rate, as the engine's MFU does
    // (launch/run/peak_flops.h), so peak x efficiency stays the achieved rate. A
    // peak from a data sheet or given is kept, and the efficiency clamped.
    const bool raise = c.device == DeviceType::kCpu && o.peak_flops == 0;
    why["gemm_efficiency"] += "; measured " + num(efficiency, 3) + " of the peak: " +
                              (raise ? "the peak raised to the achieved rate, the efficiency 1"
                                     : "clamped to 1 (the peak is too low)");
    if (raise) {
      why["peak_tflops"] += "; raised to " + num(flops.mean / 1e9) +
                            " GFLOP/s, the rate this calibration's matmuls achieved (see gemm_efficiency)";
      c.peak_flops = flops.mean;
    }
  }
  log("matmul     " + why["gemm_efficiency"]);

  // ---- matmuls, shape by shape ---------------------------------------------------
  // The rate moves with the shape (a quarter apart between GPT-2's products
  // and a large square's on an H100): each of the block's twelve products
  // alone, for the planner to take each matmul's own (model/step_cost.h).
  std::vector<GemmShapeProbe> gemms;
  barrier_sleeping(world);
  agree("the per-shape matmul measurement", [&] { gemms = probe_gemm_shapes(c.device, shapes, o.seconds); });
  std::string listed_rates;
  for (const GemmShapeProbe& g : gemms) {
    const Spread rate = spread(world, g.flops);
    c.gemm_rates.push_back({g.m, g.n, g.k, std::min(1.0, rate.mean / c.peak_flops)});
    listed_rates += (listed_rates.empty() ? "" : ", ") + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                    std::to_string(g.k) + " " + num(rate.mean / 1e9) + " GFLOP/s";
  }
  why["gemm_rates"] = "each product of " + shapes.describe() +
                      " timed alone (forward (N, out, in), input gradient (N, in, out), weight gradient (out, in, "
                      "N) through ops::matmul_forward, matmul_backward and matmul_weight_grad), the median of at "
                      "least 3 runs, the mean over ranks at once, over peak_tflops (clamped to 1): " + listed_rates;
  log("gemm rates " + listed_rates);

  // ---- memory bandwidth ----------------------------------------------------------
  // Arrays the node's ranks together hold at 4x its largest cache (STREAM's
  // rule), at least 64 MiB each, at most a quarter of a rank's memory.
  const std::size_t cache = largest_cache_bytes();
  double working = c.device == DeviceType::kCuda ? 3 * 256 * kMiB
                                                 : std::max(3 * 64 * kMiB, 4.0 * static_cast<double>(cache) / local_size);
  working = std::min(working, c.memory_bytes / 4);
  const auto elements = static_cast<std::int64_t>(working / 12);
  MemoryProbe stream;
  barrier_sleeping(world);
  agree("the memory bandwidth measurement", [&] { stream = probe_memory_bandwidth(c.device, elements, o.seconds); });
  const Spread bandwidth = spread(world, stream.bytes_per_second);
  c.memory_bandwidth = bandwidth.mean;
  why["memory_bandwidth_gb_per_s"] =
      "STREAM's add (McCalpin 1995) through engine::ops::add, c = a + b over three f32 arrays of " +
      num(static_cast<double>(elements) * 4 / kMiB) + " MiB per rank" +
      (cache > 0 && c.device == DeviceType::kCpu
           ? " (the node's ranks together " + num(3.0 * elements * 4 * local_size / static_cast<double>(cache), 3) +
                 "x the largest cache, " + num(static_cast<double>(cache) / kMiB) + " MiB)"
           : "") +
      ", 12 bytes per element (no write-allocate counted), median of about " + num(stream.repetitions, 3) +
      " repetitions, every rank at once: " + bandwidth.describe(1e9, "GB/s", "rank");
  log("memory     " + why["memory_bandwidth_gb_per_s"]);

  // ---- op overhead ---------------------------------------------------------------
  OpOverheadProbe op;
  barrier_sleeping(world);
  agree("the op overhead measurement", [&] { op = probe_op_overhead(c.device, o.seconds); });
  const Spread overhead = spread(world, op.seconds);
  const Spread tiny = spread(world, op.tiny_seconds);
  c.op_overhead_seconds = overhead.mean;
  why["op_overhead_us"] =
      "the intercept of engine::ops::add's time against its size, from 16384 and 32768 f32 elements (the CPU "
      "backend's OpenMP threshold and twice it), each the median over batches of 100 back-to-back adds" +
      std::string(c.device == DeviceType::kCuda ? " with one synchronisation per batch" : "") +
      ", every rank at once: " + overhead.describe(1e-6, "us", "rank") + "; a 1024-element add took " +
      num(tiny.mean * 1e6, 3) + " us";
  log("op         " + why["op_overhead_us"]);

  // ---- links ---------------------------------------------------------------------
  MPI_Comm intra_pair = MPI_COMM_NULL, cross = MPI_COMM_NULL, inter_pair = MPI_COMM_NULL;
  MPI_Comm_split(node, local_rank / 2, local_rank, &intra_pair);
  MPI_Comm_split(world, local_rank, rank, &cross);  // this rank's counterparts on the other nodes
  int cross_rank = 0;
  MPI_Comm_rank(cross, &cross_rank);
  MPI_Comm_split(cross, cross_rank / 2, cross_rank, &inter_pair);
  // A ZeRO unit: one block's parameters in f32 (its gradient's reduce-scatter; its
  // gather moves the working copy, half that on a GPU), at the probe's width.
  const std::size_t unit_bytes = static_cast<std::size_t>(12 * shapes.channels * shapes.channels) * 4;
  const std::vector<std::size_t> curve_sizes = default_curve_sizes();
  const LinkProbe intra = probe_link(world, intra_pair, node, c.device, kLinkBytes, o.seconds, unit_bytes, curve_sizes);
  LinkProbe inter;
  if (nodes > 1)
    inter = probe_link(world, inter_pair, cross, c.device, kLinkBytes, o.seconds, unit_bytes, curve_sizes);
  MPI_Comm_free(&inter_pair);
  MPI_Comm_free(&cross);
  MPI_Comm_free(&intra_pair);

  auto link_from = [&](const LinkProbe& p, parallel::Link& link, const std::string& key, const char* between,
                       const char* group_words) {
    link.latency_seconds = p.latency_seconds;
    link.bandwidth_bytes_per_second = p.groups > 0 ? p.allreduce_busbw : p.pingpong_bytes_per_second;
    why[key + ".latency_us"] = "half the round trip of an 8-byte ping-pong (parallel::Communicator send/recv, " +
                               p.backend + ") between two ranks " + between + ", " + std::to_string(p.pairs) +
                               " pair" + (p.pairs == 1 ? "" : "s") + " at once, mean";
    const std::string pingpong = "a " + num(kLinkBytes / kMiB) + " MiB ping-pong moved " +
                                 num(p.pingpong_bytes_per_second / 1e9) + " GB/s one way";
    why[key + ".bandwidth_gb_per_s"] =
        p.groups > 0 ? "bus bandwidth 2(n-1)/n x bytes / time (nccl-tests' busbw) of a " + num(kLinkBytes / kMiB) +
                           " MiB f32 all-reduce (parallel::Communicator, " + p.backend + ") over " + group_words +
                           " (n = " + std::to_string(p.group_size) + "), " + std::to_string(p.groups) +
                           " group" + (p.groups == 1 ? "" : "s") + " at once, mean over ranks; " + pingpong
                     : "one-way bandwidth of a ping-pong (no all-reduce group): " + pingpong;
    link.all_gather_bytes_per_second = p.allgather_busbw;
    link.reduce_scatter_bytes_per_second = p.reduce_scatter_busbw;
    if (p.allgather_busbw > 0) {
      const std::string unit = "of a " + num(static_cast<double>(unit_bytes) / kMiB) +
                               " MiB f32 buffer (one block's parameters at C=" + std::to_string(shapes.channels) +
                               ", a ZeRO unit) over " + group_words + ", mean over ranks";
      why[key + ".all_gather_gb_per_s"] = "bus bandwidth (n-1)/n x bytes / time of an all-gather " + unit;
      why[key + ".reduce_scatter_gb_per_s"] = "bus bandwidth (n-1)/n x bytes / time of a reduce-scatter " + unit;
    }
    link.all_reduce_by_size = p.all_reduce_by_size;
    link.all_gather_by_size = p.all_gather_by_size;
    link.reduce_scatter_by_size = p.reduce_scatter_by_size;
    if (!p.all_reduce_by_size.empty()) {
      const std::string sizes = "f32 buffers of " + num(static_cast<double>(curve_sizes.front()) / 1024) + " KiB to " +
                                num(static_cast<double>(curve_sizes.back()) / kMiB) + " MiB (4x apart) over " +
                                group_words + ", mean over ranks";
      why[key + ".all_reduce_by_size"] = "bus bandwidth 2(n-1)/n x bytes / time of an all-reduce of " + sizes +
                                         "; then the " + num(kLinkBytes / kMiB) + " MiB all-reduce of bandwidth_gb_per_s";
      why[key + ".all_gather_by_size"] = "bus bandwidth (n-1)/n x bytes / time of an all-gather of " + sizes;
      why[key + ".reduce_scatter_by_size"] = "bus bandwidth (n-1)/n x bytes / time of a reduce-scatter of " + sizes;
    }
  };
  const bool has_intra = intra.pairs > 0, has_inter = nodes > 1 && inter.pairs > 0;
  if (has_intra) link_from(intra, c.intra_node, "intra_node", "of one node", "the ranks of each node");
  if (has_inter)
    link_from(inter, c.inter_node, "inter_node", "on different nodes (each with its counterpart, same local rank)",
              "each set of counterparts, one rank per node");
  if (has_intra && !has_inter) {
    c.inter_node = c.intra_node;
    why["inter_node"] = nodes == 1 ? "one node: no inter-node link to measure; copied from intra_node"
                                   : "no pair of nodes could be measured; copied from intra_node";
  } else if (!has_intra && has_inter) {
    c.intra_node = c.inter_node;
    why["intra_node"] = "one rank per node: no intra-node link to measure; copied from inter_node";
  } else if (!has_intra && !has_inter) {
    // One rank: nothing to send to. A copy within the device stands in, so
    // the file stays valid; a planner on one device never uses a link.
    c.intra_node = {c.op_overhead_seconds, c.memory_bandwidth};
    c.inter_node = c.intra_node;
    why["intra_node"] =
        "one rank: no link to measure; a copy within the device stands in (latency = op_overhead_us, bandwidth = "
        "memory_bandwidth_gb_per_s)";
    why["inter_node"] = "one node: no inter-node link to measure; copied from intra_node";
  }
  log("intra      latency " + num(c.intra_node.latency_seconds * 1e6) + " us, bandwidth " +
      num(c.intra_node.bandwidth_bytes_per_second / 1e9) + " GB/s");
  log("inter      latency " + num(c.inter_node.latency_seconds * 1e6) + " us, bandwidth " +
      num(c.inter_node.bandwidth_bytes_per_second / 1e9) + " GB/s" + (has_inter ? "" : " (copied)"));

  // ---- storage -------------------------------------------------------------------
  if (!o.storage_dir.empty()) {
    const std::size_t mine = std::max<std::size_t>(std::size_t{1} << 20, o.storage_bytes / local_size);
    double seconds = 0;
    barrier_sleeping(world);
    agree("the storage write test in '" + o.storage_dir + "'",
          [&] { seconds = probe_storage_write_seconds(o.storage_dir, mine, rank); });
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, node);  // the node is done when its slowest is
    const double node_rate = static_cast<double>(mine) * local_size / seconds;
    const Spread rate = spread(world, node_rate, local_rank == 0);
    c.storage_write_bandwidth = rate.mean;
    why["storage_write_gb_per_s"] =
        "each node's ranks at once wrote " + num(static_cast<double>(mine) / kMiB) +
        " MiB each of incompressible data to '" + o.storage_dir + "' (8 MiB writes, then fsync), " +
        num(static_cast<double>(mine) * local_size / kMiB) + " MiB per node over the slowest rank's time: " +
        rate.describe(1e9, "GB/s", "node");
  } else {
    why["storage_write_gb_per_s"] = "not measured (no folder given): 0 = unknown";
  }
  log("storage    " + why["storage_write_gb_per_s"]);
  MPI_Comm_free(&node);

  // ---- the file ------------------------------------------------------------------
  c.name = o.name.empty() ? host + "-calibrated" : o.name;
  // A measurement is not known to more than a few digits; the file then
  // reads 12.34 GB/s, and every rank returns exactly what it holds.
  c = rounded_for_file(c, 4);
  c.gemm_efficiency = std::min(1.0, c.gemm_efficiency);

  std::string error;
  if (rank == 0 && !o.output_path.empty()) {
    try {
      write_cluster_file(o.output_path, c, why);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = first_error(control, error);
  ENGINE_CHECK(error.empty(), "calibration: writing the cluster file failed: ", error);
  if (!o.output_path.empty()) log("wrote      " + o.output_path);
  return result;
}

parallel::Cluster calibrate_cluster(MPI_Comm world, const CalibrateOptions& options) {
  return calibrate(world, options).cluster;
}

}  // namespace launch
