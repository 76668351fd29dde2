#include "launch/cpu_peak.h"

#include <omp.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "engine/buffer.h"
#include "engine/check.h"
#include "engine/device.h"
#include "engine/ops.h"
#include "launch/atomic_file.h"

namespace launch {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kCacheFormat = "gpt-engine CPU peak cache, version 1";
constexpr const char* kHow = "best of fp32 1024^3 and 2048^3 matmuls over about a second";

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// The value of the first processor's "key : value" line of /proc/cpuinfo with this key, or "".
std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) break;  // the end of the first processor's block
    const auto colon = line.find(':');
    if (colon != std::string::npos && trim(line.substr(0, colon)) == key) return trim(line.substr(colon + 1));
  }
  return "";
}

#if !defined(__x86_64__) && !defined(__i386__)
bool has_word(const std::string& words, const std::string& word) {
  std::istringstream in(words);
  for (std::string w; in >> w;)
    if (w == word) return true;
  return false;
}
#endif

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

std::string plural(int n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

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

void barrier_sleeping(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibarrier(comm, &request);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// ---- the CPU and the node ---------------------------------------------------------

CpuIdentity this_cpu() {
  CpuIdentity cpu;
  cpu.model = cpuinfo_field("model name");
  if (cpu.model.empty()) {  // ARM: no model name, but implementer and part numbers
    const std::string implementer = cpuinfo_field("CPU implementer"), part = cpuinfo_field("CPU part");
    if (!implementer.empty()) cpu.model = "CPU implementer " + implementer + " part " + part;
  }
  if (cpu.model.empty()) cpu.model = "unknown CPU";
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  cpu.isa = __builtin_cpu_supports("avx512f") ? "avx512f"
            : __builtin_cpu_supports("avx2")  ? "avx2"
            : __builtin_cpu_supports("avx")   ? "avx"
            : __builtin_cpu_supports("sse4.2") ? "sse4.2"
                                               : "generic";
#else
  const std::string features = cpuinfo_field("Features");
  cpu.isa = has_word(features, "sve") ? "sve" : has_word(features, "asimd") ? "neon" : "generic";
#endif
  return cpu;
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

// ---- the cache --------------------------------------------------------------------

std::string cpu_peak_cache_path() {
  namespace fs = std::filesystem;
  fs::path dir;
  if (const char* v = std::getenv("ENGINE_CACHE_DIR"); v && *v)
    dir = v;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    dir = fs::path(x) / "gpt-engine";
  else if (const char* h = std::getenv("HOME"); h && *h)
    dir = fs::path(h) / ".cache" / "gpt-engine";
  else
    return "";
  return (dir / "cpu_peak.json").string();
}

std::string CpuPeakCache::key(const CpuIdentity& cpu, int threads) {
  return cpu.model + " | " + cpu.isa + " | " + plural(threads, "thread");
}

namespace {

// The cache file's JSON; a discarded value when it is missing or damaged
// (`problem` says which, "" when missing).
nlohmann::json read_cache(const std::string& path, std::string& problem) {
  problem.clear();
  std::ifstream in(path);
  if (!in) return nlohmann::json(nlohmann::json::value_t::discarded);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    problem = "'" + path + "' is not valid JSON";
  } else if (!j.is_object() || j.value("format", "") != kCacheFormat || !j.contains("peaks") ||
             !j["peaks"].is_object()) {
    problem = "'" + path + "' is not a CPU peak cache of this version";
    j = nlohmann::json(nlohmann::json::value_t::discarded);
  }
  return j;
}

std::optional<CachedPeak> parse_entry(const nlohmann::json& e) {
  if (!e.is_object() || !e.contains("gflops") || !e["gflops"].is_number() || !e.contains("measured") ||
      !e["measured"].is_string())
    return std::nullopt;
  CachedPeak peak;
  peak.flops = e["gflops"].get<double>() * 1e9;
  peak.date = e["measured"].get<std::string>();
  peak.raised = e.value("raised", false);
  peak.busy = e.contains("busy") && e["busy"].is_number() ? e["busy"].get<double>() : 0.0;
  if (!std::isfinite(peak.flops) || peak.flops <= 0) return std::nullopt;
  return peak;
}

}  // namespace

std::optional<CachedPeak> CpuPeakCache::find(const std::string& key, std::string* problem) const {
  std::string why;
  const nlohmann::json j = read_cache(path_, why);
  if (problem) *problem = why;
  if (j.is_discarded() || !j["peaks"].contains(key)) return std::nullopt;
  std::optional<CachedPeak> peak = parse_entry(j["peaks"][key]);
  if (!peak && problem) *problem = "the entry for '" + key + "' in '" + path_ + "' is malformed";
  return peak;
}

void CpuPeakCache::store(const std::string& key, const CpuIdentity& cpu, int threads, const CachedPeak& entry) const {
  ENGINE_CHECK(!path_.empty(), "no cache folder: set ENGINE_CACHE_DIR, XDG_CACHE_HOME or HOME");
  std::string problem;
  nlohmann::json j = read_cache(path_, problem);
  nlohmann::json peaks = nlohmann::json::object();
  if (!j.is_discarded())  // a damaged file is replaced whole; a valid one keeps its other valid entries
    for (const auto& [k, e] : j["peaks"].items())
      if (parse_entry(e)) peaks[k] = e;
  peaks[key] = {{"cpu", cpu.model},
                {"isa", cpu.isa},
                {"threads", threads},
                {"gflops", entry.flops / 1e9},
                {"measured", entry.date},
                {"busy", std::round(entry.busy * 1000) / 1000},
                {"raised", entry.raised},
                {"how", kHow}};
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::error_code error;
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  ENGINE_CHECK(!error, "cannot create '", parent.string(), "': ", error.message());
  AtomicFile file(path_);
  file.write(nlohmann::json{{"format", kCacheFormat}, {"peaks", peaks}}.dump(2) + "\n");
  file.commit();
}

// ---- measuring --------------------------------------------------------------------

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

// ---- the job's peak ---------------------------------------------------------------

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
