// The MFU denominator. The CPU's (launch/hardware/cpu_peak.h, launch/run/peak_flops.h) is measured
// once per machine and thread count and cached; the cache read back verbatim,
// keyed by thread count, never trusted when damaged, measured again while an
// entry was taken on a busy machine; ranks of one node sharing its peak; a
// peak that a step beats raised so MFU and HFU stay at or below 100%. A GPU's
// comes from a data-sheet table by device name (engine/device.cpp).
//
// Every test works in a temporary cache folder (ENGINE_CACHE_DIR is pointed
// at one before main), never in the user's. Run alone (one process) and under
// mpirun -np 2, where the *World tests check that two ranks on one node share
// one node peak.
#include <gtest/gtest.h>
#include <mpi.h>
#include <omp.h>
#include <sched.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "engine/device.h"
#include "launch/hardware/cpu_peak.h"
#include "launch/run/peak_flops.h"
#include "tests/launch/training_fixture.h"

using launch::CachedPeak;
using launch::CpuPeak;
using launch::CpuPeakCache;
using launch::PeakFlops;
using test_support::TempDir;

namespace {

// This process's cache folder, set before any test (or the trainer) looks.
const TempDir& process_cache_dir() {
  static const TempDir dir("cpu_peak_cache");
  return dir;
}
const bool kCacheDirSet = [] {
  setenv("ENGINE_CACHE_DIR", process_cache_dir().path().c_str(), 1);
  return true;
}();

constexpr double kShortMeasure = 0.05;  // seconds: the tests check the bookkeeping, not the figure

int threads_here() {  // the node threads resolve_cpu_peak(MPI_COMM_SELF) keys by
  return launch::node_share(MPI_COMM_SELF).threads;
}

launch::CpuPeakOptions options_in(const TempDir& dir) {
  launch::CpuPeakOptions o;
  o.cache_path = dir / "cpu_peak.json";
  o.measure_seconds = kShortMeasure;
  return o;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str(), nullptr, false);
}

void store(const std::string& path, int threads, double gflops, double busy = 0, bool raised = false) {
  CpuPeakCache(path).store(CpuPeakCache::key(launch::this_cpu(), threads), launch::this_cpu(), threads,
                           CachedPeak{gflops * 1e9, "2020-01-02", raised, busy});
}

}  // namespace

TEST(CpuPeak, CachePathFollowsTheEnvironment) {
  ASSERT_TRUE(kCacheDirSet);
  const std::string saved = std::getenv("ENGINE_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved_xdg = xdg ? xdg : "";
  EXPECT_EQ(launch::cpu_peak_cache_path(), (process_cache_dir().path() / "cpu_peak.json").string());
  unsetenv("ENGINE_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/some/xdg", 1);
  EXPECT_EQ(launch::cpu_peak_cache_path(), "/some/xdg/gpt-engine/cpu_peak.json");
  unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME"))
    EXPECT_EQ(launch::cpu_peak_cache_path(), std::string(home) + "/.cache/gpt-engine/cpu_peak.json");
  setenv("ENGINE_CACHE_DIR", saved.c_str(), 1);
  if (xdg) setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
}

TEST(CpuPeak, FirstStartMeasuresAndWritesTheCache) {
  TempDir dir("cpu_peak_first");
  const CpuPeak peak = launch::resolve_cpu_peak(MPI_COMM_SELF, options_in(dir));
  EXPECT_TRUE(peak.measured_now);
  EXPECT_GT(peak.node, 1e8);  // any CPU of this century does 0.1 GFLOP/s
  EXPECT_EQ(peak.per_rank, peak.node);
  EXPECT_EQ(peak.share.local_ranks, 1);
  EXPECT_EQ(peak.nodes, 1);
  EXPECT_TRUE(peak.cache_problem.empty()) << peak.cache_problem;
  const nlohmann::json j = read_json(dir / "cpu_peak.json");
  ASSERT_TRUE(j.is_object()) << "the cache file is JSON";
  const std::string key = CpuPeakCache::key(launch::this_cpu(), peak.share.threads);
  ASSERT_TRUE(j["peaks"].contains(key)) << j.dump(2);
  EXPECT_DOUBLE_EQ(j["peaks"][key]["gflops"].get<double>(), peak.node / 1e9);
  EXPECT_EQ(j["peaks"][key]["threads"].get<int>(), peak.share.threads);
  EXPECT_NE(peak.describe().find("measured now"), std::string::npos) << peak.describe();
  EXPECT_NE(peak.describe().find("cached in " + dir / "cpu_peak.json"), std::string::npos) << peak.describe();
}

TEST(CpuPeak, LaterStartsReadTheCacheVerbatim) {
  TempDir dir("cpu_peak_read");
  store(dir / "cpu_peak.json", threads_here(), 12345.6);
  const CpuPeak peak = launch::resolve_cpu_peak(MPI_COMM_SELF, options_in(dir));
  EXPECT_FALSE(peak.measured_now);
  EXPECT_FALSE(peak.checked_now) << "a quiet entry is not measured again";
  EXPECT_DOUBLE_EQ(peak.node, 12345.6e9);
  EXPECT_EQ(peak.date, "2020-01-02");
  EXPECT_NE(peak.describe().find("12345.6 GFLOP/s fp32"), std::string::npos) << peak.describe();
  EXPECT_NE(peak.describe().find("measured 2020-01-02 and cached in"), std::string::npos) << peak.describe();
  EXPECT_NE(peak.describe().find("delete it to re-measure, or give --peak-tflops"), std::string::npos);
}

TEST(CpuPeak, EntriesAreKeyedByThreadCount) {
  TempDir dir("cpu_peak_keys");
  const std::string path = dir / "cpu_peak.json";
  const int threads = threads_here();
  store(path, threads + 1, 777.0);
  // Only another thread count's entry: measured, and both kept.
  const CpuPeak measured = launch::resolve_cpu_peak(MPI_COMM_SELF, options_in(dir));
  EXPECT_TRUE(measured.measured_now);
  EXPECT_NE(measured.node, 777e9);
  const nlohmann::json j = read_json(path);
  EXPECT_EQ(j["peaks"].size(), 2u) << j.dump(2);
  EXPECT_DOUBLE_EQ(j["peaks"][CpuPeakCache::key(launch::this_cpu(), threads + 1)]["gflops"].get<double>(), 777.0);
  // Each thread count reads its own.
  store(path, threads, 555.0);
  EXPECT_DOUBLE_EQ(launch::resolve_cpu_peak(MPI_COMM_SELF, options_in(dir)).node, 555e9);
  EXPECT_DOUBLE_EQ(CpuPeakCache(path).find(CpuPeakCache::key(launch::this_cpu(), threads + 1))->flops, 777e9);
  EXPECT_NE(CpuPeakCache::key(launch::this_cpu(), 1).find("| 1 thread"), std::string::npos);
}

TEST(CpuPeak, DamagedCacheIsReplacedNotTrusted) {
  const std::string key = CpuPeakCache::key(launch::this_cpu(), threads_here());
  const std::string good_format = R"("format": "gpt-engine CPU peak cache, version 1")";
  const std::vector<std::pair<std::string, std::string>> damaged = {
      {"cut short", "{\"format\": \"gpt-engine CPU peak cache, ver"},
      {"not JSON", "\x01\x02 garbage"},
      {"wrong shape", R"({"peaks": 3})"},
      {"another format", R"({"format": "v0", "peaks": {")" + key + R"(": {"gflops": 99999, "measured": "x"}}})"},
      {"negative rate", "{" + good_format + R"(, "peaks": {")" + key + R"(": {"gflops": -5, "measured": "x"}}})"},
      {"rate not a number",
       "{" + good_format + R"(, "peaks": {")" + key + R"(": {"gflops": "fast", "measured": "x"}}})"},
  };
  for (const auto& [what, text] : damaged) {
    SCOPED_TRACE(what);
    TempDir dir("cpu_peak_damaged");
    write_text(dir / "cpu_peak.json", text);
    const CpuPeak peak = launch::resolve_cpu_peak(MPI_COMM_SELF, options_in(dir));
    EXPECT_TRUE(peak.measured_now) << "a damaged cache is never trusted";
    EXPECT_GT(peak.node, 0);
    EXPECT_NE(peak.node, 99999e9);
    EXPECT_FALSE(peak.cache_problem.empty());
    EXPECT_NE(peak.describe().find("replacing what was there"), std::string::npos) << peak.describe();
    // The file now holds the new measurement, and it reads back.
    const auto entry = CpuPeakCache(dir / "cpu_peak.json").find(key);
    ASSERT_TRUE(entry.has_value());
    EXPECT_DOUBLE_EQ(entry->flops, peak.node);
  }
}

TEST(CpuPeak, BusyEntryIsMeasuredAgainKeepingTheBest) {
  TempDir dir("cpu_peak_busy");
  const std::string path = dir / "cpu_peak.json";
  const int threads = threads_here();
  store(path, threads, 0.001, /*busy=*/0.5);  // taken while others held the cores: surely too low
  const CpuPeak better = launch::resolve_cpu_peak(MPI_COMM_SELF, options_in(dir));
  EXPECT_TRUE(better.measured_now);
  EXPECT_GT(better.node, 1e8);
  EXPECT_DOUBLE_EQ(CpuPeakCache(path).find(CpuPeakCache::key(launch::this_cpu(), threads))->flops, better.node);

  store(path, threads, 1e9, /*busy=*/0.5);  // a busy entry no measurement beats: kept
  const CpuPeak kept = launch::resolve_cpu_peak(MPI_COMM_SELF, options_in(dir));
  EXPECT_FALSE(kept.measured_now);
  EXPECT_TRUE(kept.checked_now);
  EXPECT_DOUBLE_EQ(kept.node, 1e18);
  EXPECT_LE(kept.busy, 0.5);
  EXPECT_NE(kept.describe().find("measured again now: no better"), std::string::npos) << kept.describe();
}

TEST(CpuPeak, MeasuringLeavesTheCallersThreadsAndAffinityAlone) {
  cpu_set_t before, after;
  sched_getaffinity(0, sizeof before, &before);
  const int threads = omp_get_max_threads();
  const launch::GemmMeasurement m = launch::measure_gemm_flops(threads + 1, {0}, kShortMeasure);
  sched_getaffinity(0, sizeof after, &after);
  EXPECT_EQ(omp_get_max_threads(), threads);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
  EXPECT_GT(m.flops, 0);
  EXPECT_GE(m.busy, 0);
  EXPECT_LE(m.busy, 1);
}

TEST(CpuPeak, StartUpLineSaysWhichPeak) {
  CpuPeak p;
  p.node = 312.4e9;
  p.per_rank = p.node / 4;
  p.world_size = 4;
  p.share.local_ranks = 4;
  p.share.cores = 2;
  p.share.threads = 2;
  p.date = "2026-11-22";
  p.cache_path = "/root/.cache/gpt-engine/cpu_peak.json";
  EXPECT_EQ(p.describe(),
            "peak       312.4 GFLOP/s fp32 for this node's 2 cores (4 ranks share it, 78.1 GFLOP/s each), measured "
            "2026-11-22 and cached in /root/.cache/gpt-engine/cpu_peak.json (delete it to re-measure, or give "
            "--peak-tflops)");
  p.share.threads = 1;
  p.busy = 0.4;
  EXPECT_NE(p.describe().find("for 1 thread on this node's 2 cores"), std::string::npos) << p.describe();
  EXPECT_NE(p.describe().find("other processes used 40% of these cores"), std::string::npos) << p.describe();
  p.cache_path.clear();
  p.measured_now = true;
  EXPECT_NE(p.describe().find("not cached"), std::string::npos) << p.describe();
}

// ---- raising the peak -------------------------------------------------------------

namespace {

CpuPeak measured_peak(const std::string& cache_path, double node_flops, int ranks, int nodes = 1) {
  CpuPeak p;
  p.node = node_flops;
  p.world_size = ranks * nodes;
  p.per_rank = node_flops * nodes / p.world_size;
  p.nodes = nodes;
  p.share.local_ranks = ranks;
  p.share.threads = 1;
  p.cpu = launch::this_cpu();
  p.date = "2020-01-02";
  p.cache_path = cache_path;
  p.writes_cache = true;
  return p;
}

}  // namespace

TEST(PeakFlops, RaisedToAFasterStepSoMfuAndHfuStayAtMost100) {
  TempDir dir("peak_raise");
  const std::string path = dir / "cpu_peak.json";
  store(path, 1, 4.0);
  PeakFlops peak(measured_peak(path, 4e9, /*ranks=*/2));  // 2 GFLOP/s per rank
  std::ostringstream out;
  // 1 s steps on 2 ranks: 3 GFLOP/s of model FLOPs, 5 with recomputation.
  const launch::StepFlops slow{2e9, 3e9}, fast{6e9, 10e9};
  PeakFlops::Utilization u = peak.utilization(1, slow, 1.0, 2, &out);
  EXPECT_DOUBLE_EQ(u.mfu, 0.5);
  EXPECT_DOUBLE_EQ(u.hfu, 0.75);
  EXPECT_TRUE(out.str().empty());

  u = peak.utilization(2, fast, 1.0, 2, &out);
  EXPECT_DOUBLE_EQ(peak.per_device(), 5e9) << "raised to the step's hardware rate per device";
  EXPECT_DOUBLE_EQ(u.hfu, 1.0);
  EXPECT_DOUBLE_EQ(u.mfu, 0.6);
  EXPECT_NE(out.str().find("peak       raised to 5.0 GFLOP/s per rank (node 10.0): step 2 ran faster than the "
                           "peak of 2.0, so MFU and HFU stay <= 100%"),
            std::string::npos)
      << out.str();
  // A single-node job rewrites its cache entry: the next run starts from it.
  const auto entry = CpuPeakCache(path).find(CpuPeakCache::key(launch::this_cpu(), 1));
  ASSERT_TRUE(entry.has_value());
  EXPECT_DOUBLE_EQ(entry->flops, 10e9);
  EXPECT_TRUE(entry->raised);
  EXPECT_EQ(entry->date, "2020-01-02");

  // Slower steps after it change nothing.
  out.str("");
  u = peak.utilization(3, slow, 1.0, 2, &out);
  EXPECT_DOUBLE_EQ(u.hfu, 0.3);
  EXPECT_TRUE(out.str().empty());
  // A step a hair faster raises it quietly (HFU stays 100%); a clearly faster one says so again.
  u = peak.utilization(4, launch::StepFlops{6e9, 10.1e9}, 1.0, 2, &out);
  EXPECT_DOUBLE_EQ(u.hfu, 1.0);
  EXPECT_DOUBLE_EQ(peak.per_device(), 5.05e9);
  EXPECT_TRUE(out.str().empty()) << out.str();
  u = peak.utilization(5, launch::StepFlops{6e9, 12e9}, 1.0, 2, &out);
  EXPECT_DOUBLE_EQ(u.hfu, 1.0);
  EXPECT_NE(out.str().find("raised to 6.0 GFLOP/s per rank (node 12.0): step 5 ran faster than the peak of 5.0"),
            std::string::npos)
      << out.str();
  EXPECT_DOUBLE_EQ(CpuPeakCache(path).find(CpuPeakCache::key(launch::this_cpu(), 1))->flops, 12e9);
}

TEST(PeakFlops, SeveralNodesRaiseButKeepTheirCaches) {
  TempDir dir("peak_raise_nodes");
  const std::string path = dir / "cpu_peak.json";
  store(path, 1, 4.0);
  PeakFlops peak(measured_peak(path, 4e9, /*ranks=*/2, /*nodes=*/2));
  std::ostringstream out;
  const PeakFlops::Utilization u = peak.utilization(1, launch::StepFlops{16e9, 16e9}, 1.0, 4, &out);
  EXPECT_DOUBLE_EQ(u.mfu, 1.0);
  EXPECT_NE(out.str().find("the cache is kept"), std::string::npos) << out.str();
  EXPECT_DOUBLE_EQ(CpuPeakCache(path).find(CpuPeakCache::key(launch::this_cpu(), 1))->flops, 4e9);
}

TEST(PeakFlops, GivenPeakIsUsedAsItIs) {
  PeakFlops peak(1e9);  // --peak-tflops or the GPU table: the user's or the vendor's figure
  std::ostringstream out;
  const PeakFlops::Utilization u = peak.utilization(1, launch::StepFlops{1e9, 2e9}, 0.5, 1, &out);
  EXPECT_DOUBLE_EQ(peak.per_device(), 1e9);
  EXPECT_DOUBLE_EQ(u.mfu, 2.0);
  EXPECT_TRUE(out.str().empty());
}

// The trainer end to end: a cached peak far below what the steps reach is
// raised at the first step; no MFU or HFU printed is above 100%.
TEST(PeakFlops, TrainerCapsMfuAndHfuAtTheMeasuredPeak) {
  TempDir dir("peak_trainer");
  test_support::write_corpus(dir);
  launch::TrainConfig config = test_support::tiny_config(dir, 4);
  config.peak_tflops = 0;  // the CPU peak, from the cache of this test
  config.recompute = "selective";
  config.log_file = dir / "metrics.jsonl";
  const std::string path = launch::cpu_peak_cache_path();
  ASSERT_EQ(path.rfind(process_cache_dir().path().string(), 0), 0u) << "tests never touch the real cache";
  store(path, threads_here(), 1e-6);  // 1 kFLOP/s
  std::string log;
  test_support::train_one_process(config, &log);
  EXPECT_NE(log.find("peak       0.0 GFLOP/s fp32 for"), std::string::npos) << log;
  EXPECT_NE(log.find("peak       raised to"), std::string::npos) << log;
  EXPECT_NE(log.find("attention counts the causal half"), std::string::npos) << log;
  EXPECT_NE(log.find("recomputation counted in HFU only"), std::string::npos) << log;
  const std::regex figures(R"(MFU ([0-9.]+)% \| HFU ([0-9.]+)%)");
  int lines = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), figures), end; it != end; ++it, ++lines) {
    const double mfu = std::stod((*it)[1]), hfu = std::stod((*it)[2]);
    EXPECT_LE(mfu, 100.0) << log;
    EXPECT_LE(hfu, 100.0) << log;
    // Printed with one decimal, both may round to the same figure on a busy
    // machine (0.4% and 0.4%): the strict comparison is the JSONL's below.
    EXPECT_LE(mfu, hfu) << log;
  }
  EXPECT_EQ(lines, 4) << log;
  EXPECT_TRUE(CpuPeakCache(path).find(CpuPeakCache::key(launch::this_cpu(), threads_here()))->raised);
  std::ifstream jsonl(config.log_file);
  for (std::string line; std::getline(jsonl, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("mfu")) continue;
    EXPECT_LT(j["mfu"].get<double>(), j["hfu"].get<double>()) << "selective recomputation adds FLOPs to HFU only";
    EXPECT_LE(j["hfu"].get<double>(), 1.0);
  }
}

// ---- ranks of one node (mpirun -np 2) ----------------------------------------------

namespace {

// One cache folder for every rank of the job: rank 0's.
std::string shared_cache_path(const TempDir& mine) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string path = mine / "cpu_peak.json";
  int size = static_cast<int>(path.size());
  MPI_Bcast(&size, 1, MPI_INT, 0, MPI_COMM_WORLD);
  path.resize(static_cast<std::size_t>(size));
  MPI_Bcast(path.data(), size, MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

MPI_Comm node_comm() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  return node;
}

}  // namespace

TEST(CpuPeakWorld, RanksOnOneNodeShareItsPeak) {
  TempDir dir("cpu_peak_world");
  launch::CpuPeakOptions options;
  options.cache_path = shared_cache_path(dir);
  options.measure_seconds = kShortMeasure;
  MPI_Comm node = node_comm();
  const launch::NodeShare share = launch::node_share(node);
  MPI_Comm_free(&node);
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (share.local_ranks != world) GTEST_SKIP() << "the ranks are on several nodes";
  if (rank == 0) store(options.cache_path, share.threads, 300.0);
  MPI_Barrier(MPI_COMM_WORLD);
  const CpuPeak peak = launch::resolve_cpu_peak(MPI_COMM_WORLD, options);
  EXPECT_EQ(peak.nodes, 1);
  EXPECT_EQ(peak.share.local_ranks, world);
  EXPECT_EQ(peak.share.threads, share.threads);
  EXPECT_DOUBLE_EQ(peak.node, 300e9);
  EXPECT_DOUBLE_EQ(peak.per_rank, 300e9 / world) << "the node's ranks share its peak";
  EXPECT_FALSE(peak.measured_now);
  EXPECT_EQ(peak.writes_cache, rank == 0);
  if (world > 1) {
    const std::string line = peak.describe();
    EXPECT_NE(line.find("(" + std::to_string(world) + " ranks share it, "), std::string::npos) << line;
  }
}

TEST(CpuPeakWorld, RanksOnOneNodeMeasureOnceAndAgree) {
  TempDir dir("cpu_peak_world_measure");
  launch::CpuPeakOptions options;
  options.cache_path = shared_cache_path(dir);
  options.measure_seconds = kShortMeasure;
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const CpuPeak peak = launch::resolve_cpu_peak(MPI_COMM_WORLD, options);
  if (peak.share.local_ranks != world) GTEST_SKIP() << "the ranks are on several nodes";
  EXPECT_TRUE(peak.measured_now);
  double lowest = peak.node, highest = peak.node;
  MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &highest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lowest, highest) << "one measurement, every rank's";
  EXPECT_DOUBLE_EQ(peak.per_rank, peak.node / world);
  // The threads the node runs: as many as its ranks ask for, up to its cores.
  int asked = omp_get_max_threads();
  MPI_Allreduce(MPI_IN_PLACE, &asked, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(peak.share.threads, std::min(asked, peak.share.cores));
  const nlohmann::json j = read_json(options.cache_path);
  // The cache lives in rank 0's temporary folder, removed when rank 0 leaves
  // this test: every rank reads it before any leaves.
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_TRUE(j.is_object()) << "the cache file is JSON";
  EXPECT_EQ(j["peaks"].size(), 1u) << j.dump(2);
}

// The GPU side of the MFU denominator: the data-sheet table looked up by the
// name CUDA reports (the names below are those of the lent H100s and of the
// A100s in the planner's sources). An unknown GPU gets 0, which `train` turns
// into "no peak FLOP/s known for GPU '...'; give it with --peak-tflops"
// (launch/run/peak_flops.cpp) rather than an MFU against a guess.
TEST(GpuPeak, DataSheetPeaksByDeviceName) {
  EXPECT_DOUBLE_EQ(engine::gpu_peak_flops_by_name("NVIDIA H100 80GB HBM3"), 989e12);
  EXPECT_DOUBLE_EQ(engine::gpu_peak_flops_by_name("NVIDIA H200"), 989e12);
  EXPECT_DOUBLE_EQ(engine::gpu_peak_flops_by_name("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_DOUBLE_EQ(engine::gpu_peak_flops_by_name("NVIDIA L40S"), 362e12);
  EXPECT_DOUBLE_EQ(engine::gpu_peak_flops_by_name("NVIDIA GeForce RTX 4090"), 0.0);
  EXPECT_DOUBLE_EQ(engine::gpu_peak_flops_by_name(""), 0.0);
}
