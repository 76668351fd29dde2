#include "engine/profiler.h"

#include <atomic>
#include <mutex>

#include "engine/check.h"
#include "engine/device.h"

namespace engine {
namespace {
std::atomic<ProfileMode> g_mode{ProfileMode::kOff};
std::mutex g_mutex;
std::map<std::string, OpTime>& table() {
  static std::map<std::string, OpTime> t;
  return t;
}
// The timeline's ops as mark numbers; turned into times only when read, so
// recording never waits for the device.
struct PendingOp {
  const char* op;
  int begin_mark;
  int end_mark;
};
std::vector<PendingOp>& pending() {
  static std::vector<PendingOp> p;
  return p;
}
// Ops call ops (a backward calling a fill, say): only the outermost one of a
// thread is a timeline entry, so entries never overlap and the gaps between
// them are real.
thread_local int t_depth = 0;
}  // namespace

void OpProfiler::set_mode(ProfileMode mode) { g_mode.store(mode); }
ProfileMode OpProfiler::mode() { return g_mode.load(std::memory_order_relaxed); }

void OpProfiler::reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  table().clear();
  pending().clear();
  timing_marks_reset();
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

std::vector<TimelineOp> OpProfiler::timeline() {
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::vector<double> marks = timing_marks_elapsed_ms();
  std::vector<TimelineOp> ops;
  ops.reserve(pending().size());
  for (const PendingOp& p : pending()) {
    // A mark the device could not record (-1) drops its op, not the timeline.
    if (p.begin_mark < 0 || p.end_mark < 0) continue;
    ENGINE_CHECK(p.end_mark < static_cast<int>(marks.size()), "profiler: timing mark ", p.end_mark,
                 " was not recorded (", marks.size(), " marks)");
    ops.push_back({p.op, marks[p.begin_mark], marks[p.end_mark]});
  }
  return ops;
}

ScopedOpTimer::ScopedOpTimer(const char* op) : op_(op), mode_(OpProfiler::mode()) {
  if (mode_ == ProfileMode::kOff) return;
  if (mode_ == ProfileMode::kTimeline) {
    outermost_ = t_depth++ == 0;
    if (outermost_) begin_mark_ = timing_mark();
    return;
  }
  device_synchronize();
  start_ = std::chrono::steady_clock::now();
}

ScopedOpTimer::~ScopedOpTimer() {
  if (mode_ == ProfileMode::kOff) return;
  if (mode_ == ProfileMode::kTimeline) {
    --t_depth;
    if (!outermost_) return;
    const int end_mark = timing_mark();
    std::lock_guard<std::mutex> lock(g_mutex);
    pending().push_back({op_, begin_mark_, end_mark});
    return;
  }
  device_synchronize();
  OpProfiler::add(op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

}  // namespace engine
