// The CPU as the cache tells machines apart: this_cpu (cpu_peak.h).
#include <fstream>
#include <sstream>
#include <string>

#include "launch/hardware/cpu_peak.h"

namespace launch {

namespace {

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

}  // namespace

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

}  // namespace launch
