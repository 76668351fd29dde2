#include "launch/plan/cluster_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <sstream>
#include <vector>

#include "engine/check.h"
#include "launch/files/atomic_file.h"
#include "launch/files/untrusted_json.h"

namespace launch {
namespace {

// Ordered: a file is written in the order of the format's description.
using Json = nlohmann::ordered_json;

// A figure's unit in the file. Converted by multiplying with `factor` where
// the file's unit is the larger (1 TFLOP/s = 1e12 FLOP/s), and by dividing
// where it is the smaller (1 us = 1e-6 s): each direction then multiplies or
// divides by an exact integer, so round figures stay round both ways
// (5 us -> 5e-6 s -> 5 us, where multiplying by 1e-6 could give 4.999...).
struct Unit {
  double factor;
  bool smaller;  // the file's unit is 1/factor of the SI unit
  const char* name;
  double to_si(double v) const { return smaller ? v / factor : v * factor; }
  double from_si(double v) const { return smaller ? v * factor : v / factor; }
};
constexpr Unit kTflops{1e12, false, "TFLOP/s"};
constexpr Unit kGib{1073741824.0, false, "GiB"};
constexpr Unit kGbPerS{1e9, false, "GB/s"};
constexpr Unit kMicroseconds{1e6, true, "us"};
constexpr Unit kFraction{1, false, ""};

// The file's figures: its key, its unit and where it lives in the struct.
struct Figure {
  const char* key;
  Unit unit;
  double parallel::Cluster::*field;
  bool optional;
};
const std::vector<Figure>& figures() {
  static const std::vector<Figure> list = {
      {"peak_tflops", kTflops, &parallel::Cluster::peak_flops, false},
      {"memory_gib", kGib, &parallel::Cluster::memory_bytes, false},
      {"gemm_efficiency", kFraction, &parallel::Cluster::gemm_efficiency, false},
      {"memory_bandwidth_gb_per_s", kGbPerS, &parallel::Cluster::memory_bandwidth, false},
      {"op_overhead_us", kMicroseconds, &parallel::Cluster::op_overhead_seconds, false},
      {"storage_write_gb_per_s", kGbPerS, &parallel::Cluster::storage_write_bandwidth, true},
      {"fp8_gemm_speedup", kFraction, &parallel::Cluster::fp8_gemm_speedup, true},
  };
  return list;
}

struct LinkFigure {
  const char* key;
  Unit unit;
  double parallel::Link::*field;
  bool optional = false;  // absent = 0 = not measured
};
const std::vector<LinkFigure>& link_figures() {
  static const std::vector<LinkFigure> list = {
      {"bandwidth_gb_per_s", kGbPerS, &parallel::Link::bandwidth_bytes_per_second},
      {"latency_us", kMicroseconds, &parallel::Link::latency_seconds},
      {"all_gather_gb_per_s", kGbPerS, &parallel::Link::all_gather_bytes_per_second, true},
      {"reduce_scatter_gb_per_s", kGbPerS, &parallel::Link::reduce_scatter_bytes_per_second, true},
  };
  return list;
}

// A link's optional curves: a collective's bus bandwidth by message size,
// [{"bytes": 65536, "gb_per_s": 1.2}, ...] with the sizes growing.
struct LinkCurve {
  const char* key;
  std::vector<parallel::BandwidthAtSize> parallel::Link::*field;
};
const std::vector<LinkCurve>& link_curves() {
  static const std::vector<LinkCurve> list = {
      {"all_reduce_by_size", &parallel::Link::all_reduce_by_size},
      {"all_gather_by_size", &parallel::Link::all_gather_by_size},
      {"reduce_scatter_by_size", &parallel::Link::reduce_scatter_by_size},
  };
  return list;
}
// A calibration measures a handful of sizes; more points than this is a file gone wrong.
constexpr std::size_t kMostCurvePoints = 64;
// A message size: a petabyte is far beyond any collective's buffer.
constexpr long long kLargestMessageBytes = 1'000'000'000'000'000;

constexpr const char* kLinks[] = {"intra_node", "inter_node"};
parallel::Link parallel::Cluster::*link_field(const std::string& key) {
  return key == "intra_node" ? &parallel::Cluster::intra_node : &parallel::Cluster::inter_node;
}

// Every key a file may hold, in the order a file is written; "sources" may
// name any of them, and the links' inner keys as "intra_node.latency_us".
std::vector<std::string> top_keys() {
  std::vector<std::string> keys = {"name", "device", "devices_per_node"};
  for (const Figure& f : figures())
    if (!f.optional) keys.push_back(f.key);
  for (const char* link : kLinks) keys.push_back(link);
  for (const Figure& f : figures())
    if (f.optional) keys.push_back(f.key);
  keys.push_back("gemm_rates");
  keys.push_back("sources");
  return keys;
}

// A table of rates is for the shapes one model trains at; more entries than
// this is a file gone wrong.
constexpr std::size_t kMostGemmRates = 4096;
// A product's dimension: tokens or features, far beyond any real layer.
constexpr long long kLargestGemmDimension = 1'000'000'000;
std::set<std::string> source_keys() {
  std::set<std::string> keys;
  for (const std::string& key : top_keys())
    if (key != "sources") keys.insert(key);
  for (const char* link : kLinks) {
    for (const LinkFigure& f : link_figures()) keys.insert(std::string(link) + "." + f.key);
    for (const LinkCurve& f : link_curves()) keys.insert(std::string(link) + "." + f.key);
  }
  return keys;
}

std::string listed(const std::vector<std::string>& keys) {
  std::string text;
  for (const std::string& key : keys) text += (text.empty() ? "" : ", ") + key;
  return text;
}

// A value as the file has it, short enough for a one-line message.
std::string shown(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);  // untrusted bytes
  return text.size() <= 40 ? text : text.substr(0, 37) + "...";
}

std::string shown(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Parses, refusing a key given twice in one object: nlohmann keeps the last
// one silently, and only the parser callback sees every key.
Json parse_strictly(const std::string& text, const std::string& where) {
  std::vector<std::set<std::string>> open;  // the keys seen so far in each open object or array
  std::vector<std::string> path;            // the key of each open level ("" for arrays)
  std::string last_key, duplicate;
  const Json::parser_callback_t watch = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        path.push_back(open.empty() ? "" : last_key);
        open.emplace_back();
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        open.pop_back();
        path.pop_back();
        break;
      case Json::parse_event_t::key:
        last_key = parsed.get<std::string>();
        if (!open.back().insert(last_key).second && duplicate.empty())
          duplicate = path.back().empty() ? last_key : path.back() + "." + last_key;
        break;
      case Json::parse_event_t::value:
        break;
    }
    return true;
  };
  Json root;
  try {
    check_json_text(text, where, kMaxConfigJsonBytes);  // untrusted: size and nesting bounded first
    root = Json::parse(text, watch);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    ENGINE_FAIL(where, " is not valid JSON: ", e.what());
  }
  ENGINE_CHECK(duplicate.empty(), where, ": key '", duplicate, "' is given twice");
  return root;
}

// Refuses keys of `object` that are not in `known`, naming them as `prefix` + key.
void refuse_unknown(const Json& object, const std::vector<std::string>& known, const std::string& prefix,
                    const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    bool ok = false;
    for (const std::string& k : known) ok = ok || k == key;
    ENGINE_CHECK(ok, where, ": unknown key '", prefix, key, "' (a cluster file", prefix.empty() ? "" : "'s ",
                 prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1), " holds ", listed(known), ")");
  }
}

const Json& required(const Json& object, const std::string& key, const std::string& prefix, const std::string& where) {
  ENGINE_CHECK(object.contains(key), where, ": required key '", prefix, key, "' is missing");
  return object.at(key);
}

double number(const Json& value, const std::string& key, const Unit& unit, const std::string& where) {
  ENGINE_CHECK(value.is_number(), where, ": key '", key, "' must be a number", *unit.name ? " of " : "", unit.name,
               ", got ", shown(value));
  return value.get<double>();
}

// The largest figure a file may give, in its own unit: far beyond any real
// device or link (1e7 TFLOP/s, GiB, GB/s or us), yet small enough that the
// planner's products with device counts and seconds stay finite, so a typo
// such as 1e300 is refused instead of planned with and printed as inf.
constexpr double kLargestFigure = 1e7;

// "must be a positive number of GB/s, got -3"
void check_positive(double si, const std::string& key, const Unit& unit, bool zero_ok, const std::string& where) {
  const bool ok = std::isfinite(si) && (si > 0 || (zero_ok && si == 0));
  ENGINE_CHECK(ok, where, ": key '", key, "' must be a ", zero_ok ? "non-negative" : "positive", " number",
               *unit.name ? " of " : "", unit.name, zero_ok ? " (0 = unknown)" : "", ", got ", shown(unit.from_si(si)));
  ENGINE_CHECK(unit.from_si(si) <= kLargestFigure, where, ": key '", key, "' must be at most ", kLargestFigure,
               *unit.name ? " " : "", unit.name, ", got ", shown(unit.from_si(si)));
}

// The shortest decimal (in the file's unit) that a reader turns back into
// exactly `si`: unit conversions round, so the plain from_si(si) may print
// as 4.999999999999999 or read back one ulp away. Where no decimal does
// (dividing by 1e6 skips some doubles), the nearest: an ulp away.
double file_value(double si, const Unit& unit) {
  const double human = unit.from_si(si);
  for (int digits = 1; digits <= 17; ++digits) {
    char text[40];
    std::snprintf(text, sizeof text, "%.*g", digits, human);
    const double candidate = std::strtod(text, nullptr);
    if (unit.to_si(candidate) == si) return candidate;
  }
  return human;
}

// x to `digits` significant digits. Powers of ten up to 1e22 are exact
// doubles, so the scaling adds no error of its own.
double round_significant(double x, int digits) {
  if (!(x > 0) || !std::isfinite(x)) return x;
  const int shift = digits - 1 - static_cast<int>(std::floor(std::log10(x)));
  if (shift >= 0) {
    const double p = std::pow(10.0, shift);
    return std::round(x * p) / p;
  }
  const double p = std::pow(10.0, -shift);
  return std::round(x / p) * p;
}

double rounded(double si, const Unit& unit, int digits) {
  return unit.to_si(round_significant(unit.from_si(si), digits));
}

}  // namespace

parallel::Cluster rounded_for_file(const parallel::Cluster& cluster, int digits) {
  ENGINE_CHECK(digits >= 1 && digits <= 17, "rounded_for_file: digits must be in [1, 17], got ", digits);
  parallel::Cluster c = cluster;
  for (const Figure& f : figures()) c.*f.field = rounded(c.*f.field, f.unit, digits);
  for (const char* link : kLinks) {
    for (const LinkFigure& f : link_figures()) c.*link_field(link).*f.field = rounded(c.*link_field(link).*f.field, f.unit, digits);
    for (const LinkCurve& f : link_curves())
      for (parallel::BandwidthAtSize& p : c.*link_field(link).*f.field)
        p.bytes_per_second = rounded(p.bytes_per_second, kGbPerS, digits);
  }
  for (parallel::GemmRate& r : c.gemm_rates) r.efficiency = std::min(1.0, rounded(r.efficiency, kFraction, digits));
  return c;
}

void check_cluster(const parallel::Cluster& cluster, const std::string& where) {
  ENGINE_CHECK(!cluster.name.empty(), where, ": key 'name' must be a non-empty string");
  ENGINE_CHECK(cluster.device == engine::DeviceType::kCpu || cluster.device == engine::DeviceType::kCuda, where,
               ": key 'device' must be \"cpu\" or \"cuda\"");
  ENGINE_CHECK(cluster.devices_per_node >= 1, where, ": key 'devices_per_node' must be an integer >= 1, got ",
               cluster.devices_per_node);
  for (const Figure& f : figures()) check_positive(cluster.*f.field, f.key, f.unit, f.optional, where);
  // A fraction of the peak: above 1 the peak itself is wrong.
  ENGINE_CHECK(cluster.gemm_efficiency <= 1, where, ": key 'gemm_efficiency' must be in (0, 1], got ",
               shown(cluster.gemm_efficiency));
  // FP8 tensor cores peak at twice bf16's; a speedup beyond 4 is a typo.
  ENGINE_CHECK(cluster.fp8_gemm_speedup <= 4, where, ": key 'fp8_gemm_speedup' must be in [0, 4] (0 = not measured), got ",
               shown(cluster.fp8_gemm_speedup));
  ENGINE_CHECK(cluster.gemm_rates.size() <= kMostGemmRates, where, ": key 'gemm_rates' holds ",
               cluster.gemm_rates.size(), " entries, more than ", kMostGemmRates);
  for (std::size_t i = 0; i < cluster.gemm_rates.size(); ++i) {
    const parallel::GemmRate& r = cluster.gemm_rates[i];
    const std::string key = "gemm_rates[" + std::to_string(i) + "]";
    for (const auto& [name, value] : {std::pair{"m", r.m}, std::pair{"n", r.n}, std::pair{"k", r.k}})
      ENGINE_CHECK(value >= 1 && value <= kLargestGemmDimension, where, ": key '", key, ".", name,
                   "' must be an integer in [1, ", kLargestGemmDimension, "], got ", value);
    ENGINE_CHECK(std::isfinite(r.efficiency) && r.efficiency > 0 && r.efficiency <= 1, where, ": key '", key,
                 ".efficiency' must be in (0, 1], got ", shown(r.efficiency));
  }
  for (const char* link : kLinks) {
    for (const LinkFigure& f : link_figures())
      check_positive(cluster.*link_field(link).*f.field, std::string(link) + "." + f.key, f.unit, f.optional, where);
    for (const LinkCurve& f : link_curves()) {
      const std::vector<parallel::BandwidthAtSize>& curve = cluster.*link_field(link).*f.field;
      const std::string key = std::string(link) + "." + f.key;
      ENGINE_CHECK(curve.size() <= kMostCurvePoints, where, ": key '", key, "' holds ", curve.size(),
                   " sizes, more than ", kMostCurvePoints);
      for (std::size_t i = 0; i < curve.size(); ++i) {
        const std::string entry = key + "[" + std::to_string(i) + "]";
        const double bytes = curve[i].bytes;
        ENGINE_CHECK(std::isfinite(bytes) && bytes >= 1 && bytes <= static_cast<double>(kLargestMessageBytes) &&
                         bytes == std::floor(bytes),
                     where, ": key '", entry, ".bytes' must be an integer in [1, ", kLargestMessageBytes, "], got ",
                     shown(bytes));
        ENGINE_CHECK(i == 0 || bytes > curve[i - 1].bytes, where, ": key '", entry, ".bytes' (", shown(bytes),
                     ") must be larger than the size before it (", shown(curve[i - 1].bytes), "): sizes grow");
        check_positive(curve[i].bytes_per_second, entry + ".gb_per_s", kGbPerS, false, where);
      }
    }
  }
}

ClusterFile read_cluster_file_and_sources(const std::string& path) {
  const std::string where = "cluster file '" + path + "'";
  std::ifstream in(path, std::ios::binary);
  ENGINE_CHECK(in.good(), where, " cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_cluster_file(text.str(), where);
}

// Its refusals quote the file (keys, values, nlohmann-json's "last read: ..."), so each is made printable on
// the way out (launch/files/untrusted_json.h).
ClusterFile parse_cluster_file(const std::string& text, const std::string& where) try {
  const Json root = parse_strictly(text, where);
  ENGINE_CHECK(root.is_object(), where, " must hold a JSON object, got ", shown(root));
  refuse_unknown(root, top_keys(), "", where);

  ClusterFile file;
  parallel::Cluster& c = file.cluster;
  const Json& name = required(root, "name", "", where);
  ENGINE_CHECK(name.is_string(), where, ": key 'name' must be a string, got ", shown(name));
  c.name = name.get<std::string>();

  const Json& device = required(root, "device", "", where);
  ENGINE_CHECK(device.is_string() && (device == "cpu" || device == "cuda"), where,
               ": key 'device' must be \"cpu\" or \"cuda\", got ", shown(device));
  c.device = device == "cpu" ? engine::DeviceType::kCpu : engine::DeviceType::kCuda;

  const Json& per_node = required(root, "devices_per_node", "", where);
  // An integer as JSON writes one: 8, not 8.0 or "8".
  ENGINE_CHECK(per_node.is_number_integer() && per_node.get<long long>() >= 1 &&
                   per_node.get<long long>() <= 1'000'000,
               where, ": key 'devices_per_node' must be an integer >= 1, got ", shown(per_node));
  c.devices_per_node = per_node.get<int>();

  for (const Figure& f : figures()) {
    if (f.optional && !root.contains(f.key)) continue;
    c.*f.field = f.unit.to_si(number(required(root, f.key, "", where), f.key, f.unit, where));
  }
  for (const char* link : kLinks) {
    const Json& object = required(root, link, "", where);
    const std::string prefix = std::string(link) + ".";
    ENGINE_CHECK(object.is_object(), where, ": key '", link,
                 "' must be an object {\"bandwidth_gb_per_s\": ..., \"latency_us\": ...}, got ", shown(object));
    std::vector<std::string> known;
    for (const LinkFigure& f : link_figures()) known.push_back(f.key);
    for (const LinkCurve& f : link_curves()) known.push_back(f.key);
    refuse_unknown(object, known, prefix, where);
    for (const LinkFigure& f : link_figures()) {
      if (f.optional && !object.contains(f.key)) continue;
      c.*link_field(link).*f.field =
          f.unit.to_si(number(required(object, f.key, prefix, where), prefix + f.key, f.unit, where));
    }
    for (const LinkCurve& f : link_curves()) {
      if (!object.contains(f.key)) continue;
      const Json& curve = object.at(f.key);
      const std::string key = prefix + f.key;
      ENGINE_CHECK(curve.is_array(), where, ": key '", key, "' must be an array of {\"bytes\", \"gb_per_s\"} "
                   "objects, got ", shown(curve));
      ENGINE_CHECK(curve.size() <= kMostCurvePoints, where, ": key '", key, "' holds ", curve.size(),
                   " sizes, more than ", kMostCurvePoints);
      for (std::size_t i = 0; i < curve.size(); ++i) {
        const Json& point = curve[i];
        const std::string entry = key + "[" + std::to_string(i) + "].";
        ENGINE_CHECK(point.is_object(), where, ": key '", key, "[", i, "]' must be an object {\"bytes\", "
                     "\"gb_per_s\"}, got ", shown(point));
        refuse_unknown(point, {"bytes", "gb_per_s"}, entry, where);
        const Json& bytes = required(point, "bytes", entry, where);
        ENGINE_CHECK(bytes.is_number_integer() && bytes.get<long long>() >= 1 &&
                         bytes.get<long long>() <= kLargestMessageBytes,
                     where, ": key '", entry, "bytes' must be an integer in [1, ", kLargestMessageBytes, "], got ",
                     shown(bytes));
        (c.*link_field(link).*f.field)
            .push_back({static_cast<double>(bytes.get<long long>()),
                        kGbPerS.to_si(number(required(point, "gb_per_s", entry, where), entry + "gb_per_s", kGbPerS,
                                             where))});
      }
    }
  }

  if (root.contains("gemm_rates")) {
    // [{"m": 2048, "n": 1536, "k": 512, "efficiency": 0.81}, ...]
    const Json& rates = root.at("gemm_rates");
    ENGINE_CHECK(rates.is_array(), where, ": key 'gemm_rates' must be an array of {\"m\", \"n\", \"k\", "
                 "\"efficiency\"} objects, got ", shown(rates));
    ENGINE_CHECK(rates.size() <= kMostGemmRates, where, ": key 'gemm_rates' holds ", rates.size(),
                 " entries, more than ", kMostGemmRates);
    for (std::size_t i = 0; i < rates.size(); ++i) {
      const Json& entry = rates[i];
      const std::string prefix = "gemm_rates[" + std::to_string(i) + "].";
      ENGINE_CHECK(entry.is_object(), where, ": key 'gemm_rates[", i, "]' must be an object {\"m\", \"n\", "
                   "\"k\", \"efficiency\"}, got ", shown(entry));
      refuse_unknown(entry, {"m", "n", "k", "efficiency"}, prefix, where);
      parallel::GemmRate r;
      for (const auto& [name, field] : {std::pair{"m", &parallel::GemmRate::m}, std::pair{"n", &parallel::GemmRate::n},
                                        std::pair{"k", &parallel::GemmRate::k}}) {
        const Json& v = required(entry, name, prefix, where);
        ENGINE_CHECK(v.is_number_integer() && v.get<long long>() >= 1 && v.get<long long>() <= kLargestGemmDimension,
                     where, ": key '", prefix, name, "' must be an integer in [1, ", kLargestGemmDimension, "], got ",
                     shown(v));
        r.*field = v.get<std::int64_t>();
      }
      r.efficiency = number(required(entry, "efficiency", prefix, where), prefix + "efficiency", kFraction, where);
      c.gemm_rates.push_back(r);
    }
  }

  if (root.contains("sources")) {
    const Json& sources = root.at("sources");
    ENGINE_CHECK(sources.is_object(), where, ": key 'sources' must be an object of texts, got ", shown(sources));
    const std::set<std::string> allowed = source_keys();
    for (const auto& [key, value] : sources.items()) {
      ENGINE_CHECK(allowed.count(key), where, ": key 'sources." + key, "' names no key of the file");
      ENGINE_CHECK(value.is_string(), where, ": key 'sources.", key, "' must be a string, got ", shown(value));
      file.sources[key] = value.get<std::string>();
    }
  }
  check_cluster(c, where);
  return file;
} catch (const engine::Error& e) {
  throw engine::Error(printable_text(e.what()));
}

parallel::Cluster read_cluster_file(const std::string& path) { return read_cluster_file_and_sources(path).cluster; }

void write_cluster_file(const std::string& path, const parallel::Cluster& cluster,
                        const std::map<std::string, std::string>& sources) {
  const std::string where = "cluster file '" + path + "' (being written)";
  check_cluster(cluster, where);
  const std::set<std::string> allowed = source_keys();
  for (const auto& [key, text] : sources)
    ENGINE_CHECK(allowed.count(key), where, ": key 'sources.", key, "' names no key of the file");

  Json root;
  root["name"] = cluster.name;
  root["device"] = cluster.device == engine::DeviceType::kCpu ? "cpu" : "cuda";
  root["devices_per_node"] = cluster.devices_per_node;
  for (const Figure& f : figures())
    if (!f.optional) root[f.key] = file_value(cluster.*f.field, f.unit);
  for (const char* link : kLinks) {
    Json object;
    for (const LinkFigure& f : link_figures())
      if (!f.optional || cluster.*link_field(link).*f.field > 0)
        object[f.key] = file_value(cluster.*link_field(link).*f.field, f.unit);
    for (const LinkCurve& f : link_curves()) {
      if ((cluster.*link_field(link).*f.field).empty()) continue;
      Json curve = Json::array();
      for (const parallel::BandwidthAtSize& p : cluster.*link_field(link).*f.field)
        curve.push_back({{"bytes", static_cast<long long>(p.bytes)}, {"gb_per_s", file_value(p.bytes_per_second, kGbPerS)}});
      object[f.key] = curve;
    }
    root[link] = object;
  }
  for (const Figure& f : figures())  // an unmeasured FP8 speedup is left out (older readers refuse the key)
    if (f.optional && (cluster.*f.field > 0 || f.field != &parallel::Cluster::fp8_gemm_speedup))
      root[f.key] = file_value(cluster.*f.field, f.unit);
  if (!cluster.gemm_rates.empty()) {
    Json rates = Json::array();
    for (const parallel::GemmRate& r : cluster.gemm_rates)
      rates.push_back({{"m", r.m}, {"n", r.n}, {"k", r.k}, {"efficiency", file_value(r.efficiency, kFraction)}});
    root["gemm_rates"] = rates;
  }
  if (!sources.empty()) {
    // In the file's key order, not the map's alphabetical one.
    Json object = Json::object();
    std::vector<std::string> order;
    for (const std::string& key : top_keys()) {
      order.push_back(key);
      for (const char* link : kLinks)
        if (key == link) {
          for (const LinkFigure& f : link_figures()) order.push_back(key + "." + f.key);
          for (const LinkCurve& f : link_curves()) order.push_back(key + "." + f.key);
        }
    }
    for (const std::string& key : order)
      if (sources.count(key)) object[key] = sources.at(key);
    root["sources"] = object;
  }
  AtomicFile file(path);
  file.write(root.dump(2) + "\n");
  file.commit();
}

}  // namespace launch
