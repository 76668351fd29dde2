// Cluster files (launch/plan/cluster_file.h): human units in, SI units out and back
// again; every kind of mistake refused with one line naming the file and the
// key; the example clusters under examples/scaling/clusters/ read.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/check.h"
#include "launch/plan/cluster_file.h"
#include "tests/launch/training_fixture.h"
#include "tests/support/hostile_json.h"

using launch::read_cluster_file;
using launch::read_cluster_file_and_sources;
using launch::write_cluster_file;
using test_support::TempDir;

namespace {

const char* kSelene = R"({
  "name": "selene-a100-80gb",
  "device": "cuda",
  "devices_per_node": 8,
  "peak_tflops": 312,
  "memory_gib": 80,
  "gemm_efficiency": 0.8,
  "memory_bandwidth_gb_per_s": 2039,
  "op_overhead_us": 5,
  "intra_node": {"bandwidth_gb_per_s": 230, "latency_us": 10},
  "inter_node": {"bandwidth_gb_per_s": 23, "latency_us": 15},
  "storage_write_gb_per_s": 2,
  "sources": {"peak_tflops": "A100 datasheet", "intra_node.latency_us": "nccl-tests"}
})";

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The file as JSON, to change one key at a time.
nlohmann::ordered_json selene() { return nlohmann::ordered_json::parse(kSelene); }

// The error message reading `text` gives; fails the test if it reads.
std::string error_reading_text(const TempDir& dir, const std::string& text) {
  const std::string path = dir / "cluster.json";
  write_text(path, text);
  try {
    read_cluster_file(path);
  } catch (const engine::Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
    EXPECT_NE(message.find(path), std::string::npos) << "names the file: " << message;
    return message;
  }
  ADD_FAILURE() << "read without error: " << text;
  return "";
}
std::string error_reading(const TempDir& dir, const nlohmann::ordered_json& json) {
  return error_reading_text(dir, json.dump());
}

#define EXPECT_MENTIONS(message, part) EXPECT_NE((message).find(part), std::string::npos) << (message)

}  // namespace

TEST(ClusterFile, ReadsHumanUnitsAsSi) {
  TempDir dir("cluster_file");
  write_text(dir / "selene.json", kSelene);
  const launch::ClusterFile file = read_cluster_file_and_sources(dir / "selene.json");
  const parallel::Cluster& c = file.cluster;
  EXPECT_EQ(c.name, "selene-a100-80gb");
  EXPECT_EQ(c.device, engine::DeviceType::kCuda);
  EXPECT_EQ(c.devices_per_node, 8);
  EXPECT_DOUBLE_EQ(c.peak_flops, 312e12);
  EXPECT_DOUBLE_EQ(c.memory_bytes, 80.0 * 1024 * 1024 * 1024);  // GiB: 2^30
  EXPECT_DOUBLE_EQ(c.gemm_efficiency, 0.8);
  EXPECT_DOUBLE_EQ(c.memory_bandwidth, 2039e9);  // GB: 1e9
  EXPECT_DOUBLE_EQ(c.op_overhead_seconds, 5e-6);
  EXPECT_DOUBLE_EQ(c.intra_node.bandwidth_bytes_per_second, 230e9);
  EXPECT_DOUBLE_EQ(c.intra_node.latency_seconds, 10e-6);
  EXPECT_DOUBLE_EQ(c.inter_node.bandwidth_bytes_per_second, 23e9);
  EXPECT_DOUBLE_EQ(c.inter_node.latency_seconds, 15e-6);
  EXPECT_DOUBLE_EQ(c.storage_write_bandwidth, 2e9);
  ASSERT_EQ(file.sources.size(), 2u);
  EXPECT_EQ(file.sources.at("peak_tflops"), "A100 datasheet");
  EXPECT_EQ(file.sources.at("intra_node.latency_us"), "nccl-tests");
}

TEST(ClusterFile, RoundTripsExactly) {
  TempDir dir("cluster_file");
  write_text(dir / "a.json", kSelene);
  const launch::ClusterFile a = read_cluster_file_and_sources(dir / "a.json");
  write_cluster_file(dir / "b.json", a.cluster, a.sources);
  const launch::ClusterFile b = read_cluster_file_and_sources(dir / "b.json");
  EXPECT_EQ(b.cluster.name, a.cluster.name);
  EXPECT_EQ(b.cluster.device, a.cluster.device);
  EXPECT_EQ(b.cluster.devices_per_node, a.cluster.devices_per_node);
  EXPECT_EQ(b.cluster.peak_flops, a.cluster.peak_flops);
  EXPECT_EQ(b.cluster.memory_bytes, a.cluster.memory_bytes);
  EXPECT_EQ(b.cluster.gemm_efficiency, a.cluster.gemm_efficiency);
  EXPECT_EQ(b.cluster.memory_bandwidth, a.cluster.memory_bandwidth);
  EXPECT_EQ(b.cluster.op_overhead_seconds, a.cluster.op_overhead_seconds);
  EXPECT_EQ(b.cluster.intra_node.latency_seconds, a.cluster.intra_node.latency_seconds);
  EXPECT_EQ(b.cluster.intra_node.bandwidth_bytes_per_second, a.cluster.intra_node.bandwidth_bytes_per_second);
  EXPECT_EQ(b.cluster.inter_node.latency_seconds, a.cluster.inter_node.latency_seconds);
  EXPECT_EQ(b.cluster.inter_node.bandwidth_bytes_per_second, a.cluster.inter_node.bandwidth_bytes_per_second);
  EXPECT_EQ(b.cluster.storage_write_bandwidth, a.cluster.storage_write_bandwidth);
  EXPECT_EQ(b.sources, a.sources);

  // Round figures stay round in the file (5 us, not 4.999999999999999).
  std::ifstream in(dir / "b.json");
  const nlohmann::json written = nlohmann::json::parse(in);
  EXPECT_EQ(written.at("op_overhead_us").dump(), "5.0");
  EXPECT_EQ(written.at("intra_node").at("latency_us").dump(), "10.0");
  EXPECT_EQ(written.at("peak_tflops").dump(), "312.0");
  EXPECT_EQ(written.at("memory_gib").dump(), "80.0");
  EXPECT_FALSE(std::filesystem::exists(dir / "b.json.tmp"));
}

TEST(ClusterFile, RoundTripsMeasuredFiguresAndCpu) {
  TempDir dir("cluster_file");
  parallel::Cluster c;
  c.name = "laptop";
  c.device = engine::DeviceType::kCpu;
  c.devices_per_node = 2;
  c.peak_flops = 61.23456789e9;
  c.memory_bytes = 12.3456789e9;
  c.gemm_efficiency = 0.7123;
  c.memory_bandwidth = 9.87654321e9;
  c.op_overhead_seconds = 1.234e-6;
  c.intra_node = {3.21e-6, 4.56e9};
  c.inter_node = c.intra_node;
  c.storage_write_bandwidth = 0;  // unknown
  write_cluster_file(dir / "c.json", c, {});
  // Any double reads back within an ulp (unit conversions round); figures
  // that came from a file or from rounded_for_file read back exactly.
  const parallel::Cluster r = read_cluster_file(dir / "c.json");
  EXPECT_EQ(r.device, engine::DeviceType::kCpu);
  EXPECT_EQ(r.devices_per_node, 2);
  EXPECT_DOUBLE_EQ(r.peak_flops, c.peak_flops);
  EXPECT_DOUBLE_EQ(r.memory_bytes, c.memory_bytes);
  EXPECT_DOUBLE_EQ(r.gemm_efficiency, c.gemm_efficiency);
  EXPECT_DOUBLE_EQ(r.memory_bandwidth, c.memory_bandwidth);
  EXPECT_DOUBLE_EQ(r.op_overhead_seconds, c.op_overhead_seconds);
  EXPECT_DOUBLE_EQ(r.intra_node.latency_seconds, c.intra_node.latency_seconds);
  EXPECT_DOUBLE_EQ(r.inter_node.bandwidth_bytes_per_second, c.inter_node.bandwidth_bytes_per_second);
  EXPECT_EQ(r.storage_write_bandwidth, 0);
}

TEST(ClusterFile, RoundedFiguresReadAsWritten) {
  TempDir dir("cluster_file");
  parallel::Cluster c;
  c.name = "measured";
  c.device = engine::DeviceType::kCpu;
  c.peak_flops = 31.0712345e9;
  c.memory_bytes = 11.771917343139648 * 1073741824.0;
  c.gemm_efficiency = 0.47812;
  c.memory_bandwidth = 6.65512e9;
  c.op_overhead_seconds = 0.39420000000000005e-6;
  c.intra_node = {0.836412e-6, 0.380912e9};
  c.inter_node = c.intra_node;
  c.storage_write_bandwidth = 0.2648123e9;
  const parallel::Cluster r = launch::rounded_for_file(c, 4);
  write_cluster_file(dir / "r.json", r, {});
  std::ifstream in(dir / "r.json");
  const nlohmann::json written = nlohmann::json::parse(in);
  EXPECT_EQ(written.at("peak_tflops").dump(), "0.03107");
  EXPECT_EQ(written.at("memory_gib").dump(), "11.77");
  EXPECT_EQ(written.at("gemm_efficiency").dump(), "0.4781");
  EXPECT_EQ(written.at("memory_bandwidth_gb_per_s").dump(), "6.655");
  EXPECT_EQ(written.at("op_overhead_us").dump(), "0.3942");
  EXPECT_EQ(written.at("intra_node").at("latency_us").dump(), "0.8364");
  EXPECT_EQ(written.at("inter_node").at("bandwidth_gb_per_s").dump(), "0.3809");
  EXPECT_EQ(written.at("storage_write_gb_per_s").dump(), "0.2648");
  const parallel::Cluster back = read_cluster_file(dir / "r.json");
  EXPECT_EQ(back.op_overhead_seconds, r.op_overhead_seconds);
  EXPECT_EQ(back.memory_bytes, r.memory_bytes);
  EXPECT_EQ(back.intra_node.latency_seconds, r.intra_node.latency_seconds);
  EXPECT_THROW(launch::rounded_for_file(c, 0), engine::Error);
}

TEST(ClusterFile, OptionalKeysMayBeAbsent) {
  TempDir dir("cluster_file");
  auto json = selene();
  json.erase("storage_write_gb_per_s");
  json.erase("sources");
  write_text(dir / "c.json", json.dump());
  const launch::ClusterFile file = read_cluster_file_and_sources(dir / "c.json");
  EXPECT_EQ(file.cluster.storage_write_bandwidth, 0);
  EXPECT_TRUE(file.sources.empty());
}

TEST(ClusterFile, RefusesMissingFileAndBadJson) {
  TempDir dir("cluster_file");
  EXPECT_THROW(read_cluster_file(dir / "absent.json"), engine::Error);
  EXPECT_MENTIONS(error_reading_text(dir, "{\"name\": "), "not valid JSON");
  EXPECT_MENTIONS(error_reading_text(dir, "[1, 2]"), "must hold a JSON object");
}

TEST(ClusterFile, RefusesUnknownAndDuplicateKeys) {
  TempDir dir("cluster_file");
  auto json = selene();
  json["peak_tflop"] = 312;
  EXPECT_MENTIONS(error_reading(dir, json), "unknown key 'peak_tflop'");
  json = selene();
  json["intra_node"]["bandwidth"] = 1;
  EXPECT_MENTIONS(error_reading(dir, json), "unknown key 'intra_node.bandwidth'");
  json = selene();
  json["sources"]["peak_flops"] = "x";
  EXPECT_MENTIONS(error_reading(dir, json), "'sources.peak_flops' names no key");

  std::string text = kSelene;
  text.replace(text.find("\"memory_gib\": 80"), 16, "\"memory_gib\": 80, \"memory_gib\": 40");
  EXPECT_MENTIONS(error_reading_text(dir, text), "key 'memory_gib' is given twice");
  text = kSelene;
  text.replace(text.find("\"latency_us\": 10"), 16, "\"latency_us\": 10, \"latency_us\": 1");
  EXPECT_MENTIONS(error_reading_text(dir, text), "key 'intra_node.latency_us' is given twice");
}

TEST(ClusterFile, RefusesMissingRequiredKeys) {
  TempDir dir("cluster_file");
  for (const char* key : {"name", "device", "devices_per_node", "peak_tflops", "memory_gib", "gemm_efficiency",
                          "memory_bandwidth_gb_per_s", "op_overhead_us", "intra_node", "inter_node"}) {
    auto json = selene();
    json.erase(key);
    EXPECT_MENTIONS(error_reading(dir, json), std::string("required key '") + key + "' is missing");
  }
  auto json = selene();
  json["inter_node"].erase("latency_us");
  EXPECT_MENTIONS(error_reading(dir, json), "required key 'inter_node.latency_us' is missing");
}

TEST(ClusterFile, RefusesWrongTypes) {
  TempDir dir("cluster_file");
  auto json = selene();
  json["peak_tflops"] = "312";
  EXPECT_MENTIONS(error_reading(dir, json), "key 'peak_tflops' must be a number of TFLOP/s, got \"312\"");
  json = selene();
  json["devices_per_node"] = 8.0;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'devices_per_node' must be an integer >= 1, got 8.0");
  json = selene();
  json["name"] = 3;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'name' must be a string");
  json = selene();
  json["device"] = "tpu";
  EXPECT_MENTIONS(error_reading(dir, json), "key 'device' must be \"cpu\" or \"cuda\", got \"tpu\"");
  json = selene();
  json["intra_node"] = 230;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'intra_node' must be an object");
  json = selene();
  json["inter_node"]["bandwidth_gb_per_s"] = true;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'inter_node.bandwidth_gb_per_s' must be a number of GB/s");
  json = selene();
  json["sources"] = "datasheet";
  EXPECT_MENTIONS(error_reading(dir, json), "key 'sources' must be an object");
  json = selene();
  json["sources"]["memory_gib"] = 80;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'sources.memory_gib' must be a string");
}

TEST(ClusterFile, RefusesNonPositiveFigures) {
  TempDir dir("cluster_file");
  for (const char* key : {"peak_tflops", "memory_gib", "gemm_efficiency", "memory_bandwidth_gb_per_s",
                          "op_overhead_us"}) {
    for (const double bad : {0.0, -1.0}) {
      auto json = selene();
      json[key] = bad;
      EXPECT_MENTIONS(error_reading(dir, json), std::string("key '") + key + "' must be a positive number");
    }
  }
  auto json = selene();
  json["intra_node"]["latency_us"] = -2;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'intra_node.latency_us' must be a positive number of us, got -2");
  json = selene();
  json["inter_node"]["bandwidth_gb_per_s"] = 0;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'inter_node.bandwidth_gb_per_s' must be a positive number");
  json = selene();
  json["devices_per_node"] = 0;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'devices_per_node' must be an integer >= 1, got 0");
  json = selene();
  json["storage_write_gb_per_s"] = -1;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'storage_write_gb_per_s' must be a non-negative number");
  json = selene();
  json["storage_write_gb_per_s"] = 0;  // unknown: allowed
  write_text(dir / "ok.json", json.dump());
  EXPECT_EQ(read_cluster_file(dir / "ok.json").storage_write_bandwidth, 0);
  // The FP8 speedup: optional, in [0, 4] (FP8 tensor cores peak at 2x bf16's).
  json = selene();
  json["fp8_gemm_speedup"] = 5;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'fp8_gemm_speedup' must be in [0, 4] (0 = not measured), got 5");
  json["fp8_gemm_speedup"] = -1;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'fp8_gemm_speedup' must be a non-negative number");
  json["fp8_gemm_speedup"] = 1.6;
  write_text(dir / "fp8.json", json.dump());
  const parallel::Cluster fp8 = read_cluster_file(dir / "fp8.json");
  EXPECT_EQ(fp8.fp8_gemm_speedup, 1.6);
  // Written when measured, left out when not (a reader before the key refuses it).
  write_cluster_file(dir / "fp8_out.json", fp8, {});
  const auto text_of = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  EXPECT_NE(text_of(dir / "fp8_out.json").find("\"fp8_gemm_speedup\": 1.6"), std::string::npos);
  EXPECT_EQ(read_cluster_file(dir / "fp8_out.json").fp8_gemm_speedup, 1.6);
  parallel::Cluster none = fp8;
  none.fp8_gemm_speedup = 0;
  write_cluster_file(dir / "none.json", none, {});
  EXPECT_EQ(text_of(dir / "none.json").find("fp8_gemm_speedup"), std::string::npos);
}

// A figure so large that the planner's arithmetic reaches inf (1e250 TFLOP/s
// is finite, its products with device counts and seconds are not) is refused.
TEST(ClusterFile, RefusesAbsurdlyLargeFigures) {
  TempDir dir("cluster_file");
  for (const char* key : {"peak_tflops", "memory_gib", "memory_bandwidth_gb_per_s", "op_overhead_us",
                          "storage_write_gb_per_s"}) {
    auto json = selene();
    json[key] = 1e250;
    EXPECT_MENTIONS(error_reading(dir, json), std::string("key '") + key + "' must be at most");
  }
  auto json = selene();
  json["inter_node"]["bandwidth_gb_per_s"] = 1e250;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'inter_node.bandwidth_gb_per_s' must be at most");
}

TEST(ClusterFile, RefusesGemmEfficiencyAboveOne) {
  TempDir dir("cluster_file");
  auto json = selene();
  json["gemm_efficiency"] = 1.2;
  EXPECT_MENTIONS(error_reading(dir, json), "key 'gemm_efficiency' must be in (0, 1], got 1.2");
  json["gemm_efficiency"] = 1;
  write_text(dir / "ok.json", json.dump());
  EXPECT_EQ(read_cluster_file(dir / "ok.json").gemm_efficiency, 1);
}

TEST(ClusterFile, WriterRefusesWhatAReaderWould) {
  TempDir dir("cluster_file");
  write_text(dir / "a.json", kSelene);
  parallel::Cluster c = read_cluster_file(dir / "a.json");
  c.gemm_efficiency = 1.5;
  EXPECT_THROW(write_cluster_file(dir / "b.json", c, {}), engine::Error);
  c.gemm_efficiency = 0.5;
  c.inter_node.latency_seconds = std::nan("");
  EXPECT_THROW(write_cluster_file(dir / "b.json", c, {}), engine::Error);
  c.inter_node.latency_seconds = 1e-5;
  EXPECT_THROW(write_cluster_file(dir / "b.json", c, {{"nonsense", "x"}}), engine::Error);
  EXPECT_FALSE(std::filesystem::exists(dir / "b.json"));
  write_cluster_file(dir / "b.json", c, {{"inter_node", "whole link"}});
  EXPECT_EQ(read_cluster_file_and_sources(dir / "b.json").sources.at("inter_node"), "whole link");
}

// The clusters the scaling experiments use are valid, and say where every figure comes from.
TEST(ClusterFile, ExampleClustersReadWithASourceForEveryKey) {
  const std::filesystem::path folder = std::filesystem::path(ENGINE_SOURCE_DIR) / "examples/scaling/clusters";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    const launch::ClusterFile file = read_cluster_file_and_sources(entry.path().string());
    for (const char* key : {"name", "device", "devices_per_node", "peak_tflops", "memory_gib", "gemm_efficiency",
                            "memory_bandwidth_gb_per_s", "op_overhead_us", "intra_node.bandwidth_gb_per_s",
                            "intra_node.latency_us", "inter_node.bandwidth_gb_per_s", "inter_node.latency_us"})
      EXPECT_TRUE(file.sources.count(key)) << entry.path() << " gives no source for " << key;
    // The one optional figure needs a source only where the file gives it.
    if (file.cluster.storage_write_bandwidth > 0)
      EXPECT_TRUE(file.sources.count("storage_write_gb_per_s"))
          << entry.path() << " gives no source for storage_write_gb_per_s";
  }
  EXPECT_GE(files, 1);
}

// Hostile cluster files (tests/support/hostile_json.h) are each read or
// refused in one line; none crashes (a 100000-deep file overflowed the stack).
TEST(ClusterFile, HostileFilesAreReadOrRefusedInOneLine) {
  TempDir dir("cluster_file");
  const std::string path = dir / "cluster.json";
  const auto variants = engine_test::hostile_json_variants(kSelene);
  const std::size_t refused = engine_test::expect_accepted_or_one_line(variants, [&](const std::string& text) {
    write_text(path, text);
    read_cluster_file_and_sources(path);
  });
  EXPECT_GT(refused, variants.size() / 2);
}

// "gemm_rates": the efficiencies of a table of product shapes round-trip,
// and every kind of bad entry is refused naming the entry and its key.
TEST(ClusterFile, GemmRatesRoundTripAndBadEntriesAreNamed) {
  TempDir dir("cluster_file_gemm_rates");
  nlohmann::ordered_json j = selene();
  j["gemm_rates"] = nlohmann::ordered_json::array(
      {{{"m", 8192}, {"n", 6144}, {"k", 2048}, {"efficiency", 0.74}},
       {{"m", 2048}, {"n", 2048}, {"k", 8192}, {"efficiency", 0.61}}});
  write_text(dir / "a.json", j.dump());
  const launch::ClusterFile a = read_cluster_file_and_sources(dir / "a.json");
  ASSERT_EQ(a.cluster.gemm_rates.size(), 2u);
  EXPECT_EQ(a.cluster.gemm_rates[1].k, 8192);
  EXPECT_EQ(a.cluster.gemm_rates[0].efficiency, 0.74);
  write_cluster_file(dir / "b.json", a.cluster, {{"gemm_rates", "measured at gpt2-1558m's shapes"}});
  const launch::ClusterFile b = read_cluster_file_and_sources(dir / "b.json");
  ASSERT_EQ(b.cluster.gemm_rates.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(b.cluster.gemm_rates[i].m, a.cluster.gemm_rates[i].m);
    EXPECT_EQ(b.cluster.gemm_rates[i].n, a.cluster.gemm_rates[i].n);
    EXPECT_EQ(b.cluster.gemm_rates[i].k, a.cluster.gemm_rates[i].k);
    EXPECT_EQ(b.cluster.gemm_rates[i].efficiency, a.cluster.gemm_rates[i].efficiency);
  }
  EXPECT_EQ(b.sources.at("gemm_rates"), "measured at gpt2-1558m's shapes");

  auto with = [&](const nlohmann::ordered_json& rates) {
    nlohmann::ordered_json bad = selene();
    bad["gemm_rates"] = rates;
    return error_reading(dir, bad);
  };
  using J = nlohmann::ordered_json;
  EXPECT_MENTIONS(with(J::object()), "'gemm_rates' must be an array");
  EXPECT_MENTIONS(with(J::array({1})), "'gemm_rates[0]' must be an object");
  EXPECT_MENTIONS(with(J::array({{{"m", 1}, {"n", 2}, {"efficiency", 0.5}}})), "'gemm_rates[0].k' is missing");
  EXPECT_MENTIONS(with(J::array({{{"m", 1}, {"n", 2}, {"k", 0}, {"efficiency", 0.5}}})),
                  "'gemm_rates[0].k' must be an integer in [1, ");
  EXPECT_MENTIONS(with(J::array({{{"m", 1.5}, {"n", 2}, {"k", 3}, {"efficiency", 0.5}}})),
                  "'gemm_rates[0].m' must be an integer");
  EXPECT_MENTIONS(with(J::array({{{"m", 1}, {"n", 2}, {"k", 3}, {"efficiency", 1.5}}})),
                  "'gemm_rates[0].efficiency' must be in (0, 1], got 1.5");
  EXPECT_MENTIONS(with(J::array({{{"m", 1}, {"n", 2}, {"k", 3}, {"efficiency", "fast"}}})),
                  "'gemm_rates[0].efficiency' must be a number");
  EXPECT_MENTIONS(with(J::array({{{"m", 1}, {"n", 2}, {"k", 3}, {"efficiency", 0.5}, {"batch", 4}}})),
                  "unknown key 'gemm_rates[0].batch'");
}

// A link's optional all-gather and reduce-scatter bandwidths round-trip, are
// absent when not measured, and must be non-negative.
TEST(ClusterFile, LinkCollectiveBandwidthsAreOptional) {
  TempDir dir("cluster_file_link_collectives");
  nlohmann::ordered_json j = selene();
  j["intra_node"]["all_gather_gb_per_s"] = 180;
  j["intra_node"]["reduce_scatter_gb_per_s"] = 170;
  write_text(dir / "a.json", j.dump());
  const parallel::Cluster a = read_cluster_file(dir / "a.json");
  EXPECT_EQ(a.intra_node.all_gather_bytes_per_second, 180e9);
  EXPECT_EQ(a.intra_node.reduce_scatter_bytes_per_second, 170e9);
  EXPECT_EQ(a.inter_node.all_gather_bytes_per_second, 0.0);  // not given: not measured
  write_cluster_file(dir / "b.json", a, {{"intra_node.all_gather_gb_per_s", "measured"}});
  std::ifstream in(dir / "b.json");
  const nlohmann::json written = nlohmann::json::parse(in);
  EXPECT_EQ(written.at("intra_node").at("all_gather_gb_per_s").get<double>(), 180.0);
  EXPECT_FALSE(written.at("inter_node").contains("all_gather_gb_per_s"));
  EXPECT_EQ(read_cluster_file(dir / "b.json").intra_node.reduce_scatter_bytes_per_second, 170e9);
  j["intra_node"]["all_gather_gb_per_s"] = -1;
  EXPECT_MENTIONS(error_reading(dir, j), "'intra_node.all_gather_gb_per_s' must be a non-negative number");
}

// A link's curves by message size round-trip exactly, are absent when not
// measured, and a bad one is named in one line.
TEST(ClusterFile, LinkCurvesBySizeRoundTripAndBadOnesAreNamed) {
  TempDir dir("cluster_file_link_curves");
  using J = nlohmann::ordered_json;
  J j = selene();
  j["intra_node"]["all_reduce_by_size"] = J::array({{{"bytes", 65536}, {"gb_per_s", 1.25}},
                                                    {{"bytes", 1048576}, {"gb_per_s", 3.5}}});
  j["intra_node"]["reduce_scatter_by_size"] = J::array({{{"bytes", 65536}, {"gb_per_s", 0.7}}});
  write_text(dir / "a.json", j.dump());
  const parallel::Cluster a = read_cluster_file(dir / "a.json");
  ASSERT_EQ(a.intra_node.all_reduce_by_size.size(), 2u);
  EXPECT_EQ(a.intra_node.all_reduce_by_size[1], (parallel::BandwidthAtSize{1048576, 3.5e9}));
  EXPECT_EQ(a.intra_node.reduce_scatter_by_size.at(0), (parallel::BandwidthAtSize{65536, 0.7e9}));
  EXPECT_TRUE(a.intra_node.all_gather_by_size.empty());
  EXPECT_TRUE(a.inter_node.all_reduce_by_size.empty());
  write_cluster_file(dir / "b.json", a, {{"intra_node.all_reduce_by_size", "measured"}});
  const parallel::Cluster b = read_cluster_file(dir / "b.json");
  EXPECT_EQ(b.intra_node.all_reduce_by_size, a.intra_node.all_reduce_by_size);
  EXPECT_EQ(b.intra_node.reduce_scatter_by_size, a.intra_node.reduce_scatter_by_size);
  std::ifstream in(dir / "b.json");
  EXPECT_FALSE(nlohmann::json::parse(in).at("inter_node").contains("all_reduce_by_size"));

  const auto with = [&](const J& curve) {
    J k = selene();
    k["intra_node"]["all_gather_by_size"] = curve;
    return error_reading(dir, k);
  };
  EXPECT_MENTIONS(with(4), "'intra_node.all_gather_by_size' must be an array");
  EXPECT_MENTIONS(with(J::array({7})), "'intra_node.all_gather_by_size[0]' must be an object");
  EXPECT_MENTIONS(with(J::array({{{"bytes", 1024}}})), "'intra_node.all_gather_by_size[0].gb_per_s' is missing");
  EXPECT_MENTIONS(with(J::array({{{"bytes", 10.5}, {"gb_per_s", 1}}})),
                  "'intra_node.all_gather_by_size[0].bytes' must be an integer in [1, ");
  EXPECT_MENTIONS(with(J::array({{{"bytes", 0}, {"gb_per_s", 1}}})),
                  "'intra_node.all_gather_by_size[0].bytes' must be an integer in [1, ");
  EXPECT_MENTIONS(with(J::array({{{"bytes", 1024}, {"gb_per_s", -2}}})),
                  "'intra_node.all_gather_by_size[0].gb_per_s' must be a positive number");
  EXPECT_MENTIONS(with(J::array({{{"bytes", 1024}, {"gb_per_s", 1e8}}})),
                  "'intra_node.all_gather_by_size[0].gb_per_s' must be at most");
  EXPECT_MENTIONS(with(J::array({{{"bytes", 4096}, {"gb_per_s", 1}}, {{"bytes", 1024}, {"gb_per_s", 1}}})),
                  "'intra_node.all_gather_by_size[1].bytes' (1024) must be larger than the size before it");
  EXPECT_MENTIONS(with(J::array({{{"bytes", 1024}, {"gb_per_s", 1}, {"latency_us", 3}}})),
                  "unknown key 'intra_node.all_gather_by_size[0].latency_us'");
  J many = J::array();
  for (int i = 1; i <= 65; ++i) many.push_back({{"bytes", i}, {"gb_per_s", 1}});
  EXPECT_MENTIONS(with(many), "'intra_node.all_gather_by_size' holds 65 sizes, more than 64");
}
