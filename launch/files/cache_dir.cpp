#include "launch/files/cache_dir.h"

#include <cstdlib>
#include <filesystem>

namespace launch {

std::string engine_cache_dir() {
  namespace fs = std::filesystem;
  if (const char* v = std::getenv("ENGINE_CACHE_DIR"); v && *v) return v;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "gpt-engine").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "gpt-engine").string();
  return "";
}

}  // namespace launch
