// The folder of the engine's caches, for measurements a machine keeps between
// runs (the CPU's peak, launch/hardware/cpu_peak.h; a calibration of the job's
// machine, launch/plan/cached_calibration.h):
//   ${ENGINE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpt-engine}
// "" when none of the three variables is set.
#pragma once

#include <string>

namespace launch {

std::string engine_cache_dir();

}  // namespace launch
