// Internals that launch/hardware/cpu_peak*.cpp share (cpu_peak.h is the
// public face); not for use outside this folder.
#pragma once

#include <string>

namespace launch::cpu_peak_internal {

// How measure_gemm_flops measures, as the cache's entries and the start-up line say it.
inline constexpr const char* kHow = "best of fp32 1024^3 and 2048^3 matmuls over about a second";

// "1 thread", "2 threads".
inline std::string plural(int n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

}  // namespace launch::cpu_peak_internal
