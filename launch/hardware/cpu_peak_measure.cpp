// The measurement kernel: fp32 GEMMs on a pinned OpenMP team, and how busy
// the rest of the machine was meanwhile (measure_gemm_flops, cpu_peak.h).
#include <omp.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "engine/buffer.h"
#include "engine/device.h"
#include "engine/ops.h"
#include "launch/hardware/cpu_peak.h"

namespace launch {

namespace {

using Clock = std::chrono::steady_clock;

// Busy and total time of `cpus` (all of them when empty) from /proc/stat,
// and this process's CPU time, in seconds: what the rest of the machine did
// meanwhile is the difference of two samples.
struct CpuClock {
  double cpus_busy = 0, cpus_total = 0, process = 0;
  int cpus = 0;  // how many /proc/stat counted
};

CpuClock sample_cpu_clock(const std::vector<int>& cpus) {
  CpuClock c;
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  c.process = static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::ifstream in("/proc/stat");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;  // cpuN only
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    fields >> cpu;
    if (!cpus.empty() && !std::binary_search(cpus.begin(), cpus.end(), cpu)) continue;
    // user nice system idle iowait irq softirq steal (guest time is already in user)
    double t[8] = {};
    for (double& v : t) fields >> v;
    const double idle = t[3] + t[4], total = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    c.cpus_busy += (total - idle) * tick;
    c.cpus_total += total * tick;
    ++c.cpus;
  }
  return c;
}

// The share of `threads` cores' time that other processes (or the
// hypervisor: steal) took from a measurement between two samples: what they
// used of the cpus beyond the cores the measurement left free. 0 when
// /proc/stat says nothing.
double others_share(const CpuClock& before, const CpuClock& after, int threads) {
  const double total = after.cpus_total - before.cpus_total;
  if (total <= 0 || after.cpus == 0) return 0;
  const double per_cpu = total / after.cpus;  // the wall time, as the kernel counted it
  const double others = (after.cpus_busy - before.cpus_busy) - (after.process - before.process);
  const double free = std::max(0, after.cpus - threads) * per_cpu;
  return std::clamp((others - free) / (std::min(threads, after.cpus) * per_cpu), 0.0, 1.0);
}

// The best rate of repeated n x n x n matmuls on the calling thread's OpenMP team.
double best_gemm_rate(double seconds) {
  const std::int64_t sizes[] = {2048, 1024};
  const std::int64_t largest = sizes[0], bytes = largest * largest * 4;
  engine::Buffer a(engine::DeviceType::kCpu, bytes), w(engine::DeviceType::kCpu, bytes),
      o(engine::DeviceType::kCpu, bytes);
  auto square = [](engine::Buffer& b, std::int64_t n) { return b.as_tensor(engine::Shape{n, n}, engine::DType::kF32); };
  engine::ops::fill(square(a, largest), 0.5);
  engine::ops::fill(square(w, largest), 0.25);
  auto time_one = [&](std::int64_t n) {
    const auto t0 = Clock::now();
    engine::ops::matmul_forward(square(o, n), square(a, n), square(w, n), engine::Tensor{});
    return 2.0 * static_cast<double>(n * n * n) / std::chrono::duration<double>(Clock::now() - t0).count();
  };
  time_one(1024);  // warm-up: the team's threads, the pages of the output
  double best = 0;
  const auto start = Clock::now();
  for (int run = 0; run < 2 || std::chrono::duration<double>(Clock::now() - start).count() < seconds; ++run)
    best = std::max(best, time_one(sizes[run % 2]));
  return best;
}

}  // namespace

GemmMeasurement measure_gemm_flops(int threads, const std::vector<int>& cpus, double seconds) {
  GemmMeasurement result;
  std::exception_ptr error;
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  std::thread worker([&] {
    try {
      if (!cpus.empty()) {  // the team this thread starts inherits its affinity
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int cpu : cpus) CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof set, &set);  // best effort: unpinned is only less exact
      }
      omp_set_num_threads(std::max(1, threads));
      const CpuClock before = sample_cpu_clock(sorted);
      result.flops = best_gemm_rate(seconds);
      result.busy = others_share(before, sample_cpu_clock(sorted), std::max(1, threads));
    } catch (...) {
      error = std::current_exception();
    }
  });
  worker.join();
  if (error) std::rethrow_exception(error);
  return result;
}

}  // namespace launch
