// Per-op time accounting, off by default, in one of two modes.
//
// Synchronised: every op of engine/ops.h adds its duration to a table keyed
// by op name, with the device synchronised before and after, so each op's
// time is its own but the launch gaps between ops vanish and every op starts
// on an idle GPU.
//
// Timeline: every top-level op queues a timing mark before and after itself
// on the device's stream (engine/device.h: a CUDA event, or the host clock
// when no GPU is in use), with no synchronisation, so the step runs as it
// does unprofiled. After the step, timeline() reads the marks back: each op's
// start and end on the device's own clock, and between them the gaps where
// the device ran none of the engine's ops (waiting for the host: launch
// overhead, host synchronisations, allocation) - which the synchronised mode
// cannot show (engine/op_timeline.h summarises them).
//
// Benchmarks use it to report which ops take a step's time; the training loop
// never enables it, and disabled it costs one branch per op.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace engine {

struct OpTime {
  double seconds = 0;
  long long calls = 0;
};

// One top-level op of a timeline, in milliseconds after the first mark.
struct TimelineOp {
  std::string op;
  double start_ms = 0;
  double end_ms = 0;
};

enum class ProfileMode { kOff, kSynchronised, kTimeline };

class OpProfiler {
 public:
  static void set_mode(ProfileMode mode);
  static ProfileMode mode();
  static void enable(bool on) { set_mode(on ? ProfileMode::kSynchronised : ProfileMode::kOff); }
  static bool enabled() { return mode() != ProfileMode::kOff; }
  // Clears the table and the timeline (and restarts the timing marks).
  static void reset();
  static std::map<std::string, OpTime> snapshot();
  static void add(const char* op, double seconds);
  // The timeline since reset(), in the order the ops were issued. Waits for
  // the device. Ops issued inside another op (nesting) are part of their
  // caller's time and not listed apart.
  static std::vector<TimelineOp> timeline();
};

// Times the enclosing scope as one call of `op` when profiling is on.
class ScopedOpTimer {
 public:
  explicit ScopedOpTimer(const char* op);
  ~ScopedOpTimer();
  ScopedOpTimer(const ScopedOpTimer&) = delete;
  ScopedOpTimer& operator=(const ScopedOpTimer&) = delete;

 private:
  const char* op_;
  ProfileMode mode_;
  bool outermost_ = false;
  int begin_mark_ = -1;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace engine
