// The on-disk cache of node peaks, keyed by machine and thread count: its
// path, its key, reading and writing it (CpuPeakCache, cpu_peak.h).
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/check.h"
#include "launch/files/atomic_file.h"
#include "launch/files/cache_dir.h"
#include "launch/files/untrusted_json.h"
#include "launch/hardware/cpu_peak.h"
#include "launch/hardware/cpu_peak_internal.h"

namespace launch {

using cpu_peak_internal::kHow;
using cpu_peak_internal::plural;

namespace {

constexpr const char* kCacheFormat = "gpt-engine CPU peak cache, version 1";

}  // namespace

std::string cpu_peak_cache_path() {
  const std::string dir = engine_cache_dir();
  return dir.empty() ? "" : (std::filesystem::path(dir) / "cpu_peak.json").string();
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
  // A damaged cache is replaced, not fatal: too large or too deeply nested
  // (launch/files/untrusted_json.h) counts as damaged like invalid JSON.
  const std::string body = text.str();
  const bool bounded = body.size() <= kMaxConfigJsonBytes && json_nesting_depth(body) <= kMaxJsonDepth;
  nlohmann::json j = bounded ? nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false)
                             : nlohmann::json(nlohmann::json::value_t::discarded);
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

}  // namespace launch
