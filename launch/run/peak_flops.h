// MFU and HFU (ARCHITECTURE.md, "Numbers and conventions"): the FLOPs of a step and the peak FLOP/s
// of one device they are measured against.
//
//   MFU = model FLOPs per step / (step time x devices x peak)
//   HFU = (model + recomputed) FLOPs per step / (the same)
//
// Model FLOPs follow model/flops.h (attention causal or full, --attention-flops);
// HFU adds what activation recomputation reruns. The peak is --peak-tflops,
// else the GPU's dense bf16 peak from the device table, else the CPU's peak
// measured once per machine and thread count and cached (launch/hardware/cpu_peak.h).
//
// Neither MFU nor HFU exceeds 100%: a measured CPU peak that a step beats (the
// measurement was unlucky) is raised to that step's rate, with one line
// saying so, and on a single-node job the cache entry is updated, so the next
// run starts from the better figure. A peak given or from the GPU table is
// used as it is.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <optional>
#include <ostream>

#include "launch/hardware/cpu_peak.h"
#include "launch/run/train_config.h"

namespace launch {

// FLOPs of one optimizer step, every device together.
struct StepFlops {
  double model = 0;     // the MFU numerator (model/flops.h)
  double hardware = 0;  // model + recomputed: the HFU numerator
};
StepFlops step_flops(const TrainConfig& config);

class PeakFlops {
 public:
  // --peak-tflops, else the GPU table, else the CPU's peak (collective over
  // `world` then). `out` (the logger's log, or null) gets one line saying
  // which peak and where it comes from.
  static PeakFlops for_run(const TrainConfig& config, int gpu, MPI_Comm world, std::ostream* out);

  // A peak given or from a table: used as it is.
  explicit PeakFlops(double per_device) : per_device_(per_device), reported_(per_device) {}
  // A measured CPU peak: raised to any step that beats it.
  explicit PeakFlops(CpuPeak cpu) : per_device_(cpu.per_rank), reported_(cpu.per_rank), cpu_(std::move(cpu)) {}

  double per_device() const { return per_device_; }

  struct Utilization {
    double mfu = 0;  // fractions of the peak
    double hfu = 0;
  };
  // The MFU and HFU of step `step` (1-based), which ran `flops` on `devices`
  // devices in `seconds`. A measured peak below the step's hardware rate per
  // device is raised to it first: `out` (if given) gets one line, and the
  // rank that keeps a single-node job's cache entry rewrites it.
  Utilization utilization(std::int64_t step, const StepFlops& flops, double seconds, int devices, std::ostream* out);

 private:
  void raise(std::int64_t step, double achieved, std::ostream* out);

  double per_device_;
  double reported_;             // the peak the log last stated (and the cache last holds)
  std::optional<CpuPeak> cpu_;  // set when measured on the CPU
};

}  // namespace launch
