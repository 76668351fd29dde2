// `plan --calibrate` (launch/plan/calibrate.h) with short budgets: every figure
// positive and finite, the same on every rank, devices_per_node the ranks of
// this one node, the file rank 0 writes reads back with a source for every
// key, and a failure on one rank fails every rank. Run under mpirun -np 2
// (two ranks of one node: a real intra-node link) and alone (one rank: the
// stand-in link).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/check.h"
#include "launch/hardware/cpu_peak.h"
#include "launch/plan/calibrate.h"
#include "launch/plan/calibration_probes.h"
#include "launch/plan/cluster_file.h"
#include "tests/launch/training_fixture.h"
#include "tests/support/mpi_world.h"

using test_support::world_rank;
using test_support::world_size;

namespace {

// A folder every rank uses: rank 0's, removed when the test ends (after every rank is done with it).
class SharedDir {
 public:
  SharedDir() {
    if (world_rank() == 0) dir_ = std::make_unique<test_support::TempDir>("calibrate");
    std::string path = dir_ ? dir_->path().string() : "";
    int n = static_cast<int>(path.size());
    MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path.resize(n);
    MPI_Bcast(path.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = path;
  }
  ~SharedDir() { MPI_Barrier(MPI_COMM_WORLD); }
  std::string operator/(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::unique_ptr<test_support::TempDir> dir_;
  std::string path_;
};

launch::CalibrateOptions short_options(const SharedDir& dir) {
  launch::CalibrateOptions o;
  o.seconds = 0.2;
  o.output_path = dir / "cluster.json";
  o.storage_dir = dir.path();
  o.storage_bytes = std::size_t{8} << 20;
  o.cpu_peak.cache_path = dir / "cpu_peak.json";  // never the user's cache
  o.cpu_peak.measure_seconds = 0.1;
  return o;
}

bool positive_finite(double v) { return std::isfinite(v) && v > 0; }

// The same value on every rank.
void expect_same_everywhere(double v, const char* what) {
  double lo = v, hi = v;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << what << " differs between ranks";
}

void expect_close(double read, double measured, const char* what) {
  EXPECT_NEAR(read, measured, 1e-12 * std::abs(measured)) << what;
}

}  // namespace

TEST(Calibrate, MeasuresThisMachineAndWritesAFileThatReadsBack) {
  const SharedDir dir;
  const launch::Calibration result = launch::calibrate(MPI_COMM_WORLD, short_options(dir));
  const parallel::Cluster& c = result.cluster;

  // mpirun -np N on this machine: one node of N ranks.
  EXPECT_EQ(c.devices_per_node, world_size());
  for (const auto& [value, what] : std::vector<std::pair<double, const char*>>{
           {c.peak_flops, "peak_flops"},
           {c.memory_bytes, "memory_bytes"},
           {c.gemm_efficiency, "gemm_efficiency"},
           {c.memory_bandwidth, "memory_bandwidth"},
           {c.op_overhead_seconds, "op_overhead_seconds"},
           {c.intra_node.latency_seconds, "intra_node.latency_seconds"},
           {c.intra_node.bandwidth_bytes_per_second, "intra_node.bandwidth"},
           {c.inter_node.latency_seconds, "inter_node.latency_seconds"},
           {c.inter_node.bandwidth_bytes_per_second, "inter_node.bandwidth"},
           {c.storage_write_bandwidth, "storage_write_bandwidth"}}) {
    EXPECT_TRUE(positive_finite(value)) << what << " = " << value;
    expect_same_everywhere(value, what);
  }
  EXPECT_LE(c.gemm_efficiency, 1.0);
  // The block's twelve products (4 layers x forward, input and weight
  // gradient), each its own rate, the same on every rank; products of one
  // shape (the square projection's forward and input gradient, the MLP's
  // two matmuls' mirrored ones) are one entry each: the distinct shapes.
  const launch::MatmulShapes shapes = launch::default_matmul_shapes(engine::DeviceType::kCpu);
  const std::int64_t C = shapes.channels, N = shapes.tokens;
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> expected, listed;
  for (const auto& [in, out] : {std::pair{C, 3 * C}, std::pair{C, C}, std::pair{C, 4 * C}, std::pair{4 * C, C}})
    for (const auto& shape : {std::tuple{N, out, in}, std::tuple{N, in, out}, std::tuple{out, in, N}})
      expected.insert(shape);
  for (const parallel::GemmRate& g : c.gemm_rates)
    EXPECT_TRUE(listed.insert({g.m, g.n, g.k}).second) << "shape " << g.m << "x" << g.n << "x" << g.k << " listed twice";
  EXPECT_EQ(listed, expected);
  for (const parallel::GemmRate& g : c.gemm_rates) {
    EXPECT_TRUE(g.m > 0 && g.n > 0 && g.k > 0);
    EXPECT_TRUE(g.efficiency > 0 && g.efficiency <= 1.0) << g.efficiency;
    expect_same_everywhere(g.efficiency, "a gemm rate");
  }
  ASSERT_TRUE(result.sources.count("gemm_rates"));
  // With a group of two or more ranks, the unit-sized all-gather and reduce-scatter too.
  if (world_size() > 1) {
    EXPECT_TRUE(positive_finite(c.intra_node.all_gather_bytes_per_second));
    EXPECT_TRUE(positive_finite(c.intra_node.reduce_scatter_bytes_per_second));
    EXPECT_TRUE(result.sources.count("intra_node.all_gather_gb_per_s"));
    // Each collective by message size: the sizes 64 KiB to 16 MiB (rounded
    // to the group), growing, every figure positive and the same everywhere.
    for (const auto* curve : {&c.intra_node.all_reduce_by_size, &c.intra_node.all_gather_by_size,
                              &c.intra_node.reduce_scatter_by_size}) {
      // The all-reduce's ends with the large all-reduce the link's bandwidth is.
      const bool all_reduce = curve == &c.intra_node.all_reduce_by_size;
      ASSERT_EQ(curve->size(), launch::default_curve_sizes().size() + (all_reduce ? 1 : 0));
      if (all_reduce) EXPECT_EQ(curve->back().bytes_per_second, c.intra_node.bandwidth_bytes_per_second);
      for (std::size_t i = 0; i < launch::default_curve_sizes().size(); ++i) {
        EXPECT_TRUE(positive_finite((*curve)[i].bytes_per_second));
        EXPECT_LE((*curve)[i].bytes, static_cast<double>(launch::default_curve_sizes()[i]));
        expect_same_everywhere((*curve)[i].bytes_per_second, "a curve's bandwidth");
      }
      for (std::size_t i = 1; i < curve->size(); ++i) EXPECT_GT((*curve)[i].bytes, (*curve)[i - 1].bytes);
    }
    EXPECT_TRUE(result.sources.count("intra_node.all_reduce_by_size"));
  }
  // Bounds any machine meets, even one whose cores other jobs (ctest -j) keep
  // busy, where an OpenMP fork/join can take milliseconds: under a second.
  EXPECT_LT(c.intra_node.latency_seconds, 1.0);
  EXPECT_LT(c.op_overhead_seconds, 1.0);
  // One node: the inter-node link is the intra-node one, and the sources say so.
  EXPECT_EQ(c.inter_node.latency_seconds, c.intra_node.latency_seconds);
  EXPECT_EQ(c.inter_node.bandwidth_bytes_per_second, c.intra_node.bandwidth_bytes_per_second);
  ASSERT_TRUE(result.sources.count("inter_node"));
  EXPECT_NE(result.sources.at("inter_node").find("copied"), std::string::npos);

  if (world_rank() == 0) {
    const launch::ClusterFile file = launch::read_cluster_file_and_sources(dir / "cluster.json");
    const parallel::Cluster& r = file.cluster;
    EXPECT_EQ(r.name, c.name);
    EXPECT_EQ(r.device, c.device);
    EXPECT_EQ(r.devices_per_node, c.devices_per_node);
    expect_close(r.peak_flops, c.peak_flops, "peak_flops");
    expect_close(r.memory_bytes, c.memory_bytes, "memory_bytes");
    expect_close(r.gemm_efficiency, c.gemm_efficiency, "gemm_efficiency");
    expect_close(r.memory_bandwidth, c.memory_bandwidth, "memory_bandwidth");
    expect_close(r.op_overhead_seconds, c.op_overhead_seconds, "op_overhead_seconds");
    expect_close(r.intra_node.latency_seconds, c.intra_node.latency_seconds, "intra latency");
    expect_close(r.intra_node.bandwidth_bytes_per_second, c.intra_node.bandwidth_bytes_per_second, "intra bw");
    expect_close(r.inter_node.latency_seconds, c.inter_node.latency_seconds, "inter latency");
    expect_close(r.inter_node.bandwidth_bytes_per_second, c.inter_node.bandwidth_bytes_per_second, "inter bw");
    expect_close(r.storage_write_bandwidth, c.storage_write_bandwidth, "storage");
    ASSERT_EQ(r.gemm_rates.size(), c.gemm_rates.size());
    for (std::size_t i = 0; i < r.gemm_rates.size(); ++i)
      expect_close(r.gemm_rates[i].efficiency, c.gemm_rates[i].efficiency, "a gemm rate");
    EXPECT_EQ(file.sources, result.sources);
    for (const char* key : {"name", "device", "devices_per_node", "peak_tflops", "memory_gib", "gemm_efficiency",
                            "memory_bandwidth_gb_per_s", "op_overhead_us", "storage_write_gb_per_s"})
      EXPECT_TRUE(file.sources.count(key)) << "no source for " << key;
    EXPECT_NE(file.sources.at("name").find("plan --calibrate"), std::string::npos) << file.sources.at("name");
    // The storage test left nothing behind.
    for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
      EXPECT_EQ(entry.path().filename().string().rfind(".calibrate_storage", 0), std::string::npos) << entry.path();
  }
}

// A cached CPU peak that training's matmuls beat is raised to their rate (as
// the engine's MFU raises it), so peak x efficiency stays the achieved rate.
TEST(Calibrate, RaisesACpuPeakTheMatmulsBeat) {
  const SharedDir dir;
  launch::CalibrateOptions o = short_options(dir);
  o.device = engine::DeviceType::kCpu;
  o.output_path.clear();
  o.storage_dir.clear();
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank(), MPI_INFO_NULL, &node);
  const int threads = launch::node_share(node).threads;
  MPI_Comm_free(&node);
  if (world_rank() == 0) {
    const launch::CpuPeakCache cache(o.cpu_peak.cache_path);
    const launch::CpuIdentity cpu = launch::this_cpu();
    cache.store(launch::CpuPeakCache::key(cpu, threads), cpu, threads, launch::CachedPeak{1e6, "2020-01-01", false, 0});
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const launch::Calibration result = launch::calibrate(MPI_COMM_WORLD, o);
  EXPECT_EQ(result.cluster.gemm_efficiency, 1.0);
  EXPECT_GT(result.cluster.peak_flops, 1e6);  // raised from 1 MFLOP/s per node
  EXPECT_NE(result.sources.at("peak_tflops").find("raised to"), std::string::npos) << result.sources.at("peak_tflops");
  EXPECT_NE(result.sources.at("gemm_efficiency").find("raised"), std::string::npos);
  // No storage folder: unknown, and said so.
  EXPECT_EQ(result.cluster.storage_write_bandwidth, 0);
  EXPECT_NE(result.sources.at("storage_write_gb_per_s").find("not measured"), std::string::npos);
}

// `plan --calibrate --model ...` measures the matmul rate at that model's
// shapes; the sources say which.
TEST(Calibrate, TakesTheMatmulRateAtTheShapesItIsGiven) {
  const SharedDir dir;
  launch::CalibrateOptions o = short_options(dir);
  o.seconds = 0.05;
  o.output_path.clear();
  o.storage_dir.clear();
  o.matmul_channels = 48;
  o.matmul_tokens = 80;
  const launch::Calibration result = launch::calibrate(MPI_COMM_WORLD, o);
  const std::string& why = result.sources.at("gemm_efficiency");
  EXPECT_NE(why.find("C=48 on 80 tokens"), std::string::npos) << why;
  EXPECT_NE(why.find("48->192"), std::string::npos) << why;  // the MLP's first layer
  // Random operands, never constants (a GPU ran constant ones 16% faster: RESULTS.md).
  EXPECT_NE(why.find("on random normal operands"), std::string::npos) << why;
  EXPECT_TRUE(positive_finite(result.cluster.gemm_efficiency));
}

TEST(Calibrate, AFailureOnOneRankFailsEveryRank) {
  const SharedDir dir;
  launch::CalibrateOptions o = short_options(dir);
  o.seconds = 0.05;
  o.output_path.clear();
  // The last rank's storage folder does not exist.
  if (world_rank() == world_size() - 1) o.storage_dir = dir / "absent";
  try {
    launch::calibrate_cluster(MPI_COMM_WORLD, o);
    ADD_FAILURE() << "calibration succeeded";
  } catch (const engine::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("storage"), std::string::npos) << message;
    EXPECT_NE(message.find("absent"), std::string::npos) << message;
  }
}

TEST(Calibrate, RefusesBadOptions) {
  launch::CalibrateOptions o;
  o.seconds = 0;
  EXPECT_THROW(launch::calibrate_cluster(MPI_COMM_WORLD, o), engine::Error);
  o.seconds = 1;
  o.peak_flops = -1;
  EXPECT_THROW(launch::calibrate_cluster(MPI_COMM_WORLD, o), engine::Error);
  o.peak_flops = 0;
  o.matmul_channels = -8;
  EXPECT_THROW(launch::calibrate_cluster(MPI_COMM_WORLD, o), engine::Error);
}
