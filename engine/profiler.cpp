#include "engine/profiler.h"

#include <atomic>
#include <mutex>

#include "engine/device.h"

namespace engine {
namespace {
std::atomic<bool> g_enabled{false};
std::mutex g_mutex;
std::map<std::string, OpTime>& table() {
  static std::map<std::string, OpTime> t;
  return t;
}
}  // namespace

void OpProfiler::enable(bool on) { g_enabled.store(on); }
bool OpProfiler::enabled() { return g_enabled.load(std::memory_order_relaxed); }

void OpProfiler::reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  table().clear();
}

std::map<std::string, OpTime> OpProfiler::snapshot() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return table();
}

void OpProfiler::add(const char* op, double seconds) {
  std::lock_guard<std::mutex> lock(g_mutex);
  OpTime& t = table()[op];
  t.seconds += seconds;
  t.calls += 1;
}

ScopedOpTimer::ScopedOpTimer(const char* op) : op_(op), active_(OpProfiler::enabled()) {
  if (!active_) return;
  device_synchronize();
  start_ = std::chrono::steady_clock::now();
}

ScopedOpTimer::~ScopedOpTimer() {
  if (!active_) return;
  device_synchronize();
  OpProfiler::add(op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

}  // namespace engine
