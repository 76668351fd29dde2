// How much host memory a run may still take: what the start-up memory plan
// of a CPU run is checked against (launch/run/trainer_start.cpp), so a model
// that cannot fit is refused before anything is allocated.
#pragma once

#include <cstddef>

namespace launch {

// The kernel's estimate of memory available for new allocations without
// swapping (/proc/meminfo MemAvailable), else the free pages
// (sysconf(_SC_AVPHYS_PAGES) x page size); 0 when neither is known.
std::size_t host_available_bytes();

}  // namespace launch
