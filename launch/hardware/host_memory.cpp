#include "launch/hardware/host_memory.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace launch {

std::size_t host_available_bytes() {
  // MemAvailable counts the page cache the kernel can drop; the free pages
  // alone would refuse runs that fit on a machine that has read much.
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    unsigned long long kib = 0;
    if (fields >> kib) return static_cast<std::size_t>(kib) * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

}  // namespace launch
