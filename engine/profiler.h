// Per-op wall-time accounting, off by default.
//
// When enabled, every op of engine/ops.h adds its duration (device
// synchronised before and after, so CUDA times are real) to a table keyed by
// op name. Benchmarks use it to report which ops take a step's time; the
// training loop never enables it, and disabled it costs one branch per op.
#pragma once

#include <chrono>
#include <map>
#include <string>

namespace engine {

struct OpTime {
  double seconds = 0;
  long long calls = 0;
};

class OpProfiler {
 public:
  static void enable(bool on);
  static bool enabled();
  static void reset();
  static std::map<std::string, OpTime> snapshot();
  static void add(const char* op, double seconds);
};

// Times the enclosing scope as one call of `op` when profiling is on.
class ScopedOpTimer {
 public:
  explicit ScopedOpTimer(const char* op);
  ~ScopedOpTimer();

 private:
  const char* op_;
  bool active_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace engine
